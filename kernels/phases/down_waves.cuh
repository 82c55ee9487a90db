//! The down projection's down_waves helpers: which blocks run the phase in segments,
//! and the loader warps that poll each segment's tagged activations into shared memory
//! and release the row warps segment by segment (named barriers).
#pragma once
#include "smem_plan.cuh"
#include "phases/common.cuh"
#include "ops/tagged.cuh"

/// down_waves: whether this block runs the down phase in segments: every warp has at
/// most one row group and at least its last warp has none (a loader).
__device__ __forceinline__ bool down_waves_here() {
  constexpr int GROUPS = (D + NR - 1) / NR;
  return DOWN_WAVES && GROUPS <= WARPS * row_grid() && (WARPS - 1) * row_grid() + (int)rank_block() >= GROUPS;
}

/// down_waves, a warp without a down row group: polls every segment of the tagged
/// activations into `vec` with the block's other loader warps (the top warps, from
/// `first_loader` on) and arrives on each segment's barrier as soon as its words are in.
__device__ __forceinline__ void load_down_segments(float* vec, const u64* act, u32 tag, int first_loader) {
  const int t = (int)threadIdx.x - first_loader * WARP_SIZE, n = THREADS - first_loader * WARP_SIZE;
  for (int seg = 0; seg < DW_SEGS; ++seg) {
#ifdef PG_CHAOS
    if (lane_id() == 0) chaos_delay(tag ^ (u32)seg ^ ((u32)warp_id() << 8));
    __syncwarp();
#endif
    const int begin = seg * DW_SEG, end = begin + DW_SEG < F ? begin + DW_SEG : F;
    load_tagged_part(vec, act, tag, begin, end, t, n);
    named_bar_arrive(1 + seg, THREADS);
  }
}
