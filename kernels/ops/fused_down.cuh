//! fuse_down: the down-projection folded into the gate/up phase (one dependent phase
//! less per layer). Each block owns chunks of CW consecutive FFN columns: its warps
//! compute those columns' SwiGLU activations, then every thread multiplies its rows
//! of W_down's chunk columns by them and adds the block's partial row sums into the
//! layer's accumulator with 64-bit integer atomics on fixed-point values, so the sum
//! over blocks is exact and independent of arrival order (same tokens run to run).
//! The next consumer reads residual + accumulator (fixed_to_f32).
#pragma once
#include "common.cuh"

/// Fixed-point scale of the accumulator: 2^32 (resolution 2.3e-10, range ±2^31).
constexpr float FIXED_SCALE = 4294967296.0f;

__device__ __forceinline__ long long f32_to_fixed(float v) { return __float2ll_rn(v * FIXED_SCALE); }
__device__ __forceinline__ float fixed_to_f32(long long a) { return __ll2float_rn(a) * (1.0f / FIXED_SCALE); }

/// Adds to a 64-bit accumulator without reading it back (a reduction at L2).
__device__ __forceinline__ void red_add_fixed(long long* p, long long v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(p), (unsigned long long)v);
}

/// Starts copying (cp.async) this thread's rows of W_down's column chunk `chunk`
/// (CW bf16 = CW/8 16-byte words per row) into `stage` ([rows per thread][CW/8][THREADS]).
template <int THREADS, int D, int F, int CW>
__device__ __forceinline__ void stage_down_chunk(const bf16_t* wd, int chunk, uint4* stage) {
  constexpr int WORDS = CW / 8;
  int q = 0;
  for (int i = threadIdx.x; i < D; i += THREADS, ++q) {
#pragma unroll
    for (int w = 0; w < WORDS; ++w)
      cp_async16(stage + (q * WORDS + w) * THREADS + threadIdx.x, wd + (size_t)i * F + (size_t)chunk * CW + w * 8);
  }
  cp_async_commit();
}

/// Row `i`'s partial of this block: Σ over the block's chunks (c = first, first + G, …)
/// of W_down[i, chunk columns] · act_s[chunk k][0..CW). Chunk 0 of the block from
/// `stage` (row slot q) when set, the others straight from memory.
template <int THREADS, int F, int CW>
__device__ __forceinline__ float down_row_partial(const bf16_t* wd, int i, int q, int first, int chunks, int G, const float* act_s,
                                                  const uint4* stage) {
  constexpr int WORDS = CW / 8;
  float part = 0.f;
  int k = 0;
  for (int c = first; c < chunks; c += G, ++k) {
    const float* a = act_s + k * CW;
#pragma unroll
    for (int w = 0; w < WORDS; ++w) {
      const uint4 wv = (stage && k == 0) ? stage[(q * WORDS + w) * THREADS + threadIdx.x]
                                         : ld_weight16(wd + (size_t)i * F + (size_t)c * CW + w * 8);
      part += dot8(wv, *reinterpret_cast<const float4*>(a + w * 8), *reinterpret_cast<const float4*>(a + w * 8 + 4));
    }
  }
  return part;
}
