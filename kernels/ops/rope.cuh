//! Rotary position embedding of one head in shared memory (matches transformers'
//! apply_rotary_pos_emb; the inverse frequencies, incl. llama3 scaling, come from the
//! host's cpu::rope::inv_freq so the formula exists once). Layout by PG_ROPE_INTERLEAVED:
//! 0 pairs i with i + head_dim/2 (HF rotate_half), 1 pairs 2i with 2i+1 (llama.cpp NORM).
#pragma once
#include "common.cuh"

/// sin and cos of pair `i`'s angle at position `pos`: an f32 product then an accurate
/// sincos, like the CPU reference. Depends on no activation, so the decode kernel
/// computes it before waiting for q/k/v.
template <int HD>
__device__ __forceinline__ void rope_angle(int i, int pos, const float* __restrict__ inv_freq, float& s, float& c) {
  const float angle = (float)pos * __ldg(inv_freq + i);
  sincosf(angle, &s, &c);
}

/// Rotates pair `i` (0 ≤ i < HD/2) of one head `h` by the angle whose sin and cos are given.
template <int HD>
__device__ __forceinline__ void rope_apply(float* h, int i, float s, float c) {
  constexpr int HALF = HD / 2;
#if PG_ROPE_INTERLEAVED
  const int a = 2 * i, b = 2 * i + 1;
#else
  const int a = i, b = i + HALF;
#endif
  const float x0 = h[a], x1 = h[b];
  h[a] = x0 * c - x1 * s;
  h[b] = x1 * c + x0 * s;
}

/// Rotates pair `i` (0 ≤ i < HD/2) of one head `h` at position `pos`; the decode
/// kernel (head_qkv) and the batched prefill (prefill.cu) share it.
template <int HD>
__device__ __forceinline__ void rope_pair(float* h, int i, int pos, const float* __restrict__ inv_freq) {
  float s, c;
  rope_angle<HD>(i, pos, inv_freq, s, c);
  rope_apply<HD>(h, i, s, c);
}
