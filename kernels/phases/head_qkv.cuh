//! The attention phase's helpers: head_qkv, which gathers one head's roped q and the
//! current position's k and v into shared memory for ops/attention.cuh and
//! ops/attend_own.cuh.
#pragma once
#include "smem_plan.cuh"
#include "ops/rope.cuh"

/// Head h's q, roped, into shared q_s and, `with_current`, the current position's k and
/// v of its KV head, roped and rounded to bf16 like the cache, into kv_s[0..HD) and
/// kv_s[HD..2HD): one pass of loads for all three and one barrier. Thread i < HD/2
/// ropes q's pair i, HD/2 ≤ i < HD k's pair i - HD/2 (both elements loaded at once),
/// HD ≤ i < 3HD/2 loads v elements (d, d + HD/2). `load2(a, b, x, y)`: elements a and b
/// of this step's q/k/v vector (L2 reads after the phase counter, or tagged words
/// polled). `rope_s`, `rope_c`: the sin and cos of pair threadIdx.x % (HD/2) at this
/// position (threads < HD).
template <class Load2>
__device__ __forceinline__ void head_qkv(Load2 load2, int h, bool with_current, float rope_s, float rope_c, float* q_s, float* kv_s) {
  static_assert(THREADS >= HD + HD / 2, "head_qkv: a thread per pair of q, k and v");
  constexpr int HALF = HD / 2;
  const int g = h / GROUP, t = threadIdx.x;
  if (t < (with_current ? HD : HALF)) {
    const bool is_k = t >= HALF;
    int a, b;
    rope_pair_of<HD>(t % HALF, a, b);
    const int base = is_k ? QD + g * HD : h * HD;
    float x0, x1;
    load2(base + a, base + b, x0, x1);
    float y0, y1;
    rope_rotate(x0, x1, rope_s, rope_c, y0, y1);
    if (is_k) {
      kv_s[a] = round_bf16(y0);
      kv_s[b] = round_bf16(y1);
    } else {
      q_s[a] = y0;
      q_s[b] = y1;
    }
  } else if (with_current && t < HD + HALF) {
    const int d = t - HD, base = QD + KVD + g * HD;
    float x0, x1;
    load2(base + d, base + d + HALF, x0, x1);
    kv_s[HD + d] = round_bf16(x0);
    kv_s[HD + d + HALF] = round_bf16(x1);
  }
  __syncthreads();
}
