//! What every matrix phase of the decode kernel shares: which blocks own rows, when a
//! phase stages its first row group (and ahead of which phase), the norm of its input,
//! how its input arrives, and how it ends.
#pragma once
#include "smem_plan.cuh"
#include "ops/matvec.cuh"
#include "ops/qmatvec.cuh"
#include "ops/rmsnorm.cuh"
#include "ops/tagged.cuh"
#include "ops/trace.cuh"

/// Blocks that take the layers' matrix rows: all, or all but attn_own's.
__device__ __forceinline__ int row_grid() {
  if constexpr (ATTN_OWN == 0) return (int)rank_grid();
  else return (int)rank_grid() > 2 * ATTN_OWN ? (int)rank_grid() - ATTN_OWN : (int)rank_grid();
}

/// This block owns rows of a layer matrix of `rows` rows.
__device__ __forceinline__ bool has_rows(int rows) { return block_has_rows<NR>(rows, row_grid()); }

/// Whether a `rows`-row matrix phase stages: only when every warp has at most one row
/// group. A streaming-bound phase (several groups per warp) gains nothing from its first
/// group landing early, and its copies, issued by every SM at once, delay the counter
/// polls (measured: Llama-3.2-1B's gate/up first wake 0.3 → 3.1 µs after the last arrival).
__device__ __forceinline__ bool stage_fits(int rows) { return STAGE && rows <= row_grid() * WARPS * NR; }

/// Layer slot FMTS: one format byte per matrix (QR_*), 0 everywhere for a bf16 model.
enum QRole { QR_Q = 0, QR_K = 1, QR_V = 2, QR_O = 3, QR_GU = 4, QR_DOWN = 5 };
__device__ __forceinline__ u64 layer_fmts(const u64* lw) {
  if constexpr (QUANT) return __ldg(lw + PG_LW_FMTS);
  else return 0;
}
__device__ __forceinline__ u32 fmt_of(u64 fmts, int role) { return (u32)(fmts >> (8 * role)) & 0xFFu; }
/// Whether layer `lw`'s q/k/v matrix has a quantized segment (it then runs qmat_grid_rows).
__device__ __forceinline__ bool qkv_quant(u64 fmts) { return (fmts & 0xFFFFFFu) != 0; }
/// The fused q/k/v matrix's three segments.
__device__ __forceinline__ QMat qkv_mat(const void* w, u64 fmts) {
  return QMat{reinterpret_cast<const unsigned char*>(w), {fmt_of(fmts, QR_Q), fmt_of(fmts, QR_K), fmt_of(fmts, QR_V)}, {QD, QD + KVD, QKV}};
}

/// This warp's first row group of a `ROWS`-row phase (`w`, segments `q`) into its slot
/// (bf16) or into its part of `set` (quantized), always as the N commit groups of a bf16
/// stage, so a later phase counts the groups it leaves pending alike for both.
template <int K, int ROWS>
__device__ __forceinline__ void stage_phase(const bf16_t* w, uint4* slot, const QMat& q, const QSet& set) {
  if (QUANT && q_any(q)) {
    // Rows it does not copy (4-bit formats) it asks L2 for.
    if (!q_stage_group<K, NR, WARPS>(q, ROWS, set, row_grid())) q_prefetch_group<K, NR>(q, ROWS, q_first_group(row_grid()));
#pragma unroll
    for (int i = 0; i < RowStage<K, NR, STAGE_CAP>::N; ++i) cp_async_commit();
  } else {
    stage_rows<K, NR, WARPS, STAGE_CAP>(w, ROWS, slot, row_grid());
  }
}

/// Before waiting for a phase's inputs, start copying this warp's first row group into
/// its slot or set (stage_fits).
template <int K, int ROWS>
__device__ __forceinline__ void maybe_stage(const bf16_t* w, uint4* slot, const QMat& q, const QSet& set) {
  if constexpr (STAGE) {
    if (stage_fits(ROWS)) stage_phase<K, ROWS>(w, slot, q, set);
  }
}

/// grid_rows of a matrix phase, reading what maybe_stage copied; a quantized matrix
/// (`q` has a non-bf16 segment) runs qmat_grid_rows instead, preparing its input in `xq`
/// and reading its staged group from `set`, or streaming several through it.
/// `ahead`: the next phase's stage (PENDING commit groups) was started after this one's.
template <int K, int PENDING = 0, class Epi, class Wait = NoWait>
__device__ __forceinline__ void phase_rows(const bf16_t* w, int rows, const float* xs, const uint4* slot, Epi epi, bool ahead = false,
                                           Wait wait = {}, const QMat* q = nullptr, unsigned char* xq = nullptr,
                                           QSet set = {}) {
  if (QUANT && q) {
    // A phase that stages reads its group from `set`; one with several groups per warp streams them through it.
    const bool one = stage_fits(rows);
    qmat_grid_rows<K, NR, WARPS, PENDING>(*q, rows, xs, xq, epi, row_grid(), STAGE && one ? set : QSet{}, ahead, one ? QSet{} : set);
    return;
  }
  grid_rows<K, NR, WARPS, STAGE_CAP, PENDING>(w, rows, xs, epi, stage_fits(rows) ? slot : nullptr, ahead, row_grid(), wait);
}

/// stage_ahead: whether this block stages a `rows`-row phase (it owns rows and the phase stages).
__device__ __forceinline__ bool stages_ahead(int rows) { return AHEAD && has_rows(rows) && stage_fits(rows); }

/// stage_ahead: starts this warp's copy of a phase's first row group into `slot` (or
/// `set`, quantized), ahead of the phase before it; returns whether it did (the earlier
/// phase then leaves the copy's groups pending).
template <int K, int ROWS>
__device__ __forceinline__ bool stage_ahead(const bf16_t* w, uint4* slot, const QMat& q, const QSet& set) {
  if (!stages_ahead(ROWS)) return false;
  stage_phase<K, ROWS>(w, slot, q, set);
  return true;
}

/// tagged: a norm's weights read into registers before the phase's wait, so the norm
/// after it reads no memory (other variants read them in rmsnorm_smem, after the wait).
__device__ __forceinline__ NormWeights<THREADS, D> early_norm(const float* w) {
  if constexpr (TAGGED) return load_norm_weights<THREADS, D>(w);
  else return NormWeights<THREADS, D>{};
}

/// RMSNorm of `v` with early_norm's weights (tagged) or with `w` read now; the same bits.
__device__ __forceinline__ void norm_vec(float* v, const NormWeights<THREADS, D>& nw, const float* w, float* red) {
  if constexpr (TAGGED) rmsnorm_smem<THREADS, D>(v, nw, EPS, red);
  else rmsnorm_smem<THREADS, D>(v, w, EPS, red);
}

/// A matrix phase's N-float input into shared `vec`: tagged, the polled words at `src`;
/// otherwise the wait on the producers' counter, then an L2 read of `plain`.
template <int N>
__device__ __forceinline__ void load_phase_input(float* vec, const u64* src, u32 tag, const u32* ctr, u32 target, const float* plain,
                                                 u64* ev) {
  if constexpr (TAGGED) {
    load_tagged<THREADS, N>(vec, src, tag, nullptr, ev);
  } else {
    block_wait(ctr, target, ev);
    load_vec_f32<THREADS>(vec, plain, N);
    __syncthreads();
  }
}

/// The end of a phase: one arrival on its counter; tagged: a block barrier (the next
/// phase reuses shared memory) and the trace's arrival stamp, since the data carries
/// its own readiness.
__device__ __forceinline__ void phase_end(u32* c, u64* stamp) {
  if constexpr (TAGGED) {
    __syncthreads();
    trace_arrive(stamp);
  } else {
    block_arrive(c, stamp);
  }
}
