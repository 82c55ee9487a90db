//! RMSNorm of one vector held in shared memory (matches transformers' LlamaRMSNorm
//! in float32: x / sqrt(mean(x²) + eps) * w). Every block that needs the normalised
//! vector computes it itself: it is a few KB from L2, cheaper than another dependency.
#pragma once
#include "common.cuh"

/// Loads `n` floats written by other blocks (global) into shared `s` (and `copy`, if set).
template <int THREADS>
__device__ __forceinline__ void load_vec_f32(float* s, const float* g, int n, float* copy = nullptr) {
  for (int i = threadIdx.x * 4; i < n; i += THREADS * 4) {
    float4 v = ld_shared_f32x4(g + i);
    *reinterpret_cast<float4*>(s + i) = v;
    if (copy) *reinterpret_cast<float4*>(copy + i) = v;
  }
}

/// Loads `n` bf16 values (read-only weights, e.g. an embedding row) into shared `s` (and
/// `copy`, if set) as floats.
template <int THREADS>
__device__ __forceinline__ void load_vec_bf16(float* s, const bf16_t* g, int n, float* copy = nullptr) {
  for (int i = threadIdx.x * 8; i < n; i += THREADS * 8) {
    uint4 w = ld_weight16(g + i);
    float4 a = make_float4(bf16_lo(w.x), bf16_hi(w.x), bf16_lo(w.y), bf16_hi(w.y));
    float4 b = make_float4(bf16_lo(w.z), bf16_hi(w.z), bf16_lo(w.w), bf16_hi(w.w));
    *reinterpret_cast<float4*>(s + i) = a;
    *reinterpret_cast<float4*>(s + i + 4) = b;
    if (copy) {
      *reinterpret_cast<float4*>(copy + i) = a;
      *reinterpret_cast<float4*>(copy + i + 4) = b;
    }
  }
}

/// In place: s ← s / sqrt(mean(s²) + eps) * w. `red` is per-warp scratch.
template <int THREADS, int N>
__device__ __forceinline__ void rmsnorm_smem(float* s, const float* __restrict__ w, float eps, float* red) {
  __syncthreads();
  float acc = 0.f;
  for (int i = threadIdx.x; i < N; i += THREADS) acc = fmaf(s[i], s[i], acc);
  const float ms = block_sum<THREADS>(acc, red) / (float)N;
  const float scale = 1.0f / sqrtf(ms + eps);
  for (int i = threadIdx.x; i < N; i += THREADS) s[i] = s[i] * scale * __ldg(w + i);
  __syncthreads();
}
