//! Decode attention of one query head over its KV head's cache (bf16), online
//! softmax per lane group, then a merge of the groups' partial states in shared
//! memory. Matches the CPU reference: softmax(q·k / sqrt(head_dim)) · v.
#pragma once
#include "common.cuh"

/// Smallest power of two ≥ n (n ≤ 32).
__host__ __device__ constexpr int pow2_ceil(int n) { return n <= 1 ? 1 : 2 * pow2_ceil((n + 1) / 2); }

template <int HD>
struct AttnShape {
  /// 16-byte words per head row.
  static constexpr int CHUNKS = HD / 8;
  /// Lanes cooperating on one position (a power of two; lanes past CHUNKS idle).
  static constexpr int LANES = pow2_ceil(CHUNKS);
  /// Positions a warp scores at once.
  static constexpr int PER_WARP = WARP_SIZE / LANES;
  static_assert(HD % 8 == 0 && CHUNKS <= WARP_SIZE, "head_dim must be a multiple of 8, at most 256");
};

/// Shared floats `attend_head` needs as scratch.
template <int THREADS, int HD>
__host__ __device__ constexpr int attn_scratch_floats() {
  return (THREADS / WARP_SIZE) * AttnShape<HD>::PER_WARP * (HD + 2);
}

/// out[0..HD) = attention of q (shared, roped) over `n_prev` cached positions plus the
/// current one (kcur/vcur in shared, already rounded to bf16 like the cache).
template <int THREADS, int HD>
__device__ __forceinline__ void attend_head(const float* q_s, const float* kcur_s, const float* vcur_s,
                                            const bf16_t* kc, const bf16_t* vc, int n_prev, float* out,
                                            float* scratch) {
  using S = AttnShape<HD>;
  constexpr int WARPS = THREADS / WARP_SIZE;
  constexpr int STRIDE = WARPS * S::PER_WARP;
  const int lane = lane_id(), warp = warp_id();
  const int sub = lane / S::LANES, sl = lane % S::LANES;
  const bool active = sl < S::CHUNKS;
  const float scale = 1.0f / sqrtf((float)HD);

  float q[8], acc[8];
#pragma unroll
  for (int d = 0; d < 8; ++d) {
    q[d] = active ? q_s[sl * 8 + d] : 0.f;
    acc[d] = 0.f;
  }
  float m = NEG_INF, l = 0.f;
  // The current position seeds the state of (warp 0, group 0).
  {
    float part = 0.f;
#pragma unroll
    for (int d = 0; d < 8; ++d) part = fmaf(q[d], active ? kcur_s[sl * 8 + d] : 0.f, part);
    const float s = group_sum<S::LANES>(part) * scale;
    if (warp == 0 && sub == 0) {
      m = s;
      l = 1.f;
#pragma unroll
      for (int d = 0; d < 8; ++d) acc[d] = active ? vcur_s[sl * 8 + d] : 0.f;
    }
  }
  for (int base = warp * S::PER_WARP; base < n_prev; base += STRIDE) {
    const int p = base + sub;
    const bool valid = p < n_prev;
    uint4 kw = make_uint4(0, 0, 0, 0), vw = make_uint4(0, 0, 0, 0);
    if (valid && active) {
      kw = ld_shared_16(kc + (size_t)p * HD + sl * 8);
      vw = ld_shared_16(vc + (size_t)p * HD + sl * 8);
    }
    const float part = dot8(kw, make_float4(q[0], q[1], q[2], q[3]), make_float4(q[4], q[5], q[6], q[7]));
    const float s = group_sum<S::LANES>(part) * scale;
    if (valid) {
      const float m_new = fmaxf(m, s);
      const float corr = expf(m - m_new);
      const float pexp = expf(s - m_new);
      l = l * corr + pexp;
      const float v[8] = {bf16_lo(vw.x), bf16_hi(vw.x), bf16_lo(vw.y), bf16_hi(vw.y),
                          bf16_lo(vw.z), bf16_hi(vw.z), bf16_lo(vw.w), bf16_hi(vw.w)};
#pragma unroll
      for (int d = 0; d < 8; ++d) acc[d] = fmaf(pexp, v[d], acc[d] * corr);
      m = m_new;
    }
  }
  // Partial state of each lane group: m, l, acc[HD].
  float* st = scratch + (warp * S::PER_WARP + sub) * (HD + 2);
  if (sl == 0) {
    st[0] = m;
    st[1] = l;
  }
  if (active) {
#pragma unroll
    for (int d = 0; d < 8; ++d) st[2 + sl * 8 + d] = acc[d];
  }
  __syncthreads();
  for (int d = threadIdx.x; d < HD; d += THREADS) {
    float mx = NEG_INF;
    for (int g = 0; g < STRIDE; ++g) {
      const float* sg = scratch + g * (HD + 2);
      if (sg[1] > 0.f) mx = fmaxf(mx, sg[0]);
    }
    float den = 0.f, num = 0.f;
    for (int g = 0; g < STRIDE; ++g) {
      const float* sg = scratch + g * (HD + 2);
      if (sg[1] > 0.f) {
        const float f = expf(sg[0] - mx);
        den = fmaf(sg[1], f, den);
        num = fmaf(sg[2 + d], f, num);
      }
    }
    out[d] = num / den;
  }
  __syncthreads();
}
