//! Matrix-vector rows of quantized weights: Q8_0, Q4_0, Q4_1, Q4_K and Q6_K as repacked
//! at load (backend/engine/src/cuda/quant, layout in docs/quantized.md), plus bf16 rows,
//! chosen per matrix segment by a runtime format tag. A lane reads one 32-element chunk
//! per row per iteration: one 16-byte code load (two for Q8_0) and its scales, and
//! meets it with the same chunk of the input prepared as integers (ops/qdot.cuh):
//! integer dot products per chunk, the scales applied in f32 once per chunk.
#pragma once
#include "common.cuh"
#include "ops/matvec.cuh"
#include "ops/qdot.cuh"

/// Format tags (GpuFormat in the engine).
constexpr u32 QF_BF16 = 0, QF_Q8_0 = 1, QF_Q4_0 = 2, QF_Q4_1 = 3, QF_Q4_K = 4, QF_Q6_K = 5;

#ifndef PG_QFMTS
#define PG_QFMTS 0
#endif
/// Bit f set: some matrix of the model is in format f (only those are compiled).
constexpr u32 QFMTS = PG_QFMTS;
/// Whether any matrix is quantized (otherwise every format tag is bf16 at compile time).
constexpr bool QUANT = QFMTS != 0;
#ifndef PG_LM_FMT
#define PG_LM_FMT 0
#endif
/// The LM head's format (one tensor, so a compile-time choice).
constexpr u32 LM_FMT = PG_LM_FMT;

/// Bytes of one row of K elements in format `f` (a multiple of 16).
__host__ __device__ constexpr int q_row_bytes(u32 f, int k) {
  const int c = k / 32, s = k / 256;
  const int raw = f == QF_Q8_0   ? 32 * c + 2 * c
                  : f == QF_Q4_0 ? 16 * c + 2 * c
                  : f == QF_Q4_1 ? 16 * c + 4 * c
                  : f == QF_Q4_K ? 16 * c + 4 * s + 2 * c
                  : f == QF_Q6_K ? 16 * c + 8 * c + 2 * s + 2 * c
                                 : 2 * k;
  return (raw + 15) / 16 * 16;
}

__device__ __forceinline__ u32 ld_nc_u32(const void* p) { return __ldg(reinterpret_cast<const unsigned int*>(p)); }
__device__ __forceinline__ u32 ld_nc_u16(const void* p) { return __ldg(reinterpret_cast<const unsigned short*>(p)); }
__device__ __forceinline__ uint2 ld_nc_u64(const void* p) { return __ldg(reinterpret_cast<const uint2*>(p)); }
/// An IEEE half (its 16 bits) as a float (NVRTC runs without cuda_fp16.h).
__device__ __forceinline__ float f16_to_f32(u32 bits) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)bits));
  return f;
}
__device__ __forceinline__ float half_lo(u32 h2) { return f16_to_f32(h2 & 0xffffu); }
__device__ __forceinline__ float half_hi(u32 h2) { return f16_to_f32(h2 >> 16); }

/// One row's share of a chunk, loaded before any arithmetic so that every row's loads
/// are in flight together: codes (and Q6_K's high bits) and the chunk's scales.
struct QChunk {
  uint4 q;   // 4-bit codes, Q6_K's low bits, or Q8_0's first 16 codes
  uint4 q2;  // Q8_0's last 16 codes
  uint2 hi;  // Q6_K's high bits
  u32 s0;    // scale bits: f16 d (Q8_0, Q4_0), f16 pair (Q4_1: d, m; Q4_K: D, Dmin; Q6_K: D)
  u32 s1;    // Q4_K (sc, mn) bytes; Q6_K (sc_lo, sc_hi) bytes
};

/// One chunk of row `p`'s bytes from global memory (read-only, the weights' L2 policy),
/// or with SM from the shared-memory copy a stage made (only Q8_0 rows are staged).
template <u32 F, int K, bool SM = false>
__device__ __forceinline__ QChunk q_load(const unsigned char* p, int c) {
  constexpr int C = K / 32, S = K / 256;
  QChunk h;
  if constexpr (F == QF_Q8_0) {
    if constexpr (SM) {
      h.q = *reinterpret_cast<const uint4*>(p + 32 * c);
      h.q2 = *reinterpret_cast<const uint4*>(p + 32 * c + 16);
      h.s0 = *reinterpret_cast<const unsigned short*>(p + 32 * C + 2 * c);
    } else {
      h.q = ld_weight16(p + 32 * c);
      h.q2 = ld_weight16(p + 32 * c + 16);
      h.s0 = ld_nc_u16(p + 32 * C + 2 * c);
    }
  } else {
    static_assert(!SM, "only Q8_0 rows are staged");
    h.q = ld_weight16(p + 16 * c);
    if constexpr (F == QF_Q4_0) h.s0 = ld_nc_u16(p + 16 * C + 2 * c);
    if constexpr (F == QF_Q4_1) h.s0 = ld_nc_u32(p + 16 * C + 4 * c);
    if constexpr (F == QF_Q4_K) {
      h.s0 = ld_nc_u32(p + 16 * C + 4 * (c >> 3));
      h.s1 = ld_nc_u16(p + 16 * C + 4 * S + 2 * c);
    }
    if constexpr (F == QF_Q6_K) {
      h.hi = ld_nc_u64(p + 16 * C + 8 * c);
      h.s0 = ld_nc_u16(p + 24 * C + 2 * (c >> 3));
      h.s1 = ld_nc_u16(p + 24 * C + 2 * S + 2 * c);
    }
  }
  return h;
}

/// Code words j (0..3) of a 4-bit or 6-bit chunk as two words of byte codes, in the
/// prepared input's plane order: `lo` the even elements of stored groups 2j and 2j+1,
/// `hi` the odd ones (ops/qdot.cuh).
template <u32 F>
__device__ __forceinline__ void q_byte_codes(const QChunk& h, int j, u32& lo, u32& hi) {
  const u32 w = j == 0 ? h.q.x : j == 1 ? h.q.y : j == 2 ? h.q.z : h.q.w;
  lo = w & 0x0F0F0F0Fu;
  hi = (w >> 4) & 0x0F0F0F0Fu;
  if constexpr (F == QF_Q6_K) {
    // Stored groups 2j, 2j+1's high bits: bytes 2j, 2j+1 of `hi`, element e at bits 2e.
    const u32 hb = (j < 2 ? h.hi.x : h.hi.y) >> (16 * (j & 1));
    const u32 t = __byte_perm(hb, 0, 0x1100);
    lo |= ((t << 4) & 0x00300030u) | (t & 0x30003000u);
    hi |= ((t << 2) & 0x00300030u) | ((t >> 2) & 0x30003000u);
  }
}

/// acc[r] += row r's loaded chunk c (`h[r]`) · the prepared input chunk `x`, through
/// integer dot products (ops/qdot.cuh); the scales applied once per chunk.
template <u32 F, int R>
__device__ __forceinline__ void q_chunk_dot(const QChunk (&h)[R], const QX& x, int c, float (&acc)[R]) {
  // Q6_K: which halves of each code word are original groups 0..3 (the first sub-block).
  u32 first[4];
#pragma unroll
  for (int j = 0; j < 4; ++j)
    first[j] = (((2 * j + c) & 7) < 4 ? 0x0000FFFFu : 0u) | (((2 * j + 1 + c) & 7) < 4 ? 0xFFFF0000u : 0u);
#pragma unroll
  for (int r = 0; r < R; ++r) {
    QSum s{0, 0, 0}, s1{0, 0, 0};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      u32 lo, hi;
      if constexpr (F == QF_Q8_0) {
        const u32 w0 = j == 0 ? h[r].q.x : j == 1 ? h[r].q.z : j == 2 ? h[r].q2.x : h[r].q2.z;
        const u32 w1 = j == 0 ? h[r].q.y : j == 1 ? h[r].q.w : j == 2 ? h[r].q2.y : h[r].q2.w;
        // Stored offset by 128: flipping each byte's top bit gives the signed code.
        lo = __byte_perm(w0, w1, 0x6420) ^ 0x80808080u;
        hi = __byte_perm(w0, w1, 0x7531) ^ 0x80808080u;
      } else {
        q_byte_codes<F>(h[r], j, lo, hi);
      }
      qsum_add<F == QF_Q8_0>(s, lo, x, 2 * j);
      qsum_add<F == QF_Q8_0>(s, hi, x, 2 * j + 1);
      if constexpr (F == QF_Q6_K) {
        qsum_add<false>(s1, lo & first[j], x, 2 * j);
        qsum_add<false>(s1, hi & first[j], x, 2 * j + 1);
      }
    }
    const float scale = x.t.x, sx = x.t.y;
    if constexpr (F == QF_Q8_0) {
      acc[r] = fmaf(f16_to_f32(h[r].s0), qsum_value(s, scale), acc[r]);
    } else if constexpr (F == QF_Q4_0) {
      acc[r] = fmaf(f16_to_f32(h[r].s0), fmaf(-8.f, sx, qsum_value(s, scale)), acc[r]);
    } else if constexpr (F == QF_Q4_1) {
      acc[r] += fmaf(half_lo(h[r].s0), qsum_value(s, scale), half_hi(h[r].s0) * sx);
    } else if constexpr (F == QF_Q4_K) {
      const float d = half_lo(h[r].s0) * (float)(h[r].s1 & 0xFF), m = half_hi(h[r].s0) * (float)(h[r].s1 >> 8);
      acc[r] += fmaf(d, qsum_value(s, scale), -m * sx);
    } else {
      static_assert(F == QF_Q6_K, "unknown weight format");
      const QSum s2{s.a - s1.a, s.b - s1.b, s.d - s1.d};
      const float d = f16_to_f32(h[r].s0);
      const float d_lo = d * (float)(signed char)(h[r].s1 & 0xFF), d_hi = d * (float)(signed char)(h[r].s1 >> 8);
      const float v1 = fmaf(-32.f, x.t.z, qsum_value(s1, scale)), v2 = fmaf(-32.f, sx - x.t.z, qsum_value(s2, scale));
      acc[r] += fmaf(d_lo, v1, d_hi * v2);
    }
  }
}

#ifndef PG_Q_PIPE
#define PG_Q_PIPE 0
#endif
/// Whether a lane's row loop loads its next chunks from global memory while it does the
/// arithmetic of the current ones (twice the bytes in flight per warp, for the register
/// path's chunks; an opt-in experiment, `--gpu-q-pipeline`, docs/quantized.md).
constexpr bool Q_PIPE = PG_Q_PIPE != 0;

/// acc[r] = row r · the prepared input `xq` for R rows of format F (K elements each).
/// Every lane returns the full sums.
/// With SM the rows are the shared-memory copy of a stage.
template <u32 F, int K, int R, bool SM = false>
__device__ __forceinline__ void warp_rows_dot_qx(const unsigned char* const (&rowp)[R], const unsigned char* xq, float (&acc)[R]) {
  static_assert(K % 32 == 0, "rows must be whole 32-element chunks");
  constexpr int C = K / 32;
  constexpr int ITERS = (C + WARP_SIZE - 1) / WARP_SIZE;
  const int lane = lane_id();
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.f;
  if constexpr (Q_PIPE && !SM && ITERS > 1) {
    // The same chunks in the same order (so the same sums), each iteration's loads
    // issued one iteration early.
    QChunk h[R];
#pragma unroll
    for (int r = 0; r < R; ++r) h[r] = q_load<F, K, SM>(rowp[r], lane);
#pragma unroll 1
    for (int it = 0; it < ITERS; ++it) {
      const int c = it * WARP_SIZE + lane, next = c + WARP_SIZE;
      QChunk n[R];
      if (it + 1 < ITERS && (C % WARP_SIZE == 0 || next < C)) {
#pragma unroll
        for (int r = 0; r < R; ++r) n[r] = q_load<F, K, SM>(rowp[r], next);
      }
      if (C % WARP_SIZE == 0 || c < C) q_chunk_dot<F, R>(h, qx_load(xq, c), c, acc);
#pragma unroll
      for (int r = 0; r < R; ++r) h[r] = n[r];
    }
  } else {
#pragma unroll 1
    for (int it = 0; it < ITERS; ++it) {
      const int c = it * WARP_SIZE + lane;
      if (C % WARP_SIZE == 0 || c < C) {
        QChunk h[R];
#pragma unroll
        for (int r = 0; r < R; ++r) h[r] = q_load<F, K, SM>(rowp[r], c);
        q_chunk_dot<F, R>(h, qx_load(xq, c), c, acc);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = warp_sum(acc[r]);
}

/// A weight matrix as the kernel finds it: up to three consecutive row segments
/// (q, k, v of the fused projection), each in its own format, stored one after another
/// from `base`. `ends[i]` is segment i's end row (a multiple of the row group).
struct QMat {
  const unsigned char* base;
  u32 fmt[3];
  int ends[3];
};

/// Whether some segment of `m` is quantized.
__device__ __forceinline__ bool q_any(const QMat& m) { return (m.fmt[0] | m.fmt[1] | m.fmt[2]) != QF_BF16; }

/// A one-segment matrix.
__device__ __forceinline__ QMat qmat1(const void* base, u32 fmt, int rows) {
  return QMat{reinterpret_cast<const unsigned char*>(base), {fmt, fmt, fmt}, {rows, rows, rows}};
}

/// Whether format f is compiled in (bf16 always is; the LM head's too).
__host__ __device__ constexpr bool q_enabled(u32 f) { return f == QF_BF16 || f == LM_FMT || ((QFMTS >> f) & 1u) != 0; }

/// Whether rows of K elements can be in format f (whole blocks; the host plans no other).
__host__ __device__ constexpr bool q_fits(u32 f, int k) { return k % (f == QF_Q4_K || f == QF_Q6_K ? 256 : 32) == 0; }

/// Where row group `row0` of a segmented matrix lies: its segment's format, first
/// byte and rows (a group never straddles segments).
struct QSeg {
  u32 fmt;
  const unsigned char* base;
  int begin, end;
};

template <int K>
__device__ __forceinline__ QSeg q_segment(const QMat& m, int row0) {
  const unsigned char* base = m.base;
  int begin = 0, seg = 0;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (row0 >= m.ends[i]) {
      base += (size_t)(m.ends[i] - begin) * q_row_bytes(m.fmt[i], K);
      begin = m.ends[i];
      seg = i + 1;
    }
  }
  return QSeg{m.fmt[seg], base, begin, m.ends[seg]};
}

/// Rows row0[g] .. row0[g] + NR - 1 for each of G groups of one segment (rows past the
/// segment clamped; the caller ignores them), dotted with the input: `xs` for bf16
/// rows, its prepared chunks `xq` for quantized ones: acc[g·NR + r].
template <int K, int NR, int G>
__device__ __forceinline__ void q_groups_dot(const QSeg& sg, const int (&row0)[G], const float* xs, const unsigned char* xq,
                                             float (&acc)[G * NR]) {
  const unsigned char* rowp[G * NR];
  switch (sg.fmt) {
#define QM_CASE(F)                                                                          \
  case F:                                                                                   \
    if constexpr (q_enabled(F) && q_fits(F, K)) {                                           \
      _Pragma("unroll") for (int i = 0; i < G * NR; ++i) rowp[i] =                          \
          sg.base + (size_t)(min(row0[i / NR] + i % NR, sg.end - 1) - sg.begin) * q_row_bytes(F, K); \
      warp_rows_dot_qx<F, K, G * NR>(rowp, xq, acc);                                         \
    } else {                                                                                \
      __trap(); /* the host planned a format this build lacks: fail loudly */              \
    }                                                                                       \
    break;
    QM_CASE(QF_Q8_0)
    QM_CASE(QF_Q4_0)
    QM_CASE(QF_Q4_1)
    QM_CASE(QF_Q4_K)
    QM_CASE(QF_Q6_K)
#undef QM_CASE
    case QF_BF16: {
      const bf16_t* w = reinterpret_cast<const bf16_t*>(sg.base);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float a[NR];
        warp_rows_dot<K, NR, K>(w, row0[g] - sg.begin, sg.end - sg.begin, xs, a);
#pragma unroll
        for (int r = 0; r < NR; ++r) acc[g * NR + r] = a[r];
      }
      break;
    }
    default:
      __trap();
  }
  (void)rowp;
}

// ---- staging Q8_0 rows --------------------------------------------------------------
// As bf16 rows do (ops/matvec.cuh), a Q8_0 phase where every warp has at most one row
// group copies that group into shared memory with cp.async before its block waits on
// the phase's input, and reads it from there after the wait: the DRAM round trips of
// the group's chunks (eight in a row for an 8,192-element row) overlap the wait instead
// of following it. A group is NR whole rows, contiguous in the repacked matrix. The
// stage set's bytes are shared by the warps that own a group (the low ones: groups go
// out warp-major), so a group fits where a bf16 slot could not hold it. Lanes copy
// 16-byte words in turn and read words other lanes copied (scales), so the reader waits
// for its own copies, then syncs the warp. Only Q8_0 stages: the 4-bit formats' groups
// are half the bytes, and their copies delayed the phase's counter polls by what they
// saved (docs/quantized.md).

/// This warp's first row group of a matrix whose groups go to `grid` blocks, warp-major
/// (grid_rows' order; callers are blocks of that grid).
__device__ __forceinline__ int q_first_group(int grid) { return warp_id() * grid + (int)rank_block(); }

/// Lane 0 hands the sums of rows row0 .. row0 + NR - 1 that lie before `rows` to `epi`.
template <int NR, class Epi>
__device__ __forceinline__ void q_group_epi(int row0, int rows, const float (&acc)[NR], Epi& epi) {
  if (lane_id() != 0) return;
#pragma unroll
  for (int r = 0; r < NR; ++r)
    if (row0 + r < rows) epi(row0 + r, acc[r]);
}

/// Shared memory where quantized row groups of a phase are staged: one stage set (a
/// null base: none).
struct QSet {
  unsigned char* base = nullptr;
  int bytes = 0;
};

/// This warp's part of `set` for a `rows`-row matrix whose groups go to `grid` blocks,
/// and its size in bytes (`cap`).
template <int NR, int WARPS>
__device__ __forceinline__ unsigned char* q_slot(const QSet& set, int rows, int grid, int& cap) {
  const int groups = (rows + NR - 1) / NR;
  const int owners = max(1, min(WARPS, (groups + grid - 1) / grid));
  cap = set.bytes / owners / 16 * 16;
  return set.base + warp_id() * cap;
}

/// Whether a K-wide row can be Q8_0 in this build (the staging code exists only then).
template <int K>
__host__ __device__ constexpr bool q8_rows() { return q_enabled(QF_Q8_0) && q_fits(QF_Q8_0, K); }

/// Where this warp's group of `m` is staged, or null when it is not: no group, more
/// than one, not Q8_0, or NR rows larger than the warp's part of the set. The
/// stager and the reader both ask this, so they agree.
template <int K, int NR, int WARPS>
__device__ __forceinline__ unsigned char* q_staged_at(const QMat& m, int rows, const QSet& set, int grid) {
  if constexpr (!q8_rows<K>()) return nullptr;
  const int g = q_first_group(grid);
  if (g * NR >= rows || (g + WARPS * grid) * NR < rows) return nullptr;
  int cap;
  unsigned char* dst = q_slot<NR, WARPS>(set, rows, grid, cap);
  if (q_segment<K>(m, g * NR).fmt != QF_Q8_0 || NR * q_row_bytes(QF_Q8_0, K) > cap) return nullptr;
  return dst;
}

/// The bytes of rows row0 .. row0 + NR - 1 of `m` (those before their segment's end):
/// contiguous in the repacked matrix, a multiple of 16.
struct QSpan {
  const unsigned char* src;
  int bytes;
};
template <int K, int NR>
__device__ __forceinline__ QSpan q_group_span(const QMat& m, int row0) {
  const QSeg sg = q_segment<K>(m, row0);
  const int rb = q_row_bytes(sg.fmt, K);
  return QSpan{sg.base + (size_t)(row0 - sg.begin) * rb, (min(row0 + NR, sg.end) - row0) * rb};
}

/// Copies row group `row0` of `m` to `dst` (q_group_span).
template <int K, int NR>
__device__ __forceinline__ void q_copy_group(const QMat& m, int row0, unsigned char* dst) {
  const QSpan sp = q_group_span<K, NR>(m, row0);
  for (int i = lane_id(); i < sp.bytes / 16; i += WARP_SIZE) cp_async16_weight(dst + 16 * i, sp.src + 16 * i);
}

/// Starts copying this warp's first row group of `m` into its part of `set` (no
/// commit: the caller commits). Returns whether it copied.
template <int K, int NR, int WARPS>
__device__ __forceinline__ bool q_stage_group(const QMat& m, int rows, const QSet& set, int grid) {
  unsigned char* dst = q_staged_at<K, NR, WARPS>(m, rows, set, grid);
  if (!dst) return false;
  q_copy_group<K, NR>(m, q_first_group(grid) * NR, dst);
  return true;
}

/// Q8_0 rows row0 .. row0 + NR - 1 (those at or past `end` clamped to end - 1), read
/// from their staged copy at `at`, dotted with the prepared input `xq`.
template <int K, int NR>
__device__ __forceinline__ void q8_rows_staged(int row0, int end, const unsigned char* at, const unsigned char* xq, float (&acc)[NR]) {
  const unsigned char* rowp[NR];
#pragma unroll
  for (int r = 0; r < NR; ++r) rowp[r] = at + (size_t)(min(row0 + r, end - 1) - row0) * q_row_bytes(QF_Q8_0, K);
  warp_rows_dot_qx<QF_Q8_0, K, NR, true>(rowp, xq, acc);
}

/// Slots of a warp's ring (more were no faster).
constexpr int Q_RING_SLOTS = 2;

/// Where the ring of a warp with several row groups of a Q8_0 matrix `m` lies (its part
/// of `set`), or null when `m` has another format or two slots of NR rows do not fit
/// (the register path then streams the rows). Only Q8_0 rings: its 32-byte chunks hold
/// twice the registers of the 4-bit formats' in the register path, and the ring (its
/// input chunk read from shared memory once per NR rows instead of once per batch)
/// measured slower than that path on Q4_K and Q6_K (docs/quantized.md).
template <int K, int NR, int WARPS>
__device__ __forceinline__ unsigned char* q_ring_at(const QMat& m, int rows, const QSet& set, int grid) {
  if (m.fmt[0] != QF_Q8_0 || m.fmt[1] != QF_Q8_0 || m.fmt[2] != QF_Q8_0) return nullptr;
  int cap;
  unsigned char* base = q_slot<NR, WARPS>(set, rows, grid, cap);
  return Q_RING_SLOTS * NR * q_row_bytes(QF_Q8_0, K) <= cap ? base : nullptr;
}

/// A warp's row groups gw, gw + nw, … (`count` of them) streamed through its ring at
/// `base`: one slot's copy is in flight while the warp does the arithmetic of the
/// other, with no registers held. Each copy is one commit group (empty ones keep the
/// count per iteration fixed), so waiting until one is pending completes the oldest.
/// Nothing else of this thread may be in flight into `base` (callers run it where the
/// set is free).
template <int K, int NR, class Epi>
__device__ __forceinline__ void q_ring_rows(const QMat& m, int rows, int gw, int nw, int count, unsigned char* base,
                                            const unsigned char* xq, Epi epi) {
  constexpr int slot_bytes = NR * q_row_bytes(QF_Q8_0, K);
  for (int k = 0; k < Q_RING_SLOTS; ++k) {
    if (k < count) q_copy_group<K, NR>(m, (gw + k * nw) * NR, base + k * slot_bytes);
    cp_async_commit();
  }
  for (int k = 0; k < count; ++k) {
    const int row0 = (gw + k * nw) * NR;
    unsigned char* at = base + (k % Q_RING_SLOTS) * slot_bytes;
    cp_async_wait_group<Q_RING_SLOTS - 1>();
    __syncwarp();
    float acc[NR];
    q8_rows_staged<K, NR>(row0, rows, at, xq, acc);
    // Every lane has read the slot (warp_sum's shuffles follow the reads) before it is refilled.
    __syncwarp();
    const int next = k + Q_RING_SLOTS;
    if (next < count) q_copy_group<K, NR>(m, (gw + next * nw) * NR, at);
    cp_async_commit();
    q_group_epi<NR>(row0, rows, acc, epi);
  }
}

// ---- prefetching quantized rows into L2 -------------------------------------------
// The 4-bit formats' register path has only its batch's chunk loads in flight per lane,
// and a long row (down's 8,192 elements) takes several DRAM round trips one after the
// other. In a phase where a warp has one row group (the phases that stage), one lane
// asks L2 for that whole group in one bulk prefetch before the phase's wait: no
// registers, no shared memory, no data returned to the SM, so the counter polls do not
// queue behind it as they did behind staged copies. Phases with several groups per
// warp do not prefetch: their prefetches, from every SM at once, delayed the wake as
// staging did (docs/quantized.md).

/// Asks L2 for row group `g` of `m` (lane 0; nothing past the matrix).
template <int K, int NR>
__device__ __forceinline__ void q_prefetch_group(const QMat& m, int rows, int g) {
  if (lane_id() != 0 || g * NR >= rows) return;
  const QSpan sp = q_group_span<K, NR>(m, g * NR);
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(sp.src), "r"(sp.bytes) : "memory");
}

/// Row groups a warp streams together in a quantized matrix: enough rows that each
/// lane has several chunk loads in flight while it does the arithmetic of the last.
__host__ __device__ constexpr int q_group_batch(int nr) { return nr >= 4 ? 1 : 4 / nr; }

/// grid_rows of a segmented (possibly quantized) matrix of `rows` rows: the same row
/// groups to the same warps (so the blocks owning rows are grid_rows' and the phases'
/// arrival counts hold), a warp's groups taken q_group_batch at a time from global
/// memory; a Q8_0 warp reads its one group from `set` where q_stage_group copied it
/// (if set.base), or streams several through `ring` (q_ring_rows). First prepares the
/// input `xs` as integer chunks in `xq` (shared, xq_bytes(K)), so every thread of the
/// block calls it. Runs `epi(row, value)` on lane 0 for each row, in increasing order
/// within a group. `ahead`, PENDING: the next phase's stage (PENDING commit groups) was
/// started after this one's and may stay in flight.
template <int K, int NR, int WARPS, int PENDING = 0, class Epi>
__device__ __forceinline__ void qmat_grid_rows(const QMat& m, int rows, const float* xs, unsigned char* xq, Epi epi, int grid = rank_grid(),
                                               QSet set = {}, bool ahead = false, QSet ring = {}) {
  q_prep_x<WARPS * WARP_SIZE, K>(xs, xq);
  __syncthreads();
  constexpr int B = q_group_batch(NR);
  const int gw = q_first_group(grid);
  const int nw = WARPS * grid;
  const int groups = (rows + NR - 1) / NR;
  if constexpr (q8_rows<K>()) {
    if (const unsigned char* at = set.base ? q_staged_at<K, NR, WARPS>(m, rows, set, grid) : nullptr) {
      if (PENDING > 0 && ahead) cp_async_wait_group<PENDING>();
      else cp_async_wait_all();
      __syncwarp();
      float acc[NR];
      q8_rows_staged<K, NR>(gw * NR, q_segment<K>(m, gw * NR).end, at, xq, acc);
      q_group_epi<NR>(gw * NR, rows, acc, epi);
      return;  // (q_staged_at: the warp's only group)
    }
    if (unsigned char* base = ring.base && gw < groups ? q_ring_at<K, NR, WARPS>(m, rows, ring, grid) : nullptr) {
      q_ring_rows<K, NR>(m, rows, gw, nw, (groups - gw + nw - 1) / nw, base, xq, epi);
      return;
    }
  }
  for (int g = gw; g < groups; g += B * nw) {
    // This batch's groups g, g + nw, …: together when all exist and share a segment.
    const QSeg sg = q_segment<K>(m, g * NR);
    const int last = g + (B - 1) * nw;
    float acc[B * NR];
    int row0[B];
#pragma unroll
    for (int b = 0; b < B; ++b) row0[b] = (g + b * nw) * NR;
    if (B > 1 && last < groups && last * NR < sg.end) {
      q_groups_dot<K, NR, B>(sg, row0, xs, xq, acc);
    } else {
#pragma unroll
      for (int b = 0; b < B; ++b) {
        if (g + b * nw < groups) {  // warp-uniform
          const int one[1] = {row0[b]};
          float a[NR];
          q_groups_dot<K, NR, 1>(q_segment<K>(m, row0[b]), one, xs, xq, a);
#pragma unroll
          for (int r = 0; r < NR; ++r) acc[b * NR + r] = a[r];
        }
      }
    }
    if (lane_id() == 0) {
#pragma unroll
      for (int b = 0; b < B; ++b)
#pragma unroll
        for (int r = 0; r < NR; ++r)
          if (g + b * nw < groups && row0[b] + r < rows) epi(row0[b] + r, acc[b * NR + r]);
    }
  }
}
