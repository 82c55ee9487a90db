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

/// The two elements of pair `i` (0 ≤ i < HD/2) in a head's layout.
template <int HD>
__device__ __forceinline__ void rope_pair_of(int i, int& a, int& b) {
#if PG_ROPE_INTERLEAVED
  a = 2 * i;
  b = 2 * i + 1;
#else
  a = i;
  b = i + HD / 2;
#endif
}

/// (x0, x1) rotated by the angle whose sin and cos are given.
__device__ __forceinline__ void rope_rotate(float x0, float x1, float s, float c, float& y0, float& y1) {
  y0 = x0 * c - x1 * s;
  y1 = x1 * c + x0 * s;
}

/// Rotates pair `i` (0 ≤ i < HD/2) of one head `h` by the angle whose sin and cos are given.
template <int HD>
__device__ __forceinline__ void rope_apply(float* h, int i, float s, float c) {
  int a, b;
  rope_pair_of<HD>(i, a, b);
  rope_rotate(h[a], h[b], s, c, h[a], h[b]);
}

/// Rotates pair `i` (0 ≤ i < HD/2) of one head `h` at position `pos`; the decode
/// kernel (head_qkv) and the batched prefill (prefill.cu) share it.
template <int HD>
__device__ __forceinline__ void rope_pair(float* h, int i, int pos, const float* __restrict__ inv_freq) {
  float s, c;
  rope_angle<HD>(i, pos, inv_freq, s, c);
  rope_apply<HD>(h, i, s, c);
}
