//! Matrix rows times several input vectors in one pass over the weights: NR rows of a
//! bf16 `[rows, K]` row-major matrix against NV float vectors in shared memory (K
//! floats apart), each 16-byte word of a row loaded once and used NV times. Per vector
//! the summation order is warp_rows_dot's (ops/matvec.cuh), so each vector's sums are
//! the bits a single-vector pass gives. The building block of steps that carry several
//! tokens per weight pass (concurrent requests, drafted tokens).
#pragma once
#include "common.cuh"

/// acc[v][r] = W[row0 + r, :] · xs[v·K ..] for r < NR, v < NV (rows past `rows` are
/// clamped and must be ignored by the caller). Every lane returns the full sums.
template <int K, int NR, int NV, int UNROLL>
__device__ __forceinline__ void warp_rows_dot_multi(const bf16_t* __restrict__ W, int row0, int rows, const float* xs, float (&acc)[NV][NR]) {
  static_assert(K % 8 == 0, "rows must be whole 16-byte words");
  constexpr int CHUNKS = K / 8;
  constexpr int ITERS = (CHUNKS + WARP_SIZE - 1) / WARP_SIZE;
  const int lane = lane_id();
  const bf16_t* rowp[NR];
#pragma unroll
  for (int r = 0; r < NR; ++r) rowp[r] = W + (size_t)min(row0 + r, rows - 1) * K;
#pragma unroll
  for (int v = 0; v < NV; ++v)
#pragma unroll
    for (int r = 0; r < NR; ++r) acc[v][r] = 0.f;
#pragma unroll UNROLL
  for (int it = 0; it < ITERS; ++it) {
    const int c = it * WARP_SIZE + lane;
    if (CHUNKS % WARP_SIZE == 0 || c < CHUNKS) {
      uint4 w[NR];
#pragma unroll
      for (int r = 0; r < NR; ++r) w[r] = ld_weight16(rowp[r] + c * 8);
#pragma unroll
      for (int v = 0; v < NV; ++v) {
        const float4 xa = *reinterpret_cast<const float4*>(xs + v * K + c * 8);
        const float4 xb = *reinterpret_cast<const float4*>(xs + v * K + c * 8 + 4);
#pragma unroll
        for (int r = 0; r < NR; ++r) acc[v][r] += dot8(w[r], xa, xb);
      }
    }
  }
#pragma unroll
  for (int v = 0; v < NV; ++v)
#pragma unroll
    for (int r = 0; r < NR; ++r) acc[v][r] = warp_sum(acc[v][r]);
}
