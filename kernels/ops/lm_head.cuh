//! Per-row bookkeeping of the LM head: logit bias, repetition penalty (transformers /
//! llama.cpp rule: divide positive logits, multiply negative ones, of seen tokens),
//! OpenAI's presence and frequency penalties over the generated tokens,
//! and the running statistics a block reports to the sampler: the raw logits' max
//! and sum of exponentials (for log-probabilities) and the best penalised logit.
#pragma once
#include "common.cuh"

struct LmStats {
  float raw_max;
  float raw_sum;  // Σ exp(logit - raw_max)
  float adj_max;
  u32 adj_idx;
};

__device__ __forceinline__ LmStats lm_stats_empty() { return LmStats{NEG_INF, 0.f, NEG_INF, 0xffffffffu}; }

__device__ __forceinline__ float penalise(float logit, bool seen, float penalty) {
  if (!seen) return logit;
  return logit > 0.f ? logit / penalty : logit * penalty;
}

/// OpenAI's penalties for a token generated `count` times, rounded step by step as the
/// CPU sampler (no fused multiply-add) so both choose the same tokens.
__device__ __forceinline__ float openai_penalise(float logit, u32 count, float presence, float frequency) {
  if (count == 0) return logit;
  return __fsub_rn(logit, __fadd_rn(__fmul_rn((float)count, frequency), presence));
}

/// Adds one row. Rows arrive in increasing order per warp, so ties keep the lower index.
__device__ __forceinline__ void lm_stats_push(LmStats& st, u32 row, float logit, float adj) {
  if (logit > st.raw_max) {
    st.raw_sum = st.raw_sum * expf(st.raw_max - logit) + 1.f;
    st.raw_max = logit;
  } else {
    st.raw_sum += expf(logit - st.raw_max);
  }
  if (adj > st.adj_max || (adj == st.adj_max && row < st.adj_idx)) {
    st.adj_max = adj;
    st.adj_idx = row;
  }
}

/// Merges two statistics (associative; callers merge in a fixed order for determinism).
__device__ __forceinline__ LmStats lm_stats_merge(LmStats a, LmStats b) {
  LmStats r;
  r.raw_max = fmaxf(a.raw_max, b.raw_max);
  r.raw_sum = (a.raw_sum > 0.f ? a.raw_sum * expf(a.raw_max - r.raw_max) : 0.f) +
              (b.raw_sum > 0.f ? b.raw_sum * expf(b.raw_max - r.raw_max) : 0.f);
  const bool take_b = b.adj_max > a.adj_max || (b.adj_max == a.adj_max && b.adj_idx < a.adj_idx);
  r.adj_max = take_b ? b.adj_max : a.adj_max;
  r.adj_idx = take_b ? b.adj_idx : a.adj_idx;
  return r;
}

__device__ __forceinline__ LmStats lm_stats_shfl_xor(LmStats s, int offset) {
  LmStats o;
  o.raw_max = __shfl_xor_sync(FULL_MASK, s.raw_max, offset);
  o.raw_sum = __shfl_xor_sync(FULL_MASK, s.raw_sum, offset);
  o.adj_max = __shfl_xor_sync(FULL_MASK, s.adj_max, offset);
  o.adj_idx = __shfl_xor_sync(FULL_MASK, s.adj_idx, offset);
  return o;
}

/// Warp-wide merge in a fixed butterfly order; every lane gets the result.
__device__ __forceinline__ LmStats lm_stats_warp_merge(LmStats s) {
#pragma unroll
  for (int offset = 1; offset < WARP_SIZE; offset <<= 1) {
    const LmStats o = lm_stats_shfl_xor(s, offset);
    // Merge lower-lane first so both partners compute the same bits.
    s = (lane_id() & offset) ? lm_stats_merge(o, s) : lm_stats_merge(s, o);
  }
  return s;
}

/// A block's statistics as stored for the sampler: 4 floats per block.
__device__ __forceinline__ float4 lm_stats_pack(LmStats s) {
  return make_float4(s.raw_max, s.raw_sum, s.adj_max, __uint_as_float(s.adj_idx));
}

__device__ __forceinline__ LmStats lm_stats_unpack(float4 v) {
  return LmStats{v.x, v.y, v.z, __float_as_uint(v.w)};
}
