//! Decode attention of one query head on a block that does nothing else (attn_own,
//! one block per head): the head's cached k/v rows are copied into shared memory before
//! the wait for this step's q/k/v. After it, lane groups of HD/8 lanes (one 16-byte
//! word of a row each) score their positions (kept in registers), the block takes one
//! max, and the same groups weigh the v rows of the same positions: no online-softmax
//! rescaling, three barriers, and every warp's trip count uniform (a warp that reaches
//! a shuffle diverged takes its slow collective path: measured thousands of cycles).
//! Matches the CPU reference: softmax(q·k / sqrt(head_dim)) · v.
#pragma once
#include "common.cuh"

/// Section stamps for scripts/gpu/attn_micro.cu (nothing in the kernels).
#ifndef OWN_PROBE
#define OWN_PROBE(i)
#endif

template <int THREADS, int HD>
struct OwnAttn {
  /// Lanes per position: one 16-byte word (8 bf16) of its row each.
  static constexpr int LANES = HD / 8;
  static constexpr int GROUPS = THREADS / LANES;
  static constexpr int WARPS = THREADS / WARP_SIZE;
  /// Positions a group takes at most (one instantiation each), and the longest context.
  static constexpr int MAXP = 8;
  static constexpr int MAX_N = GROUPS * MAXP;
  /// Scratch floats: one partial output per warp, then per-warp max and sum.
  static constexpr int SCRATCH = WARPS * (HD + 2);
};

/// Where chunk `c` of cached row `p` sits in the stage: chunks are XOR-swizzled within
/// each group of 8, so a group reading one row and 8 rows' same chunk both spread over
/// the banks.
template <int HD>
__device__ __forceinline__ int own_word(int p, int c) {
  return p * (HD / 8) + (c ^ (p & 7));
}

/// Starts copying (cp.async) cached rows [0, min(rows, cap)) of the head's KV group into
/// `stage` (k rows, then v rows from word cap · HD/8): rows written in earlier steps, so
/// the block issues this before waiting for the current position's q/k/v.
template <int THREADS, int HD>
__device__ __forceinline__ void own_stage(const bf16_t* kc, const bf16_t* vc, int rows, int cap, uint4* stage) {
  constexpr int CH = HD / 8;
  const int words = min(rows, cap) * CH;
  uint4* vs = stage + cap * CH;
  for (int i = threadIdx.x; i < words; i += THREADS) {
    const int w = own_word<HD>(i / CH, i % CH);
    cp_async16(stage + w, kc + (size_t)i * 8);
    cp_async16(vs + w, vc + (size_t)i * 8);
  }
  cp_async_commit();
}

/// Dot product of 8 floats in shared memory with 8 floats.
__device__ __forceinline__ float dot8f(const float* x, float4 a, float4 b) {
  float s = x[0] * a.x;
  s = fmaf(x[1], a.y, s);
  s = fmaf(x[2], a.z, s);
  s = fmaf(x[3], a.w, s);
  s = fmaf(x[4], b.x, s);
  s = fmaf(x[5], b.y, s);
  s = fmaf(x[6], b.z, s);
  return fmaf(x[7], b.w, s);
}

/// acc[0..8) += e · (8 bf16 of one word).
__device__ __forceinline__ void axpy8(float e, uint4 w, float (&acc)[8]) {
  acc[0] = fmaf(e, bf16_lo(w.x), acc[0]);
  acc[1] = fmaf(e, bf16_hi(w.x), acc[1]);
  acc[2] = fmaf(e, bf16_lo(w.y), acc[2]);
  acc[3] = fmaf(e, bf16_hi(w.y), acc[3]);
  acc[4] = fmaf(e, bf16_lo(w.z), acc[4]);
  acc[5] = fmaf(e, bf16_hi(w.z), acc[5]);
  acc[6] = fmaf(e, bf16_lo(w.w), acc[6]);
  acc[7] = fmaf(e, bf16_hi(w.w), acc[7]);
}

/// Word `sl` of the rows g + k · GROUPS (k < KB) of `rows` (the stage's k or v rows) into
/// w[k], all loads issued together. Rows from `cached` on read a clamped staged row and
/// become zero words: stale shared memory may hold NaN patterns, and a zero weight
/// times NaN would still be NaN.
template <int HD, int GROUPS, int KB>
__device__ __forceinline__ void own_words(const uint4* rows, int g, int sl, int cached, int cap, uint4 (&w)[KB]) {
#pragma unroll
  for (int k = 0; k < KB; ++k) {
    const int p = g + k * GROUPS;
    w[k] = rows[own_word<HD>(min(p, cap - 1), sl)];
    if (p >= cached) w[k] = make_uint4(0, 0, 0, 0);
  }
}

/// attend_own for contexts of at most KB positions per lane group: every load of a
/// phase issued at once and no branch between loads and shuffles (rows past the
/// context read a clamped staged row and are masked), so the groups' chains overlap.
template <int THREADS, int HD, int KB>
__device__ __forceinline__ void attend_own_k(const float4 qa, const float4 qb, const float* kv_s, int n, int cap, const uint4* stage,
                                             float* scratch, float* out) {
  using S = OwnAttn<THREADS, HD>;
  constexpr int LANES = S::LANES, GROUPS = S::GROUPS;
  const int t = threadIdx.x, lane = lane_id(), warp = warp_id();
  const int sl = lane % LANES, g = t / LANES;
  const int cached = n - 1;
  const uint4* vst = stage + cap * LANES;
  float* wmax = scratch + S::WARPS * HD;
  float* wsum = wmax + S::WARPS;

  // Scores of positions g + k · GROUPS (registers).
  uint4 w[KB];
  own_words<HD, GROUPS>(stage, g, sl, cached, cap, w);
  const float cur = dot8f(kv_s + sl * 8, qa, qb);
  float sc[KB];
#pragma unroll
  for (int k = 0; k < KB; ++k) {
    const int p = g + k * GROUPS;
    sc[k] = p == cached ? cur : dot8(w[k], qa, qb);
  }
  float mx = NEG_INF;
#pragma unroll
  for (int k = 0; k < KB; ++k) {
    // Every lane shuffles (a conditional expression around the shuffle may compile to a
    // branch, and a full-mask shuffle some lanes skip hangs the warp); then the mask.
    const float dot = group_sum<LANES>(sc[k]) * (1.0f / sqrtf((float)HD));
    sc[k] = g + k * GROUPS < n ? dot : NEG_INF;
    mx = fmaxf(mx, sc[k]);
  }
  mx = warp_max(mx);
  if (lane == 0) wmax[warp] = mx;
  own_words<HD, GROUPS>(vst, g, sl, cached, cap, w);  // the v words, before the barrier
  __syncthreads();
  OWN_PROBE(1);

  // Weights and v of the same positions; every lane of a group holds the same e.
  float m = wmax[0];
#pragma unroll
  for (int i = 1; i < S::WARPS; ++i) m = fmaxf(m, wmax[i]);
  float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  float l = 0.f, e_cur = 0.f;
#pragma unroll
  for (int k = 0; k < KB; ++k) {
    const int p = g + k * GROUPS;
    const float e = p < n ? expf(sc[k] - m) : 0.f;
    l += e;
    if (p == cached) e_cur = e;
    axpy8(e, w[k], acc);  // (zero words past the cached rows)
  }
  const float* vc_s = kv_s + HD + sl * 8;
#pragma unroll
  for (int d = 0; d < 8; ++d) acc[d] = fmaf(e_cur, vc_s[d], acc[d]);
  OWN_PROBE(2);
  // The warp's groups by shuffles (l along), then the warps' in shared memory.
#pragma unroll
  for (int off = LANES; off < WARP_SIZE; off <<= 1) {
#pragma unroll
    for (int d = 0; d < 8; ++d) acc[d] += lane_xor(acc[d], off);
    l += lane_xor(l, off);
  }
  if (lane < LANES)
#pragma unroll
    for (int d = 0; d < 8; ++d) scratch[warp * HD + sl * 8 + d] = acc[d];
  if (lane == 0) wsum[warp] = l;
  __syncthreads();
  OWN_PROBE(3);
  if (t < HD) {
    float num[4] = {0.f, 0.f, 0.f, 0.f}, den[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int i = 0; i < S::WARPS; ++i) {
      num[i & 3] += scratch[i * HD + t];
      den[i & 3] += wsum[i];
    }
    out[t] = ((num[0] + num[1]) + (num[2] + num[3])) / ((den[0] + den[1]) + (den[2] + den[3]));
  }
  OWN_PROBE(4);
  // (No barrier: out[d] is read back only by thread d before the next one.)
}

/// The head's output over positions [0, n) (n - 1 ≤ cap, n ≤ OwnAttn::MAX_N) into `out`
/// (shared, HD floats; thread d < HD writes out[d]). Position n-1 is the current one:
/// its k and v are kv_s[0..HD) and kv_s[HD..2HD) (rounded to bf16 like the cache); the
/// earlier rows are own_stage's `stage`. `scratch`: OwnAttn::SCRATCH shared floats.
template <int THREADS, int HD>
__device__ __forceinline__ void attend_own(const float* q_s, const float* kv_s, int n, int cap, const uint4* stage, float* scratch,
                                           float* out) {
  using S = OwnAttn<THREADS, HD>;
  static_assert(HD % 64 == 0 && S::LANES <= WARP_SIZE, "the row swizzle needs whole groups of 8 words; a row within a warp");
  const int sl = lane_id() % S::LANES;
  const float4 qa = *reinterpret_cast<const float4*>(q_s + sl * 8);
  const float4 qb = *reinterpret_cast<const float4*>(q_s + sl * 8 + 4);
  cp_async_wait_all();
  __syncthreads();  // every thread's staged rows visible
  OWN_PROBE(0);
  // One instantiation per positions-per-group count (block-uniform).
  switch ((n + S::GROUPS - 1) / S::GROUPS) {
    case 1: attend_own_k<THREADS, HD, 1>(qa, qb, kv_s, n, cap, stage, scratch, out); break;
    case 2: attend_own_k<THREADS, HD, 2>(qa, qb, kv_s, n, cap, stage, scratch, out); break;
    case 3: attend_own_k<THREADS, HD, 3>(qa, qb, kv_s, n, cap, stage, scratch, out); break;
    case 4: attend_own_k<THREADS, HD, 4>(qa, qb, kv_s, n, cap, stage, scratch, out); break;
    case 5: attend_own_k<THREADS, HD, 5>(qa, qb, kv_s, n, cap, stage, scratch, out); break;
    case 6: attend_own_k<THREADS, HD, 6>(qa, qb, kv_s, n, cap, stage, scratch, out); break;
    case 7: attend_own_k<THREADS, HD, 7>(qa, qb, kv_s, n, cap, stage, scratch, out); break;
    default: attend_own_k<THREADS, HD, S::MAXP>(qa, qb, kv_s, n, cap, stage, scratch, out); break;
  }
}
