//! Token choice on the GPU with the CPU sampler's semantics (sampling.rs): repetition
//! penalty (applied by the LM head), then greedy, or temperature softmax over the
//! top-k candidates, min-p relative to the best, the top-p nucleus, and a draw with
//! the same counter-based uniform(seed, step). Plus the top log-probabilities of the
//! raw logits. Probabilities are fixed-point integers so every sum is exact.
#pragma once
#include "common.cuh"
#include "ops/lm_head.cuh"
#include "ops/select.cuh"

/// Fixed-point scale of a relative probability exp((l - max) / T) ∈ [0, 1].
#define PROB_ONE 4294967296.0f

/// splitmix64 finaliser over (seed, step): bit-identical to sampling::uniform.
__device__ __forceinline__ float uniform01(u64 seed, u64 step) {
  u64 z = seed ^ (step * 0x9E3779B97F4A7C15ull + 0xD1B54A32D192ED03ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (float)(z >> 40) / (float)(1u << 24);
}

struct SampleParams {
  float temperature;
  u32 top_k;
  float top_p;
  float min_p;
  u64 seed;
};

/// Candidates of a sampling draw, filtered by the stages decided so far.
struct CandSrc {
  const float* adj;
  float max;
  float temperature;
  float min_p;  // < 0: off
  bool use_k;
  Prefix k;
  bool use_p;
  Prefix p;
  bool weighted;
  __device__ __forceinline__ bool operator()(u32 i, u32& key, u64& w) const {
    const float a = ld_shared_f32(adj + i);
    key = order_key(a);
    if (use_k && !in_prefix(k, key, i)) return false;
    if (!weighted && min_p < 0.f && !use_p) {
      w = 1;
      return true;
    }
    const float e = expf((a - max) / temperature);
    if (e < min_p) return false;
    if (use_p && !in_prefix(p, key, i)) return false;
    w = weighted ? (u64)__float2ull_rz(e * PROB_ONE) : 1ull;
    return true;
  }
};

/// Raw logits for the top log-probabilities.
struct RawSrc {
  const float* logits;
  __device__ __forceinline__ bool operator()(u32 i, u32& key, u64& w) const {
    key = order_key(ld_shared_f32(logits + i));
    w = 1;
    return true;
  }
};

/// Draws the token for generated index `step` (whole block; returns the id to all).
template <int THREADS>
__device__ u32 sample_draw(const float* adj, u32 n, float adj_max, const SampleParams& sp, u64 step, SelectSmem* sm) {
  CandSrc c{adj, adj_max, sp.temperature, -1.f, false, Prefix{0, 0}, false, Prefix{0, 0}, false};
  // top-k: the k best penalised logits (ties to the lower index), as top_k_indices.
  if (sp.top_k > 0 && sp.top_k < n) {
    c.k = select_prefix<THREADS>(c, n, sp.top_k, sm);
    c.use_k = true;
  }
  c.weighted = true;
  c.min_p = 0.f;
  const u64 norm = select_total<THREADS>(c, n, sm);  // softmax denominator over the candidates
  // min-p: p ≥ min_p · p_best ⇔ exp((l - max)/T) ≥ min_p, since p_best's term is 1.
  c.min_p = sp.min_p;
  if (sp.top_p < 1.f) {
    const u64 kept = select_total<THREADS>(c, n, sm);
    u64 want = (u64)ceil((double)sp.top_p * (double)norm);
    if (want < 1) want = 1;
    if (kept >= want) {
      c.p = select_prefix<THREADS>(c, n, want, sm);
      c.use_p = true;
    }
  }
  const u64 mass = select_total<THREADS>(c, n, sm);
  const float u = uniform01(sp.seed, step);
  const u64 target = (u64)((double)u * (double)mass);  // < mass since u < 1
  // The first candidate whose running mass exceeds the target.
  return select_prefix<THREADS>(c, n, target + 1, sm).last;
}

/// The `want` best raw logits as (id, logit), best first, ties to the lower index,
/// into ids/vals (thread 0's view is complete after the call's final barrier).
template <int THREADS>
__device__ void top_logits(const float* logits, u32 n, u32 want, SelectSmem* sm, u32* ids, float* vals, u32* count) {
  const RawSrc src{logits};
  const Prefix p = select_prefix<THREADS>(src, n, want, sm);
  if (threadIdx.x == 0) *count = 0;
  __syncthreads();
  for (u32 i = threadIdx.x; i < n; i += THREADS) {
    const float v = ld_shared_f32(logits + i);
    if (in_prefix(p, order_key(v), i)) {
      const u32 slot = atomicAdd(count, 1u);
      if (slot < want) {
        ids[slot] = i;
        vals[slot] = v;
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const u32 m = min(*count, want);
    for (u32 a = 1; a < m; ++a) {  // insertion sort of ≤ 20 entries
      const u32 id = ids[a];
      const float v = vals[a];
      u32 b = a;
      while (b > 0 && (vals[b - 1] < v || (vals[b - 1] == v && ids[b - 1] > id))) {
        ids[b] = ids[b - 1];
        vals[b] = vals[b - 1];
        --b;
      }
      ids[b] = id;
      vals[b] = v;
    }
    *count = m;
  }
  __syncthreads();
}
