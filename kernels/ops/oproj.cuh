//! The o-projection of one attention head inside the attention item's tail
//! (PG_FUSE_O, off by default): the block that finishes head h's output multiplies it
//! by head h's HD columns of W_o and writes a per-head partial D-vector; the next phase
//! adds residual + Σ_h partials while it loads its input (allreduce.cuh's
//! load_combined), so the separate o-projection phase and its dependency wait go away.
//! W_o stays as the loader uploads it, row-major [D, QD] (layout.rs, LayerSlot::Wo):
//! head h's slice is, for each row r, the HD contiguous bf16 at r·QD + h·HD — one whole
//! 128-byte line per row at HD = 64 — so the strided read streams like a copy and no
//! re-laid second copy of W_o is needed.
#pragma once
#include "common.cuh"
#include "ops/attention.cuh"

/// part[r] = Σ_d W_o[r, h·HD + d] · out_s[d] for r < D (whole block; `out_s` in shared
/// memory, 16-byte aligned, HD floats). Lane groups of pow2(HD/8) lanes take one row
/// each, ROWS rows' loads in flight per group before any is used.
template <int THREADS, int HD, int D, int QD>
__device__ __forceinline__ void head_o_proj(const bf16_t* __restrict__ wo, int h, const float* out_s, float* part) {
  constexpr int CHUNKS = HD / 8;
  constexpr int LANES = pow2_ceil(CHUNKS);
  constexpr int PER_WARP = WARP_SIZE / LANES;
  constexpr int WARPS = THREADS / WARP_SIZE;
  constexpr int ROWS = 8;
  constexpr int WARP_ROWS = PER_WARP * ROWS;
  static_assert(HD % 8 == 0 && CHUNKS <= WARP_SIZE, "head_dim must be a multiple of 8, at most 256");
  const int lane = lane_id(), warp = warp_id();
  const int sub = lane / LANES, sl = lane % LANES;
  const bool active = sl < CHUNKS;
  float4 xa = make_float4(0.f, 0.f, 0.f, 0.f), xb = xa;
  if (active) {
    xa = *reinterpret_cast<const float4*>(out_s + sl * 8);
    xb = *reinterpret_cast<const float4*>(out_s + sl * 8 + 4);
  }
  const bf16_t* col = wo + (size_t)h * HD + sl * 8;
  // The loop bound depends on the warp only: every lane of a warp runs every
  // group_sum below (full-mask shuffles); rows past D load nothing and store nothing.
  for (int r0 = warp * WARP_ROWS; r0 < D; r0 += WARPS * WARP_ROWS) {
    uint4 w[ROWS];
#pragma unroll
    for (int u = 0; u < ROWS; ++u) {
      const int r = r0 + u * PER_WARP + sub;
      w[u] = make_uint4(0, 0, 0, 0);
      if (active && r < D) w[u] = ld_weight16(col + (size_t)r * QD);
    }
#pragma unroll
    for (int u = 0; u < ROWS; ++u) {
      const float s = group_sum<LANES>(dot8(w[u], xa, xb));
      const int r = r0 + u * PER_WARP + sub;
      if (sl == 0 && r < D) part[r] = s;
    }
  }
}

/// With PG_PREFETCH: before the attention item waits for q/k/v, pull head h's W_o slice
/// (D rows × HD·2 bytes) into L2, so the tail after the attention reads it from L2
/// instead of paying DRAM latency on the critical path. Hints only: no waits, no shuffles.
template <int THREADS, int HD, int D, int QD>
__device__ __forceinline__ void head_o_prefetch(const bf16_t* __restrict__ wo, int h) {
  constexpr int LINE_ELEMS = 64;  // 128 bytes of bf16
  constexpr int LINES = (HD + LINE_ELEMS - 1) / LINE_ELEMS;
  for (int i = threadIdx.x; i < D * LINES; i += THREADS)
    prefetch_l2(wo + (size_t)(i / LINES) * QD + (size_t)h * HD + (i % LINES) * LINE_ELEMS);
}
