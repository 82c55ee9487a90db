//! Batched prompt prefill: the small kernels around the tensor-core GEMMs (cuBLAS, enqueued
//! by backend/engine/src/cuda/runtime/prefill/kernels.rs) that run prompt positions 0..P-2 of
//! a request as a batch before the persistent decode kernel (decode.cu) takes over at
//! position P-1. One row = one prompt position. The math is the decode kernel's
//! (same RMSNorm order, bias, RoPE pair rotation, bf16 KV cache, f32 softmax and
//! residual stream); what differs is that GEMM inputs (normalised activations,
//! attention output, SwiGLU output) are rounded to bf16 for the tensor cores.
//!
//! Shape and tiling are -D defines from layout.rs (the attention split only when the shape is
//! supported); compiled without them (scripts/check-kernels.sh) this file is empty.
#if defined(PG_D) && defined(PG_PF_TPQ)

#include "common.cuh"
#include "shape.cuh"
#include "ops/rope.cuh"
#include "ops/swiglu.cuh"

/// Threads of the per-row kernels (embedding, RMSNorm, bias + RoPE).
constexpr int ROW_THREADS = PG_PF_ROW_THREADS;

// ---- per-row kernels: grid = rows of the chunk ---------------------------------

/// x[r] = embedding row of prompt token `c0 + r`, as f32 (the residual stream).
extern "C" __global__ void __launch_bounds__(ROW_THREADS) pg_pf_embed(const u32* tokens, const bf16_t* embed, float* x, u32 c0) {
  const size_t r = blockIdx.x;
  const bf16_t* row = embed + (size_t)tokens[c0 + r] * D;
  for (int i = threadIdx.x; i < D; i += ROW_THREADS) x[r * D + i] = bf16_to_f32(row[i]);
}

/// out[r] = bf16(x[r] / sqrt(mean(x[r]²) + eps) * w): decode's rmsnorm_smem, rounded
/// for the GEMM that follows.
extern "C" __global__ void __launch_bounds__(ROW_THREADS) pg_pf_rmsnorm(const float* x, const float* w, bf16_t* out) {
  __shared__ float red[ROW_THREADS / WARP_SIZE];
  const size_t r = blockIdx.x;
  const float* xr = x + r * D;
  float acc = 0.f;
  for (int i = threadIdx.x; i < D; i += ROW_THREADS) acc = fmaf(xr[i], xr[i], acc);
  const float ms = block_sum<ROW_THREADS>(acc, red) / (float)D;
  const float scale = 1.0f / sqrtf(ms + EPS);
  for (int i = threadIdx.x; i < D; i += ROW_THREADS) out[r * D + i] = f32_to_bf16(xr[i] * scale * __ldg(w + i));
}

/// On the q/k/v GEMM's f32 output row: + bias, RoPE on q (kept f32 for attention) and
/// on k, then k and v rounded to bf16 into the layer's cache at position c0 + r
/// (decode.cu's current_kv). `kc` is the layer's K cache; V follows it.
extern "C" __global__ void __launch_bounds__(ROW_THREADS)
    pg_pf_qkv_rope(float* qkv, const float* bias, const float* inv_freq, bf16_t* kc, u32 c0) {
  const size_t r = blockIdx.x;
  const int pos = (int)(c0 + r);
  float* row = qkv + r * QKV;
#if PG_QKV_BIAS
  for (int i = threadIdx.x; i < QKV; i += ROW_THREADS) row[i] += __ldg(bias + i);
  __syncthreads();
#endif
  (void)bias;
  // q heads then k heads are contiguous: (NH + NKV) heads of HD/2 pairs.
  for (int p = threadIdx.x; p < (NH + NKV) * (HD / 2); p += ROW_THREADS) {
    rope_pair<HD>(row + (p / (HD / 2)) * HD, p % (HD / 2), pos, inv_freq);
  }
  __syncthreads();
  bf16_t* vc = kc + (size_t)NKV * KV_CAP * HD;
  for (int j = threadIdx.x; j < KVD; j += ROW_THREADS) {
    const size_t at = ((size_t)(j / HD) * KV_CAP + pos) * HD + j % HD;
    kc[at] = f32_to_bf16(row[QD + j]);
    vc[at] = f32_to_bf16(row[QD + KVD + j]);
  }
}

/// Tensor parallelism: one layer's partials (o- or down-projection of the chunk) into
/// the residual, the decode kernel's load_combined per the layer's mode (layout.rs
/// XMode): all-reduce x + now[0] + now[1] + … in rank order (every rank's residual gets
/// the same bits); DTP lane-local x + scale · now[rank]; DTP delayed x + now[rank] + the
/// other ranks' `late` slots (an earlier layer's, or none when `late` is null). Slot r
/// (`stride` floats apart) holds rank r's partial, copied over by rank r (runtime.rs
/// `exchange_prefill`).
extern "C" __global__ void __launch_bounds__(ROW_THREADS) pg_pf_add_parts(float* x, const float* now, const float* late, u32 n_parts,
                                                                         u32 stride, u32 total, u32 mode, u32 rank, float scale) {
  for (u32 i = blockIdx.x * ROW_THREADS + threadIdx.x; i < total; i += gridDim.x * ROW_THREADS) {
    float v = x[i];
    if (mode == PG_XM_ALL) {
      for (u32 r = 0; r < n_parts; ++r) v += now[(size_t)r * stride + i];
    } else {
      const float own = now[(size_t)rank * stride + i];
      v += mode == PG_XM_LOCAL ? own * scale : own;
      if (late)
        for (u32 r = 0; r < n_parts; ++r)
          if (r != rank) v += late[(size_t)r * stride + i];
    }
    x[i] = v;
  }
}

/// act[r][j] = bf16(silu(gate_j) · up_j) from the gate/up GEMM's interleaved output
/// (column 2j = gate_j, 2j+1 = up_j, like the decode kernel's weight rows).
extern "C" __global__ void __launch_bounds__(ROW_THREADS) pg_pf_swiglu(const float* gu, bf16_t* act, u32 total) {
  for (u32 i = blockIdx.x * ROW_THREADS + threadIdx.x; i < total; i += gridDim.x * ROW_THREADS) {
    const float2 p = reinterpret_cast<const float2*>(gu)[i];
    act[i] = f32_to_bf16(swiglu(p.x, p.y));
  }
}

// ---- causal attention over the cache ------------------------------------------

/// A lane group of TPQ × KS threads serves one query: TPQ threads split the head's
/// dimensions (4-float chunks dealt round-robin, so a group's loads hit distinct
/// banks), KS threads split the keys of each tile; their softmax states merge at the end.
constexpr int TPQ = PG_PF_TPQ;
constexpr int KS = PG_PF_KS;
constexpr int KT = PG_PF_KT;
constexpr int ATTN_THREADS = PG_PF_ATTN_THREADS;
constexpr int LANES = TPQ * KS;
constexpr int QB = ATTN_THREADS / LANES;
constexpr int DPT = HD / TPQ;
constexpr int CHUNKS = DPT / 4;
/// Shared row stride in floats: the pad moves the KS rows a phase reads to other banks.
constexpr int ROW = HD + 4 * TPQ;
constexpr int KEYS_PER_LANE = KT / KS;
static_assert(HD % (4 * TPQ) == 0 && DPT <= 64, "head_dim does not split into TPQ lanes of 4-float chunks");
static_assert(LANES <= WARP_SIZE && WARP_SIZE % LANES == 0 && ATTN_THREADS % WARP_SIZE == 0, "lane groups must tile warps");
static_assert(KT % KS == 0, "key tile must split over KS lanes");

/// Dimension index of this lane's chunk c.
__device__ __forceinline__ int chunk_dim(int c, int tp) { return (c * TPQ + tp) * 4; }

/// Queries c0 .. c0+n-1 (rows of q, roped f32 inside the q/k/v rows) attend causally to
/// cache positions 0 ..= their own (`win` > 0: their last `win` positions only);
/// out[r][h·HD..] = bf16(softmax(q·k/√HD) · v).
/// Grid (ceil(n / QB), NH); the heaviest query blocks are scheduled first.
extern "C" __global__ void __launch_bounds__(ATTN_THREADS)
    pg_pf_attention(const float* qkv, const bf16_t* kc, bf16_t* out, u32 c0, u32 n, u32 win) {
  __shared__ __align__(16) float ks_s[KT * ROW];
  __shared__ __align__(16) float vs_s[KT * ROW];
  const int h = blockIdx.y, g = h / GROUP;
  const int qb = gridDim.x - 1 - blockIdx.x;
  const int lane_in = threadIdx.x % LANES, ql = threadIdx.x / LANES;
  const int tp = lane_in % TPQ, kslot = lane_in / TPQ;
  const int r_raw = qb * QB + ql;
  const bool valid = r_raw < (int)n;
  const int r = valid ? r_raw : (int)n - 1;
  const int qpos = (int)c0 + r;
  const int kend = (int)c0 + min((qb + 1) * QB, (int)n);  // block's last position + 1
  // The oldest key this query and this block's first query see.
  const int qfirst = win ? max(0, qpos + 1 - (int)win) : 0;
  const int kbegin = win ? max(0, (int)c0 + qb * QB + 1 - (int)win) / KT * KT : 0;
  const bf16_t* kg = kc + (size_t)g * KV_CAP * HD;
  const bf16_t* vg = kc + ((size_t)NKV + g) * KV_CAP * HD;

  // Scores in the log2 domain: q pre-scaled by log2(e)/√HD.
  const float qscale = 1.4426950408889634f / sqrtf((float)HD);
  float q[DPT], acc[DPT];
  const float* qrow = qkv + (size_t)r * QKV + h * HD;
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
    const float4 v = *reinterpret_cast<const float4*>(qrow + chunk_dim(c, tp));
    q[4 * c] = v.x * qscale;
    q[4 * c + 1] = v.y * qscale;
    q[4 * c + 2] = v.z * qscale;
    q[4 * c + 3] = v.w * qscale;
  }
#pragma unroll
  for (int d = 0; d < DPT; ++d) acc[d] = 0.f;
  float m = NEG_INF, l = 0.f;

  constexpr int WORDS = KT * HD / 8;  // 16-byte words of one tile of K (or V)
  for (int t0 = kbegin; t0 < kend; t0 += KT) {
    __syncthreads();
    for (int w = threadIdx.x; w < WORDS; w += ATTN_THREADS) {
      const int rr = w / (HD / 8), c8 = (w % (HD / 8)) * 8;
      uint4 kw = make_uint4(0, 0, 0, 0), vw = make_uint4(0, 0, 0, 0);
      if (t0 + rr < kend) {  // rows past the block's last query stay zero (never NaN)
        kw = *reinterpret_cast<const uint4*>(kg + (size_t)(t0 + rr) * HD + c8);
        vw = *reinterpret_cast<const uint4*>(vg + (size_t)(t0 + rr) * HD + c8);
      }
      float* kd = ks_s + rr * ROW + c8;
      float* vd = vs_s + rr * ROW + c8;
      *reinterpret_cast<float4*>(kd) = make_float4(bf16_lo(kw.x), bf16_hi(kw.x), bf16_lo(kw.y), bf16_hi(kw.y));
      *reinterpret_cast<float4*>(kd + 4) = make_float4(bf16_lo(kw.z), bf16_hi(kw.z), bf16_lo(kw.w), bf16_hi(kw.w));
      *reinterpret_cast<float4*>(vd) = make_float4(bf16_lo(vw.x), bf16_hi(vw.x), bf16_lo(vw.y), bf16_hi(vw.y));
      *reinterpret_cast<float4*>(vd + 4) = make_float4(bf16_lo(vw.z), bf16_hi(vw.z), bf16_lo(vw.w), bf16_hi(vw.w));
    }
    __syncthreads();

    float s[KEYS_PER_LANE];
    float tmax = NEG_INF;
#pragma unroll
    for (int i = 0; i < KEYS_PER_LANE; ++i) {
      const int j = i * KS + kslot;
      const float* kr = ks_s + j * ROW;
      float d0 = 0.f, d1 = 0.f;
#pragma unroll
      for (int c = 0; c < CHUNKS; ++c) {
        const float4 k4 = *reinterpret_cast<const float4*>(kr + chunk_dim(c, tp));
        d0 = fmaf(q[4 * c], k4.x, d0);
        d1 = fmaf(q[4 * c + 1], k4.y, d1);
        d0 = fmaf(q[4 * c + 2], k4.z, d0);
        d1 = fmaf(q[4 * c + 3], k4.w, d1);
      }
      float dot = d0 + d1;
#pragma unroll
      for (int o = 1; o < TPQ; o <<= 1) dot += __shfl_xor_sync(FULL_MASK, dot, o);
      s[i] = t0 + j <= qpos && t0 + j >= qfirst ? dot : NEG_INF;
      tmax = fmaxf(tmax, s[i]);
    }
    if (tmax != NEG_INF) {  // no shuffles inside: lanes may diverge here
      const float m_new = fmaxf(m, tmax);
      const float corr = exp2f(m - m_new);  // 0 while m is -inf
      l *= corr;
#pragma unroll
      for (int d = 0; d < DPT; ++d) acc[d] *= corr;
#pragma unroll
      for (int i = 0; i < KEYS_PER_LANE; ++i) {
        const float p = exp2f(s[i] - m_new);
        l += p;
        const float* vr = vs_s + (i * KS + kslot) * ROW;
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) {
          const float4 v4 = *reinterpret_cast<const float4*>(vr + chunk_dim(c, tp));
          acc[4 * c] = fmaf(p, v4.x, acc[4 * c]);
          acc[4 * c + 1] = fmaf(p, v4.y, acc[4 * c + 1]);
          acc[4 * c + 2] = fmaf(p, v4.z, acc[4 * c + 2]);
          acc[4 * c + 3] = fmaf(p, v4.w, acc[4 * c + 3]);
        }
      }
      m = m_new;
    }
  }

  // Merge the KS key-split states of this query (lanes TPQ apart).
  float m_all = m;
#pragma unroll
  for (int o = TPQ; o < LANES; o <<= 1) m_all = fmaxf(m_all, __shfl_xor_sync(FULL_MASK, m_all, o));
  const float f = m == NEG_INF ? 0.f : exp2f(m - m_all);
  l *= f;
#pragma unroll
  for (int d = 0; d < DPT; ++d) acc[d] *= f;
#pragma unroll
  for (int o = TPQ; o < LANES; o <<= 1) {
    l += __shfl_xor_sync(FULL_MASK, l, o);
#pragma unroll
    for (int d = 0; d < DPT; ++d) acc[d] += __shfl_xor_sync(FULL_MASK, acc[d], o);
  }
  if (valid && kslot == 0) {
    const float inv = 1.0f / l;  // ≥ 1 term: the query's own position is always visible
    bf16_t* orow = out + (size_t)r * QD + h * HD;
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
      const int d0 = chunk_dim(c, tp);
#pragma unroll
      for (int e = 0; e < 4; ++e) orow[d0 + e] = f32_to_bf16(acc[4 * c + e] * inv);
    }
  }
}

// ---- causal attention on the tensor cores (FlashAttention-2 layout) -------------

#if PG_PF_MMA
/// Each warp owns 16 queries; S = Q·Kᵀ and O += P·V are mma.sync m16n8k16 bf16 tiles
/// with f32 accumulators, the online softmax runs on the S accumulators in registers
/// (the C layout of S is the A layout of P), keys come in tiles of MKT through shared
/// memory: K row-major, V transposed, rows padded by 8 halves so fragment loads hit 32
/// distinct banks. q and p are rounded to bf16 for the MMAs (K and V already are).
constexpr int MKT = PG_PF_MMA_KT;
constexpr int MWARPS = ATTN_THREADS / WARP_SIZE;
constexpr int MQB = 16 * MWARPS;
constexpr int KROW = HD + 8;   // halves per K row in shared memory
constexpr int VROW = MKT + 8;  // halves per transposed V row
constexpr int KSTEPS = HD / 16;
constexpr int DTILES = HD / 8;
constexpr int STILES = MKT / 8;
static_assert(HD % 16 == 0 && MKT % 16 == 0, "mma attention needs head_dim and key tile multiples of 16");

__device__ __forceinline__ u32 pack_bf16(float lo, float hi) { return (u32)f32_to_bf16(lo) | ((u32)f32_to_bf16(hi) << 16); }

__device__ __forceinline__ void mma_bf16(float* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/// pg_pf_attention's contract on the tensor cores. Grid (ceil(n / MQB), NH).
extern "C" __global__ void __launch_bounds__(ATTN_THREADS)
    pg_pf_attention_mma(const float* qkv, const bf16_t* kc, bf16_t* out, u32 c0, u32 n, u32 win) {
  __shared__ __align__(16) bf16_t k_s[MKT * KROW];
  __shared__ __align__(16) bf16_t vt_s[HD * VROW];
  const int h = blockIdx.y, grp = h / GROUP;
  const int qb = gridDim.x - 1 - blockIdx.x;
  const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
  const int g = lane / 4, t = lane % 4;  // fragment row group and column pair
  const int kend = (int)c0 + min((qb + 1) * MQB, (int)n);
  const int w0 = qb * MQB + warp * 16;  // the warp's first query row
  const int ra = min(w0 + g, (int)n - 1), rb = min(w0 + g + 8, (int)n - 1);
  const int pos_a = (int)c0 + ra, pos_b = (int)c0 + rb;
  const int pos_lo = (int)c0 + min(w0, (int)n - 1), pos_hi = (int)c0 + min(w0 + 15, (int)n - 1);
  // Window (`win` > 0): the oldest key rows a and b, the warp and the block see.
  const int first_a = win ? max(0, pos_a + 1 - (int)win) : 0, first_b = win ? max(0, pos_b + 1 - (int)win) : 0;
  const int first_lo = win ? max(0, pos_lo + 1 - (int)win) : 0;
  const int first_hi = win ? max(0, pos_hi + 1 - (int)win) : 0;
  const int kbegin = win ? max(0, (int)c0 + qb * MQB + 1 - (int)win) / MKT * MKT : 0;
  const bf16_t* kg = kc + (size_t)grp * KV_CAP * HD;
  const bf16_t* vg = kc + ((size_t)NKV + grp) * KV_CAP * HD;

  // Q fragments (A operand, 16 queries × HD), pre-scaled into the log2 domain.
  const float qscale = 1.4426950408889634f / sqrtf((float)HD);
  u32 qf[KSTEPS][4];
  {
    const float* qa = qkv + (size_t)ra * QKV + h * HD;
    const float* qbr = qkv + (size_t)rb * QKV + h * HD;
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) {
      const int d = kk * 16 + 2 * t;
      const float2 x0 = *reinterpret_cast<const float2*>(qa + d);
      const float2 x1 = *reinterpret_cast<const float2*>(qbr + d);
      const float2 x2 = *reinterpret_cast<const float2*>(qa + d + 8);
      const float2 x3 = *reinterpret_cast<const float2*>(qbr + d + 8);
      qf[kk][0] = pack_bf16(x0.x * qscale, x0.y * qscale);
      qf[kk][1] = pack_bf16(x1.x * qscale, x1.y * qscale);
      qf[kk][2] = pack_bf16(x2.x * qscale, x2.y * qscale);
      qf[kk][3] = pack_bf16(x3.x * qscale, x3.y * qscale);
    }
  }
  float o[DTILES][4];
#pragma unroll
  for (int d = 0; d < DTILES; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
  // Softmax state of rows g (a) and g + 8 (b); l is this thread's partial row sum.
  float m_a = NEG_INF, m_b = NEG_INF, l_a = 0.f, l_b = 0.f;

  constexpr int WORDS = MKT * HD / 8;  // 16-byte words per tile of K (or V)
  for (int t0 = kbegin; t0 < kend; t0 += MKT) {
    __syncthreads();
    for (int w = threadIdx.x; w < WORDS; w += ATTN_THREADS) {
      const int key = w / (HD / 8), d8 = (w % (HD / 8)) * 8;
      uint4 kw = make_uint4(0, 0, 0, 0), vw = make_uint4(0, 0, 0, 0);
      if (t0 + key < kend) {  // rows past the block's last query stay zero (never NaN)
        kw = *reinterpret_cast<const uint4*>(kg + (size_t)(t0 + key) * HD + d8);
        vw = *reinterpret_cast<const uint4*>(vg + (size_t)(t0 + key) * HD + d8);
      }
      *reinterpret_cast<uint4*>(k_s + key * KROW + d8) = kw;
      const u32 vv[4] = {vw.x, vw.y, vw.z, vw.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        vt_s[(d8 + 2 * e) * VROW + key] = (bf16_t)(vv[e] & 0xffffu);
        vt_s[(d8 + 2 * e + 1) * VROW + key] = (bf16_t)(vv[e] >> 16);
      }
    }
    __syncthreads();
    if (t0 > pos_hi) continue;  // warp-uniform: every key of this tile is in the future
    if (t0 + MKT <= first_lo) continue;  // warp-uniform: every key is older than the window

    float sc[STILES][4];
#pragma unroll
    for (int j = 0; j < STILES; ++j) {
      sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.f;
      const bf16_t* kr = k_s + (j * 8 + g) * KROW + 2 * t;
#pragma unroll
      for (int kk = 0; kk < KSTEPS; ++kk) {
        const u32 b0 = *reinterpret_cast<const u32*>(kr + kk * 16);
        const u32 b1 = *reinterpret_cast<const u32*>(kr + kk * 16 + 8);
        mma_bf16(sc[j], qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], b0, b1);
      }
    }
    if (t0 < first_hi) {  // the window's edge: mask keys older than a row's window
#pragma unroll
      for (int j = 0; j < STILES; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = t0 + j * 8 + 2 * t + e;
          if (key < first_a) sc[j][e] = NEG_INF;
          if (key < first_b) sc[j][2 + e] = NEG_INF;
        }
      }
    }
    if (t0 + MKT - 1 > pos_lo) {  // the diagonal: mask future keys
#pragma unroll
      for (int j = 0; j < STILES; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = t0 + j * 8 + 2 * t + e;
          if (key > pos_a) sc[j][e] = NEG_INF;
          if (key > pos_b) sc[j][2 + e] = NEG_INF;
        }
      }
    }
    float mx_a = m_a, mx_b = m_b;
#pragma unroll
    for (int j = 0; j < STILES; ++j) {
      mx_a = fmaxf(mx_a, fmaxf(sc[j][0], sc[j][1]));
      mx_b = fmaxf(mx_b, fmaxf(sc[j][2], sc[j][3]));
    }
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
      mx_a = fmaxf(mx_a, __shfl_xor_sync(FULL_MASK, mx_a, off));
      mx_b = fmaxf(mx_b, __shfl_xor_sync(FULL_MASK, mx_b, off));
    }
    // A row with no visible key yet keeps max -inf: use 0 as the exponent base so
    // exp2 gives 0 (not NaN) for its masked scores.
    const float base_a = mx_a == NEG_INF ? 0.f : mx_a, base_b = mx_b == NEG_INF ? 0.f : mx_b;
    const float corr_a = exp2f(m_a - base_a), corr_b = exp2f(m_b - base_b);
    m_a = mx_a;
    m_b = mx_b;
    l_a *= corr_a;
    l_b *= corr_b;
#pragma unroll
    for (int d = 0; d < DTILES; ++d) {
      o[d][0] *= corr_a;
      o[d][1] *= corr_a;
      o[d][2] *= corr_b;
      o[d][3] *= corr_b;
    }
#pragma unroll
    for (int j = 0; j < STILES; ++j) {
      sc[j][0] = exp2f(sc[j][0] - base_a);
      sc[j][1] = exp2f(sc[j][1] - base_a);
      sc[j][2] = exp2f(sc[j][2] - base_b);
      sc[j][3] = exp2f(sc[j][3] - base_b);
      l_a += sc[j][0] + sc[j][1];
      l_b += sc[j][2] + sc[j][3];
    }
#pragma unroll
    for (int jj = 0; jj < MKT / 16; ++jj) {
      const u32 a0 = pack_bf16(sc[2 * jj][0], sc[2 * jj][1]);
      const u32 a1 = pack_bf16(sc[2 * jj][2], sc[2 * jj][3]);
      const u32 a2 = pack_bf16(sc[2 * jj + 1][0], sc[2 * jj + 1][1]);
      const u32 a3 = pack_bf16(sc[2 * jj + 1][2], sc[2 * jj + 1][3]);
#pragma unroll
      for (int d = 0; d < DTILES; ++d) {
        const bf16_t* vr = vt_s + (d * 8 + g) * VROW + jj * 16 + 2 * t;
        const u32 b0 = *reinterpret_cast<const u32*>(vr);
        const u32 b1 = *reinterpret_cast<const u32*>(vr + 8);
        mma_bf16(o[d], a0, a1, a2, a3, b0, b1);
      }
    }
  }

#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    l_a += __shfl_xor_sync(FULL_MASK, l_a, off);
    l_b += __shfl_xor_sync(FULL_MASK, l_b, off);
  }
  const float inv_a = 1.0f / l_a, inv_b = 1.0f / l_b;  // a row's own position is always visible: l > 0
  const bool valid_a = w0 + g < (int)n, valid_b = w0 + g + 8 < (int)n;
#pragma unroll
  for (int d = 0; d < DTILES; ++d) {
    const int col = h * HD + d * 8 + 2 * t;
    if (valid_a) *reinterpret_cast<u32*>(out + (size_t)ra * QD + col) = pack_bf16(o[d][0] * inv_a, o[d][1] * inv_a);
    if (valid_b) *reinterpret_cast<u32*>(out + (size_t)rb * QD + col) = pack_bf16(o[d][2] * inv_b, o[d][3] * inv_b);
  }
}
#endif  // PG_PF_MMA

#endif  // PG_D && PG_PF_TPQ
