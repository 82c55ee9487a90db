//! Batched prompt prefill: the small kernels around the tensor-core GEMMs (cuBLAS,
//! enqueued by backend/engine/src/cuda/prefill.rs) that run prompt positions 0..P-2 of
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
#include "ops/rope.cuh"
#include "ops/swiglu.cuh"

constexpr int D = PG_D;
constexpr int F = PG_F;
constexpr int NH = PG_NH;
constexpr int NKV = PG_NKV;
constexpr int HD = PG_HD;
constexpr int KV_CAP = PG_KV_CAP;
constexpr float EPS = PG_EPS;
constexpr int QD = NH * HD;
constexpr int KVD = NKV * HD;
constexpr int QKV = QD + 2 * KVD;
constexpr int GROUP = NH / NKV;
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
/// cache positions 0 ..= their own; out[r][h·HD..] = bf16(softmax(q·k/√HD) · v).
/// Grid (ceil(n / QB), NH); the heaviest query blocks are scheduled first.
extern "C" __global__ void __launch_bounds__(ATTN_THREADS)
    pg_pf_attention(const float* qkv, const bf16_t* kc, bf16_t* out, u32 c0, u32 n) {
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
  for (int t0 = 0; t0 < kend; t0 += KT) {
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
      s[i] = t0 + j <= qpos ? dot : NEG_INF;
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
    const float inv = 1.0f / l;  // ≥ 1 term: key 0 is always visible
    bf16_t* orow = out + (size_t)r * QD + h * HD;
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
      const int d0 = chunk_dim(c, tp);
#pragma unroll
      for (int e = 0; e < 4; ++e) orow[d0 + e] = f32_to_bf16(acc[4 * c + e] * inv);
    }
  }
}

#endif  // PG_D && PG_PF_TPQ
