//! The two moves of the in-kernel all-reduce of tensor parallelism and DTP (no
//! separate reduce phase, no flag per exchange): a producer stores each finished
//! partial row into slot `rank` of every receiving rank's buffer (NVLink peer stores
//! over a sentinel, sync.cuh), and every consumer sums the partials the schedule asks
//! for while it loads its input vector, spinning only on peer values not yet landed.
//! Standard all-reduces sum in rank order, so every block of every rank gets the same
//! bits. Which partials a layer adds (all-reduce, lane-local, delayed) is the engine's
//! DTP schedule, passed in as per-layer tables (layout.rs).
#pragma once
#include "common.cuh"
#include "sync.cuh"

/// How a layer's partials enter the residual (layout.rs XMode).
enum XMode { XM_ALL = PG_XM_ALL, XM_LOCAL = PG_XM_LOCAL, XM_DELAYED = PG_XM_DELAYED };

__device__ __forceinline__ float4 f4_add(float4 a, float4 b) { return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }

/// vec ← base + the partials of `now` ([TP][N] slots of this layer) and `late` (the
/// received layer's slots, or null) per `mode`, into shared `vec`. `base` is f32
/// (written by other blocks) or, when `base_bf16` is set, an embedding row. With `out`
/// set, this block also stores its share of the sum there (float4 chunks c with
/// c % writers == writer), the residual the next phase starts from.
template <int THREADS, int N, int TP>
__device__ __forceinline__ void load_combined(float* vec, const float* base, const bf16_t* base_bf16, const float* now,
                                              const float* late, int mode, float scale, int rank, float* out, int writer,
                                              int writers) {
  static_assert(N % 4 == 0, "vectors are loaded as float4");
  for (int i = threadIdx.x * 4; i < N; i += THREADS * 4) {
    float4 v;
    if (base_bf16) {
      const uint2 w = __ldg(reinterpret_cast<const uint2*>(base_bf16 + i));
      v = make_float4(bf16_lo(w.x), bf16_hi(w.x), bf16_lo(w.y), bf16_hi(w.y));
    } else {
      v = ld_shared_f32x4(base + i);
    }
    if (mode == XM_ALL) {
#pragma unroll
      for (int r = 0; r < TP; ++r)
        v = f4_add(v, r == rank ? ld_shared_f32x4(now + (size_t)r * N + i) : ld_peer_ready(now + (size_t)r * N + i));
    } else {
      float4 own = ld_shared_f32x4(now + (size_t)rank * N + i);
      if (mode == XM_LOCAL) own = make_float4(own.x * scale, own.y * scale, own.z * scale, own.w * scale);
      v = f4_add(v, own);
      if (late) {
#pragma unroll
        for (int r = 0; r < TP; ++r)
          if (r != rank) v = f4_add(v, ld_peer_ready(late + (size_t)r * N + i));
      }
    }
    *reinterpret_cast<float4*>(vec + i) = v;
    if (out && (i / 4) % writers == writer) *reinterpret_cast<float4*>(out + i) = v;
  }
}

/// Stores one partial value into slot `rank` of this rank's buffer and, with `send`,
/// of every other rank's (`dst[r]`: rank r's [TP][N] slots of this layer).
template <int TP, int N>
__device__ __forceinline__ void push_partial(float* const (&dst)[TP], int rank, int row, float v, bool send) {
#pragma unroll
  for (int r = 0; r < TP; ++r)
    if (send || r == rank) dst[r][(size_t)rank * N + row] = v;
}
