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

/// In place: s ← s / sqrt(mean(s²) + eps) · weight(k, i) for element i = threadIdx.x + k·THREADS.
template <int THREADS, int N, class Weight>
__device__ __forceinline__ void rmsnorm_apply(float* s, Weight weight, float eps, float* red) {
  constexpr int PER_THREAD = (N + THREADS - 1) / THREADS;
  __syncthreads();
  float acc = 0.f;
  for (int i = threadIdx.x; i < N; i += THREADS) acc = fmaf(s[i], s[i], acc);
  const float ms = block_sum<THREADS>(acc, red) / (float)N;
  const float scale = 1.0f / sqrtf(ms + eps);
#pragma unroll
  for (int k = 0; k < PER_THREAD; ++k) {
    const int i = threadIdx.x + k * THREADS;
    if (i < N) s[i] = s[i] * scale * weight(k, i);
  }
  __syncthreads();
}

/// In place: s ← s / sqrt(mean(s²) + eps) * w. `red` is per-warp scratch.
template <int THREADS, int N>
__device__ __forceinline__ void rmsnorm_smem(float* s, const float* __restrict__ w, float eps, float* red) {
  rmsnorm_apply<THREADS, N>(s, [&](int, int i) { return __ldg(w + i); }, eps, red);
}

/// This thread's elements of a norm's weight vector (i = threadIdx.x + k·THREADS), loaded
/// into registers before a dependency wait so the norm after it reads no memory.
template <int THREADS, int N>
struct NormWeights {
  float w[(N + THREADS - 1) / THREADS];
};

template <int THREADS, int N>
__device__ __forceinline__ NormWeights<THREADS, N> load_norm_weights(const float* __restrict__ w) {
  NormWeights<THREADS, N> nw;
#pragma unroll
  for (int k = 0; k < (N + THREADS - 1) / THREADS; ++k) {
    const int i = threadIdx.x + k * THREADS;
    nw.w[k] = i < N ? __ldg(w + i) : 0.f;
  }
  return nw;
}

/// rmsnorm_smem with the weights load_norm_weights read earlier (the same bits).
template <int THREADS, int N>
__device__ __forceinline__ void rmsnorm_smem(float* s, const NormWeights<THREADS, N>& nw, float eps, float* red) {
  rmsnorm_apply<THREADS, N>(s, [&](int k, int) { return nw.w[k]; }, eps, red);
}
