//! The two moves of the in-kernel all-reduce of tensor parallelism (no separate
//! reduce phase): a producer pushes each finished partial row into slot `rank` of
//! every rank's receive buffer (NVLink peer stores), and every consumer sums all
//! ranks' partials while it loads its input vector. The sum runs in rank order, so
//! every block of every rank gets the same bits and the replicated residual streams
//! never drift apart. Publication and waits are in sync.cuh.
#pragma once
#include "common.cuh"

/// vec ← base + Σ_r parts[r·N + i] (i < N) into shared `vec`. `base` is f32 (written
/// by other blocks) or, when `base_bf16` is set, an embedding row. With `out` set,
/// this block also stores its share of the sum there (float4 chunks c with
/// c % writers == writer), the residual the next phase starts from.
template <int THREADS, int N, int TP>
__device__ __forceinline__ void load_sum_partials(float* vec, const float* base, const bf16_t* base_bf16, const float* parts,
                                                  float* out, int writer, int writers) {
  static_assert(N % 4 == 0, "vectors are loaded as float4");
  for (int i = threadIdx.x * 4; i < N; i += THREADS * 4) {
    float4 v;
    if (base_bf16) {
      const uint2 w = __ldg(reinterpret_cast<const uint2*>(base_bf16 + i));
      v = make_float4(bf16_lo(w.x), bf16_hi(w.x), bf16_lo(w.y), bf16_hi(w.y));
    } else {
      v = ld_shared_f32x4(base + i);
    }
#pragma unroll
    for (int r = 0; r < TP; ++r) {
      const float4 p = ld_shared_f32x4(parts + (size_t)r * N + i);
      v.x += p.x;
      v.y += p.y;
      v.z += p.z;
      v.w += p.w;
    }
    *reinterpret_cast<float4*>(vec + i) = v;
    if (out && (i / 4) % writers == writer) *reinterpret_cast<float4*>(out + i) = v;
  }
}

/// Stores one partial value into slot `rank` of every rank's receive buffer
/// (`dst[r]` is rank r's buffer of TP × N floats; rank `rank`'s own is local).
template <int TP, int N>
__device__ __forceinline__ void push_partial(float* const (&dst)[TP], int rank, int row, float v) {
#pragma unroll
  for (int r = 0; r < TP; ++r) dst[r][(size_t)rank * N + row] = v;
}
