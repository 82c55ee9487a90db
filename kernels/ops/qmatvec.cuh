//! Matrix-vector rows of quantized weights, dequantized in registers: Q8_0, Q4_0, Q4_1,
//! Q4_K and Q6_K as repacked at load (backend/engine/src/cuda/quant, layout in
//! docs/kernel.md), plus bf16 rows, chosen per matrix segment by a runtime format tag.
//! A lane reads one 32-element chunk per row per iteration: one 16-byte code load
//! (two for Q8_0), its scales, and 8 float4 of the input in a rotated order that
//! keeps the shared-memory reads conflict-free.
#pragma once
#include "common.cuh"
#include "ops/matvec.cuh"

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

/// Chunks in flight per lane per row while streaming a quantized row: one. Two keep
/// twice the loads live, and under 512 threads' 128 registers ptxas then spills them to
/// local memory inside the row loop (docs/quantized.md has the figures).
constexpr int Q_UNROLL = 1;

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

/// The bit pattern of 2^23: OR an unsigned code (< 2^23) into it and the float is
/// 2^23 + code exactly (the code is its mantissa), where an integer-to-float
/// conversion runs at a quarter of the FMA rate.
constexpr u32 TWO23_BITS = 0x4B000000u;

/// A code's float bits (TWO23_BITS | code) as the code minus `bias`, exactly.
__device__ __forceinline__ float code_f(u32 bits, float bias) { return __int_as_float(bits) - (8388608.f + bias); }

/// s + x4 · (codes − bias) for one stored group of 4 elements.
__device__ __forceinline__ float dot4(float s, float4 x, u32 c0, u32 c1, u32 c2, u32 c3, float bias) {
  s = fmaf(x.x, code_f(c0, bias), s);
  s = fmaf(x.y, code_f(c1, bias), s);
  s = fmaf(x.z, code_f(c2, bias), s);
  s = fmaf(x.w, code_f(c3, bias), s);
  return s;
}

/// The input's float4 holding stored group k of the lane's chunk (original group
/// (k + chunk) mod 8; the chunk index is ≡ lane mod 32).
__device__ __forceinline__ float4 x_group(const float* xc, int k, int lane) {
  return *reinterpret_cast<const float4*>(xc + 4 * ((k + lane) & 7));
}

/// One row's share of a chunk, loaded before any arithmetic so that every row's loads
/// are in flight together: codes (and Q6_K's high bits) and the chunk's scales.
struct QChunk {
  uint4 q;   // 4-bit codes, Q6_K's low bits, or Q8_0's first 16 codes
  uint4 q2;  // Q8_0's last 16 codes
  uint2 hi;  // Q6_K's high bits
  u32 s0;    // scale bits: f16 d (Q8_0, Q4_0), f16 pair (Q4_1: d, m; Q4_K: D, Dmin; Q6_K: D)
  u32 s1;    // Q4_K (sc, mn) bytes; Q6_K (sc_lo, sc_hi) bytes
};

template <u32 F, int K>
__device__ __forceinline__ QChunk q_load(const unsigned char* p, int c) {
  constexpr int C = K / 32, S = K / 256;
  QChunk h;
  if constexpr (F == QF_Q8_0) {
    h.q = ld_weight16(p + 32 * c);
    h.q2 = ld_weight16(p + 32 * c + 16);
    h.s0 = ld_nc_u16(p + 32 * C + 2 * c);
  } else {
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

/// Stored group k's 4 codes of a row's chunk, each as TWO23_BITS | code.
template <u32 F>
__device__ __forceinline__ void q_codes(const QChunk& h, int k, u32 (&c)[4]) {
  if constexpr (F == QF_Q8_0) {
    const u32 w = k < 4 ? (k == 0 ? h.q.x : k == 1 ? h.q.y : k == 2 ? h.q.z : h.q.w)
                        : (k == 4 ? h.q2.x : k == 5 ? h.q2.y : k == 6 ? h.q2.z : h.q2.w);
    // Byte e into the low byte of 2^23's bit pattern: one byte permute.
#pragma unroll
    for (int e = 0; e < 4; ++e) c[e] = __byte_perm(w, TWO23_BITS, 0x7440 + e);
  } else {
    const u32 w = (k >> 1) == 0 ? h.q.x : (k >> 1) == 1 ? h.q.y : (k >> 1) == 2 ? h.q.z : h.q.w;
    const u32 l4 = w >> (16 * (k & 1));
#pragma unroll
    for (int e = 0; e < 4; ++e) c[e] = (l4 >> (4 * e)) & 0xF;
    if constexpr (F == QF_Q6_K) {
      const u32 h2 = ((k >> 2) == 0 ? h.hi.x : h.hi.y) >> (8 * (k & 3));
#pragma unroll
      for (int e = 0; e < 4; ++e) c[e] |= ((h2 >> (2 * e)) & 3) << 4;
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) c[e] |= TWO23_BITS;
  }
}

/// The code offset of format F (value = scale · (code − bias) [+ min]).
template <u32 F>
__host__ __device__ constexpr float q_bias() {
  return F == QF_Q8_0 ? 128.f : F == QF_Q4_0 ? 8.f : F == QF_Q6_K ? 32.f : 0.f;
}

/// acc[r] += row r's chunk c · x for R rows at once: the rows' loads first, then each
/// of the chunk's 8 input groups read once from shared memory for all R rows.
template <u32 F, int K, int R>
__device__ __forceinline__ void q_chunk_rows(const unsigned char* const (&rowp)[R], int c, const float* xs, int lane, float (&acc)[R]) {
  QChunk h[R];
#pragma unroll
  for (int r = 0; r < R; ++r) h[r] = q_load<F, K>(rowp[r], c);
  const float* xc = xs + 32 * c;
  constexpr bool AFFINE = F == QF_Q4_1 || F == QF_Q4_K;
  float s[R], s_hi[R], sx = 0.f;
#pragma unroll
  for (int r = 0; r < R; ++r) s[r] = s_hi[r] = 0.f;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const float4 x = x_group(xc, k, lane);
    if constexpr (AFFINE) sx += (x.x + x.y) + (x.z + x.w);
    // Q6_K: original groups 0..3 are the chunk's first 16-element sub-block.
    const bool first_half = ((k + lane) & 7) < 4;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      u32 cd[4];
      q_codes<F>(h[r], k, cd);
      if constexpr (F == QF_Q6_K) {
        if (first_half) s[r] = dot4(s[r], x, cd[0], cd[1], cd[2], cd[3], q_bias<F>());
        else s_hi[r] = dot4(s_hi[r], x, cd[0], cd[1], cd[2], cd[3], q_bias<F>());
      } else {
        s[r] = dot4(s[r], x, cd[0], cd[1], cd[2], cd[3], q_bias<F>());
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if constexpr (F == QF_Q8_0 || F == QF_Q4_0) {
      acc[r] = fmaf(f16_to_f32(h[r].s0), s[r], acc[r]);
    } else if constexpr (F == QF_Q4_1) {
      acc[r] += fmaf(half_lo(h[r].s0), s[r], half_hi(h[r].s0) * sx);
    } else if constexpr (F == QF_Q4_K) {
      const float d = half_lo(h[r].s0) * (float)(h[r].s1 & 0xFF), m = half_hi(h[r].s0) * (float)(h[r].s1 >> 8);
      acc[r] += fmaf(d, s[r], -m * sx);
    } else {
      static_assert(F == QF_Q6_K, "unknown weight format");
      const float d = f16_to_f32(h[r].s0);
      const float d_lo = d * (float)(signed char)(h[r].s1 & 0xFF), d_hi = d * (float)(signed char)(h[r].s1 >> 8);
      acc[r] += fmaf(d_lo, s[r], d_hi * s_hi[r]);
    }
  }
}

/// acc[r] = row r · xs for R rows of format F (`rowp`, K elements each). Every lane
/// returns the full sums.
template <u32 F, int K, int R>
__device__ __forceinline__ void warp_rows_dot_q(const unsigned char* const (&rowp)[R], const float* xs, float (&acc)[R]) {
  static_assert(K % 32 == 0, "rows must be whole 32-element chunks");
  constexpr int C = K / 32;
  constexpr int ITERS = (C + WARP_SIZE - 1) / WARP_SIZE;
  const int lane = lane_id();
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.f;
#pragma unroll Q_UNROLL
  for (int it = 0; it < ITERS; ++it) {
    const int c = it * WARP_SIZE + lane;
    if (C % WARP_SIZE == 0 || c < C) q_chunk_rows<F, K, R>(rowp, c, xs, lane, acc);
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
/// segment clamped; the caller ignores them), dotted with xs: acc[g·NR + r].
template <int K, int NR, int G>
__device__ __forceinline__ void q_groups_dot(const QSeg& sg, const int (&row0)[G], const float* xs, float (&acc)[G * NR]) {
  const unsigned char* rowp[G * NR];
  switch (sg.fmt) {
#define QM_CASE(F)                                                                          \
  case F:                                                                                   \
    if constexpr (q_enabled(F) && q_fits(F, K)) {                                           \
      _Pragma("unroll") for (int i = 0; i < G * NR; ++i) rowp[i] =                          \
          sg.base + (size_t)(min(row0[i / NR] + i % NR, sg.end - 1) - sg.begin) * q_row_bytes(F, K); \
      warp_rows_dot_q<F, K, G * NR>(rowp, xs, acc);                                         \
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

/// Row groups a warp streams together in a quantized matrix: enough rows that each
/// lane has several chunk loads in flight while it does the arithmetic of the last.
__host__ __device__ constexpr int q_group_batch(int nr) { return nr >= 4 ? 1 : 4 / nr; }

/// grid_rows of a segmented (possibly quantized) matrix of `rows` rows: the same row
/// groups to the same warps (so the blocks owning rows are grid_rows' and the phases'
/// arrival counts hold), every group read from registers (no staging), a warp's groups
/// taken q_group_batch at a time. Runs `epi(row, value)` on lane 0 for each row, in
/// increasing order within a group.
template <int K, int NR, int WARPS, class Epi>
__device__ __forceinline__ void qmat_grid_rows(const QMat& m, int rows, const float* xs, Epi epi, int grid = gridDim.x) {
  constexpr int B = q_group_batch(NR);
  const int gw = warp_id() * grid + blockIdx.x;
  const int nw = WARPS * grid;
  const int groups = (rows + NR - 1) / NR;
  for (int g = gw; g < groups; g += B * nw) {
    // This batch's groups g, g + nw, …: together when all exist and share a segment.
    const QSeg sg = q_segment<K>(m, g * NR);
    const int last = g + (B - 1) * nw;
    float acc[B * NR];
    int row0[B];
#pragma unroll
    for (int b = 0; b < B; ++b) row0[b] = (g + b * nw) * NR;
    if (B > 1 && last < groups && last * NR < sg.end) {
      q_groups_dot<K, NR, B>(sg, row0, xs, acc);
    } else {
#pragma unroll
      for (int b = 0; b < B; ++b) {
        if (g + b * nw < groups) {  // warp-uniform
          const int one[1] = {row0[b]};
          float a[NR];
          q_groups_dot<K, NR, 1>(q_segment<K>(m, row0[b]), one, xs, a);
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
