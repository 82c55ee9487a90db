//! Decode attention of one query head over a range of its KV head's cache (bf16):
//! lane groups keep an online softmax over their positions (several positions' loads
//! in flight per group), the groups of a warp merge their states by shuffles and the
//! warps' states are merged in shared memory,
//! and the result is either the head's output or an unnormalised partial state that
//! another block merges (flash-decoding split). Matches the CPU reference:
//! softmax(q·k / sqrt(head_dim)) · v.
#pragma once
#include "common.cuh"

/// Smallest power of two ≥ n (n ≤ 32).
__host__ __device__ constexpr int pow2_ceil(int n) { return n <= 1 ? 1 : 2 * pow2_ceil((n + 1) / 2); }

template <int THREADS, int HD>
struct AttnShape {
  /// 16-byte words per head row.
  static constexpr int CHUNKS = HD / 8;
  /// Lanes cooperating on one position (a power of two; lanes past CHUNKS idle).
  static constexpr int LANES = pow2_ceil(CHUNKS);
  /// Positions a warp scores at once.
  static constexpr int PER_WARP = WARP_SIZE / LANES;
  /// Lane groups in the block, each with its own softmax state.
  static constexpr int GROUPS = (THREADS / WARP_SIZE) * PER_WARP;
  /// Positions whose loads each group issues before using them.
  static constexpr int UNROLL = 4;
  /// Positions the block covers per pass (one round of loads).
  static constexpr int PER_PASS = GROUPS * UNROLL;
  /// Merge scratch: one state (m, l, acc[HD]) per warp.
  static constexpr int SCRATCH = (THREADS / WARP_SIZE) * (HD + 2);
  static_assert(HD % 8 == 0 && CHUNKS <= WARP_SIZE, "head_dim must be a multiple of 8, at most 256");
  static_assert(THREADS >= HD, "block smaller than head_dim");
};

/// Shared floats the attention ops need as scratch.
template <int THREADS, int HD>
__host__ __device__ constexpr int attn_scratch_floats() {
  return AttnShape<THREADS, HD>::SCRATCH;
}

/// uint4 words of shared memory attend_stage fills: the first pass's k and v words of every thread.
template <int THREADS, int HD>
__host__ __device__ constexpr int attn_stage_words() {
  return THREADS * AttnShape<THREADS, HD>::UNROLL * 2;
}

/// Starts copying (cp.async) the cached k and v words this thread reads in the first
/// pass of attend_range over [p0, p1) into `stage` ([UNROLL][2][THREADS] uint4), so the
/// block can issue them before waiting for the current position's q/k/v: cached rows
/// were written in earlier steps.
template <int THREADS, int HD>
__device__ __forceinline__ void attend_stage(const bf16_t* kc, const bf16_t* vc, int p0, int p1, uint4* stage) {
  using S = AttnShape<THREADS, HD>;
  const int lane = lane_id(), warp = warp_id();
  const int sub = lane / S::LANES, sl = lane % S::LANES;
  const int base = p0 + warp * S::PER_WARP + sub;
#pragma unroll
  for (int u = 0; u < S::UNROLL; ++u) {
    const int p = base + u * S::GROUPS;
    if (p < p1 && sl < S::CHUNKS) {
      cp_async16(stage + (u * 2) * THREADS + threadIdx.x, kc + (size_t)p * HD + sl * 8);
      cp_async16(stage + (u * 2 + 1) * THREADS + threadIdx.x, vc + (size_t)p * HD + sl * 8);
    }
  }
  cp_async_commit();
}

/// Softmax state of q over cached positions [p0, p1) plus, when `with_current`, the
/// current position (kcur/vcur in shared, rounded to bf16 like the cache). Writes
/// (m, l, acc[HD]) unnormalised to `state` (any memory), or — when `out` is given —
/// the normalised output acc/l to `out`. `staged` (or null): the first pass's words,
/// copied by attend_stage for the same range.
template <int THREADS, int HD>
__device__ __forceinline__ void attend_range(const float* q_s, const float* kcur_s, const float* vcur_s, bool with_current,
                                             const bf16_t* kc, const bf16_t* vc, int p0, int p1, float* state, float* out,
                                             float* scratch, const uint4* staged = nullptr) {
  using S = AttnShape<THREADS, HD>;
  constexpr int STRIDE = S::GROUPS;
  const int lane = lane_id(), warp = warp_id();
  const int sub = lane / S::LANES, sl = lane % S::LANES;
  const int group = warp * S::PER_WARP + sub;
  const bool active = sl < S::CHUNKS;
  const float scale = 1.0f / sqrtf((float)HD);

  float q[8], acc[8];
#pragma unroll
  for (int d = 0; d < 8; ++d) {
    q[d] = active ? q_s[sl * 8 + d] : 0.f;
    acc[d] = 0.f;
  }
  const float4 qa = make_float4(q[0], q[1], q[2], q[3]), qb = make_float4(q[4], q[5], q[6], q[7]);
  float m = NEG_INF, l = 0.f;
  if (with_current) {
    // The current position seeds the state of group 0.
    float part = 0.f;
#pragma unroll
    for (int d = 0; d < 8; ++d) part = fmaf(q[d], active ? kcur_s[sl * 8 + d] : 0.f, part);
    const float s = group_sum<S::LANES>(part) * scale;
    if (group == 0) {
      m = s;
      l = 1.f;
#pragma unroll
      for (int d = 0; d < 8; ++d) acc[d] = active ? vcur_s[sl * 8 + d] : 0.f;
    }
  }
  // The loop bound is uniform per warp (shuffles below need every lane); each lane
  // group takes position base + sub (+ u · STRIDE).
  if (staged) cp_async_wait_all();
  for (int wbase = p0 + warp * S::PER_WARP; wbase < p1; wbase += STRIDE * S::UNROLL) {
    const int base = wbase + sub;
    const bool first = staged && wbase == p0 + warp * S::PER_WARP;
    uint4 kw[S::UNROLL], vw[S::UNROLL];
#pragma unroll
    for (int u = 0; u < S::UNROLL; ++u) {
      const int p = base + u * STRIDE;
      kw[u] = make_uint4(0, 0, 0, 0);
      vw[u] = make_uint4(0, 0, 0, 0);
      if (p < p1 && active) {
        if (first) {
          kw[u] = staged[(u * 2) * THREADS + threadIdx.x];
          vw[u] = staged[(u * 2 + 1) * THREADS + threadIdx.x];
        } else {
          kw[u] = ld_shared_16(kc + (size_t)p * HD + sl * 8);
          vw[u] = ld_shared_16(vc + (size_t)p * HD + sl * 8);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < S::UNROLL; ++u) {
      const float s = group_sum<S::LANES>(dot8(kw[u], qa, qb)) * scale;
      if (base + u * STRIDE < p1) {
        const float m_new = fmaxf(m, s);
        const float corr = expf(m - m_new);
        const float pexp = expf(s - m_new);
        l = l * corr + pexp;
        const uint4 w = vw[u];
        const float v[8] = {bf16_lo(w.x), bf16_hi(w.x), bf16_lo(w.y), bf16_hi(w.y),
                            bf16_lo(w.z), bf16_hi(w.z), bf16_lo(w.w), bf16_hi(w.w)};
#pragma unroll
        for (int d = 0; d < 8; ++d) acc[d] = fmaf(pexp, v[d], acc[d] * corr);
        m = m_new;
      }
    }
  }
  // Merge: the PER_WARP groups of each warp by shuffles (no shared memory, no barrier),
  // then the warps' states in shared memory (one barrier). An empty state (l = 0, m = -inf)
  // weighs 0.
#pragma unroll
  for (int off = S::LANES; off < WARP_SIZE; off <<= 1) {
    const float m_o = lane_xor(m, off), l_o = lane_xor(l, off);
    const float m_n = fmaxf(m, m_o);
    const float f = l > 0.f ? expf(m - m_n) : 0.f;
    const float f_o = l_o > 0.f ? expf(m_o - m_n) : 0.f;
#pragma unroll
    for (int d = 0; d < 8; ++d) acc[d] = acc[d] * f + lane_xor(acc[d], off) * f_o;
    l = l * f + l_o * f_o;
    m = m_n;
  }
  constexpr int WARPS = THREADS / WARP_SIZE;
  float* ws = scratch + warp * (HD + 2);  // this warp's state
  if (sub == 0) {
    if (sl == 0) {
      ws[0] = m;
      ws[1] = l;
    }
    if (active) {
#pragma unroll
      for (int d = 0; d < 8; ++d) ws[2 + sl * 8 + d] = acc[d];
    }
  }
  __syncthreads();
  for (int d = threadIdx.x; d < HD; d += THREADS) {
    float mx = NEG_INF;
    for (int w = 0; w < WARPS; ++w) {
      const float* sw = scratch + w * (HD + 2);
      if (sw[1] > 0.f) mx = fmaxf(mx, sw[0]);
    }
    float num = 0.f, den = 0.f;
    for (int w = 0; w < WARPS; ++w) {
      const float* sw = scratch + w * (HD + 2);
      if (sw[1] > 0.f) {
        const float f = expf(sw[0] - mx);
        den = fmaf(sw[1], f, den);
        num = fmaf(sw[2 + d], f, num);
      }
    }
    if (out) {
      out[d] = num / den;
    } else {
      state[2 + d] = num;
      if (d == 0) {
        state[0] = mx;
        state[1] = den;
      }
    }
  }
  __syncthreads();
}

/// out[d] = merge of `n` unnormalised partial states (m, l, acc[HD]) at `states`
/// (written by other blocks: read at L2).
template <int THREADS, int HD>
__device__ __forceinline__ void merge_states(const float* states, int n, float* out) {
  for (int d = threadIdx.x; d < HD; d += THREADS) {
    float mx = NEG_INF;
    for (int i = 0; i < n; ++i) {
      const float* s = states + i * (HD + 2);
      if (ld_shared_f32(s + 1) > 0.f) mx = fmaxf(mx, ld_shared_f32(s));
    }
    float num = 0.f, den = 0.f;
    for (int i = 0; i < n; ++i) {
      const float* s = states + i * (HD + 2);
      const float li = ld_shared_f32(s + 1);
      if (li > 0.f) {
        const float f = expf(ld_shared_f32(s) - mx);
        den = fmaf(li, f, den);
        num = fmaf(ld_shared_f32(s + 2 + d), f, num);
      }
    }
    out[d] = num / den;
  }
}
