//! Matrix-vector rows for one warp: NR rows of a bf16 `[rows, K]` row-major matrix
//! times a float vector in shared memory. 16-byte non-coherent loads, NR × UNROLL of
//! them in flight per lane; the grid spreads row groups warp-major over every SM.
#pragma once
#include "common.cuh"

/// 16-byte loads in flight per lane per row while streaming a row (PG_UNROLL).
constexpr int ROW_UNROLL = PG_UNROLL;

/// The default hook of the row loops: called with each iteration's index before that
/// iteration reads the input vector (down_waves waits there for the next segment of
/// its input); this one does nothing and compiles away.
struct NoWait {
  __device__ __forceinline__ void operator()(int) const {}
};

/// acc[r] = W[row0 + r, :] · xs for r < NR (rows past `rows` are clamped and must be
/// ignored by the caller). Rows are K wide and STRIDE elements apart (a column slice of a
/// wider matrix when STRIDE > K). Every lane returns the full sums.
template <int K, int NR, int STRIDE = K, class Wait = NoWait>
__device__ __forceinline__ void warp_rows_dot(const bf16_t* __restrict__ W, int row0, int rows, const float* xs,
                                              float (&acc)[NR], Wait wait = {}) {
  static_assert(K % 8 == 0, "rows must be whole 16-byte words");
  constexpr int CHUNKS = K / 8;
  constexpr int ITERS = (CHUNKS + WARP_SIZE - 1) / WARP_SIZE;
  const int lane = lane_id();
  const bf16_t* rowp[NR];
#pragma unroll
  for (int r = 0; r < NR; ++r) {
    acc[r] = 0.f;
    const int row = min(row0 + r, rows - 1);
    rowp[r] = W + (size_t)row * STRIDE;
  }
#pragma unroll ROW_UNROLL
  for (int it = 0; it < ITERS; ++it) {
    const int c = it * WARP_SIZE + lane;
    wait(it);
    if (CHUNKS % WARP_SIZE == 0 || c < CHUNKS) {
      uint4 w[NR];
#pragma unroll
      for (int r = 0; r < NR; ++r) w[r] = ld_weight16(rowp[r] + c * 8);
      const float4 xa = *reinterpret_cast<const float4*>(xs + c * 8);
      const float4 xb = *reinterpret_cast<const float4*>(xs + c * 8 + 4);
#pragma unroll
      for (int r = 0; r < NR; ++r) acc[r] += dot8(w[r], xa, xb);
    }
  }
#pragma unroll
  for (int r = 0; r < NR; ++r) acc[r] = warp_sum(acc[r]);
}

/// True when this block owns at least one row group of a `rows`-row matrix whose groups
/// go to the first `grid` blocks (default: the whole grid).
template <int NR>
__device__ __forceinline__ bool block_has_rows(int rows, int grid = rank_grid()) {
  return (int)rank_block() < min(grid, (rows + NR - 1) / NR);
}

// ---- staging (decode.cu STAGE_CAP) ----------------------------------------------------------
// Weights never depend on the data, so a warp can start copying its first row group
// into shared memory (cp.async, no registers held while in flight) before its block
// waits on the phase's dependency counter, and read it from there after the wait: the
// group's DRAM round trip overlaps the wait. The warp's slot is a ring of N iteration
// stages: a row longer than N iterations keeps streaming through it (stage `it % N` is
// refilled with iteration it + N as soon as it is used), so N iterations stay in flight
// per lane instead of the register path's ROW_UNROLL. Each lane copies exactly the
// 16-byte words it later reads, one commit group per iteration, so its own
// cp.async.wait_group is the only ordering needed. Read-only weights through L2 (.cg),
// so copying them before the acquire is safe. Summation order is warp_rows_dot's, so
// results are bit-identical to grid_rows.

/// Ring stages (iterations of one 16-byte word per lane per row) of a warp's slot, laid
/// out [N][NR][WARP_SIZE] uint4 (conflict-free reads).
template <int K, int NR, int CAP>
struct RowStage {
  static constexpr int CHUNKS = K / 8;
  static constexpr int ITERS = (CHUNKS + WARP_SIZE - 1) / WARP_SIZE;
  static constexpr int N = CAP < ITERS ? CAP : ITERS;
  /// uint4 words of one warp's slot.
  static constexpr int WORDS = N * NR * WARP_SIZE;
};

/// Iteration `it` of rows row0.. (this lane's word of each row) into ring stage `it % N`,
/// as one commit group (empty past the row's end, so every lane commits alike).
template <int K, int NR, int CAP>
__device__ __forceinline__ void stage_iter(const bf16_t* __restrict__ W, int row0, int rows, int it, uint4* slot) {
  using S = RowStage<K, NR, CAP>;
  const int c = it * WARP_SIZE + lane_id();
  if (it < S::ITERS && (S::CHUNKS % WARP_SIZE == 0 || c < S::CHUNKS)) {
#pragma unroll
    for (int r = 0; r < NR; ++r)
      cp_async16_weight(slot + ((it % S::N) * NR + r) * WARP_SIZE + lane_id(), W + (size_t)min(row0 + r, rows - 1) * K + c * 8);
  }
  cp_async_commit();
}

/// Starts copying the first N iterations of row group `g` into `slot` (a warp whose
/// group is past the matrix copies nothing). Always N commit groups, copies or not, so
/// every warp can count the groups a later stage leaves pending. No shuffles, no waits.
template <int K, int NR, int CAP>
__device__ __forceinline__ void stage_group(const bf16_t* __restrict__ W, int rows, int g, uint4* slot) {
  using S = RowStage<K, NR, CAP>;
  const bool mine = g * NR < rows;
#pragma unroll
  for (int it = 0; it < S::N; ++it) {
    if (mine) stage_iter<K, NR, CAP>(W, g * NR, rows, it, slot);
    else cp_async_commit();
  }
}

/// stage_group of this warp's first `grid_rows` group (warp_id() · grid + rank_block(); a
/// block of the row grid).
template <int K, int NR, int WARPS, int CAP>
__device__ __forceinline__ void stage_rows(const bf16_t* __restrict__ W, int rows, uint4* slot, int grid = rank_grid()) {
  stage_group<K, NR, CAP>(W, rows, warp_id() * grid + rank_block(), slot);
}

/// warp_rows_dot of the group stage_group started in `slot` (same row0), streaming the
/// rest of the rows through the ring; same summation order, so the same bits. With
/// `ahead`, the PENDING commit groups issued after this group's (the next phase's stage,
/// stage_ahead) may stay in flight until the ring reads its first refill, which was
/// committed after them.
template <int K, int NR, int CAP, int PENDING = 0, class Wait = NoWait>
__device__ __forceinline__ void warp_rows_dot_staged(const bf16_t* __restrict__ W, int row0, int rows, const float* xs, const uint4* slot,
                                                     float (&acc)[NR], bool ahead = false, Wait wait = {}) {
  using S = RowStage<K, NR, CAP>;
  constexpr int CHUNKS = S::CHUNKS;
  const int lane = lane_id();
#pragma unroll
  for (int r = 0; r < NR; ++r) acc[r] = 0.f;
  uint4* ring = const_cast<uint4*>(slot);
  // A row that fits the slot needs one wait and no refills (per-iteration waits measured
  // ~2 % slower on SmolLM2-135M, whose rows all fit).
  constexpr bool RING = S::ITERS > S::N;
  if constexpr (!RING) {
    if (PENDING > 0 && ahead) cp_async_wait_group<PENDING>();
    else cp_async_wait_all();
  }
  constexpr int UNROLL = RING ? 2 : S::ITERS;
#pragma unroll UNROLL
  for (int it = 0; it < S::ITERS; ++it) {
    // Iteration `it`'s group is done once at most N-1 later groups are pending (every
    // iteration commits one, so the count is the same for every lane); the first N also
    // have the next phase's PENDING groups after them.
    if constexpr (RING) {
      if (PENDING > 0 && ahead && it < S::N) cp_async_wait_group<S::N - 1 + PENDING>();
      else cp_async_wait_group<S::N - 1>();
    }
    const int c = it * WARP_SIZE + lane;
    wait(it);
    if (CHUNKS % WARP_SIZE == 0 || c < CHUNKS) {
      const float4 xa = *reinterpret_cast<const float4*>(xs + c * 8);
      const float4 xb = *reinterpret_cast<const float4*>(xs + c * 8 + 4);
#pragma unroll
      for (int r = 0; r < NR; ++r) acc[r] += dot8(ring[((it % S::N) * NR + r) * WARP_SIZE + lane], xa, xb);
    }
    // The stage just read (into registers, consumed above) takes iteration it + N.
    if constexpr (RING) stage_iter<K, NR, CAP>(W, row0, rows, it + S::N, ring);
  }
  // Every lane of the warp gets here (the loop's bounds are compile-time constants).
#pragma unroll
  for (int r = 0; r < NR; ++r) acc[r] = warp_sum(acc[r]);
}

/// Runs `epi(row, value)` (on lane 0) for every row of W that this warp owns, with
/// row groups of NR spread warp-major over the grid so small matrices still touch
/// every SM. With `slot` (CAP > 0), the warp's first group is read from what
/// stage_rows copied there. Group loop bounds depend only on the warp's index:
/// warp-uniform. Returns nothing; `epi` stores the results. `ahead`, PENDING: see
/// warp_rows_dot_staged. `grid`: the groups go to the first `grid` blocks only.
template <int K, int NR, int WARPS, int CAP = 0, int PENDING = 0, class Epi, class Wait = NoWait>
__device__ __forceinline__ void grid_rows(const bf16_t* __restrict__ W, int rows, const float* xs, Epi epi, const uint4* slot = nullptr,
                                          bool ahead = false, int grid = rank_grid(), Wait wait = {}) {
  const int gw = warp_id() * grid + rank_block();  // callers are blocks of the row grid
  const int nw = WARPS * grid;
  const int groups = (rows + NR - 1) / NR;
  for (int g = gw; g < groups; g += nw) {
    float acc[NR];
    if constexpr (CAP > 0) {
      if (slot && g == gw) warp_rows_dot_staged<K, NR, CAP, PENDING>(W, g * NR, rows, xs, slot, acc, ahead, wait);
      else warp_rows_dot<K, NR, K>(W, g * NR, rows, xs, acc, wait);
    } else {
      warp_rows_dot<K, NR, K>(W, g * NR, rows, xs, acc, wait);
    }
    if (lane_id() == 0) {
#pragma unroll
      for (int r = 0; r < NR; ++r)
        if (g * NR + r < rows) epi(g * NR + r, acc[r]);
    }
  }
}

