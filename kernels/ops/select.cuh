//! Block-wide prefix selection over up to 2^32 elements in (value desc, index asc)
//! order, without sorting: MSB radix passes over order-preserving 32-bit keys with
//! integer weights (counts, or fixed-point probabilities), so results are exact and
//! the same on every run. Used by the sampler for top-k, top-p, the draw itself and
//! the top log-probabilities.
#pragma once
#include "common.cuh"

/// The smallest prefix in sorted order: {i : key_i > key} ∪ {i : key_i == key ∧ i ≤ last}.
/// `last` is the prefix's final element.
struct Prefix {
  u32 key;
  u32 last;
};

__device__ __forceinline__ bool in_prefix(const Prefix& p, u32 key, u32 i) {
  return key > p.key || (key == p.key && i <= p.last);
}

constexpr int SELECT_BINS = 256;
constexpr int SELECT_DIGIT_BITS = 8;

struct SelectSmem {
  u64 hist[SELECT_BINS];
  u32 count[SELECT_BINS];
  u32 min_idx[SELECT_BINS];
  u64 red[WARP_SIZE];
  u64 bcast[4];
};

/// Σ weight over the elements `src` accepts (exact).
template <int THREADS, class Src>
__device__ __forceinline__ u64 select_total(const Src& src, u32 n, SelectSmem* sm) {
  u64 acc = 0;
  for (u32 i = threadIdx.x; i < n; i += THREADS) {
    u32 key;
    u64 w;
    if (src(i, key, w)) acc += w;
  }
  return block_sum_u64<THREADS>(acc, sm->red);
}

/// Smallest prefix whose accepted weight reaches `want` (clamped to the total).
/// `src(i, key&, w&)` says whether element i takes part, with its key and weight;
/// elements with equal keys must have equal weights. Called by the whole block.
template <int THREADS, class Src>
__device__ Prefix select_prefix(const Src& src, u32 n, u64 want, SelectSmem* sm) {
  constexpr int WARPS = THREADS / WARP_SIZE;
  constexpr int BINS_PER_LANE = SELECT_BINS / WARP_SIZE;
  u32 prefix = 0, mask = 0;
  u64 above = 0;  // weight of elements whose key is above the current bucket
  u32 bsel = 0;
  for (int shift = 32 - SELECT_DIGIT_BITS; shift >= 0; shift -= SELECT_DIGIT_BITS) {
    for (int b = threadIdx.x; b < SELECT_BINS; b += THREADS) {
      sm->hist[b] = 0;
      sm->count[b] = 0;
      sm->min_idx[b] = 0xffffffffu;
    }
    __syncthreads();
    // Run-length aggregation: a thread's consecutive elements mostly share a bin in
    // the high digits, so atomics stay rare.
    int cur = -1;
    u64 cur_w = 0;
    for (u32 i = threadIdx.x; i < n; i += THREADS) {
      u32 key;
      u64 w;
      if (!src(i, key, w) || w == 0 || (key & mask) != prefix) continue;
      const int bin = (key >> shift) & (SELECT_BINS - 1);
      if (shift == 0) {
        atomicMin(&sm->min_idx[bin], i);
        atomicAdd(&sm->count[bin], 1u);
      }
      if (bin != cur) {
        if (cur >= 0) atomicAdd(&sm->hist[cur], cur_w);
        cur = bin;
        cur_w = 0;
      }
      cur_w += w;
    }
    if (cur >= 0) atomicAdd(&sm->hist[cur], cur_w);
    __syncthreads();
    if (warp_id() == 0) {
      const int lane = lane_id();
      u64 part[BINS_PER_LANE];
      u64 lsum = 0;
#pragma unroll
      for (int k = 0; k < BINS_PER_LANE; ++k) {
        part[k] = sm->hist[SELECT_BINS - 1 - lane * BINS_PER_LANE - k];
        lsum += part[k];
      }
      u64 incl = lsum;
#pragma unroll
      for (int off = 1; off < WARP_SIZE; off <<= 1) {
        const u64 t = __shfl_up_sync(FULL_MASK, incl, off);
        if (lane >= off) incl += t;
      }
      const u64 total = __shfl_sync(FULL_MASK, incl, WARP_SIZE - 1);
      // Clamp: asking for more than there is selects everything accepted.
      const u64 w_here = min(want, above + total);
      const u64 excl = incl - lsum;
      const bool hit = lsum > 0 && above + excl < w_here && above + incl >= w_here;
      const u32 hits = __ballot_sync(FULL_MASK, hit);
      if (hits == 0) {
        if (lane == 0) {  // nothing accepted in this bucket: keep bin 0 (empty prefix)
          sm->bcast[0] = above;
          sm->bcast[1] = 0;
        }
      } else if (lane == __ffs(hits) - 1) {
        u64 acc = above + excl;
        int b = 0;
#pragma unroll
        for (int k = 0; k < BINS_PER_LANE; ++k) {
          if (acc + part[k] >= w_here) {
            b = SELECT_BINS - 1 - lane * BINS_PER_LANE - k;
            break;
          }
          acc += part[k];
        }
        sm->bcast[0] = acc;
        sm->bcast[1] = (u64)b;
      }
    }
    __syncthreads();
    above = sm->bcast[0];
    bsel = (u32)sm->bcast[1];
    prefix |= bsel << shift;
    mask |= (u32)(SELECT_BINS - 1) << shift;
    if (shift == 0) break;
    __syncthreads();
  }
  // `prefix` is now the exact key of the final element. Its tie bucket holds
  // count[bsel] members of equal weight; the prefix takes the first r of them in index order.
  const u32 members = sm->count[bsel];
  Prefix res{prefix, sm->min_idx[bsel]};
  if (members <= 1) {
    __syncthreads();
    return res;
  }
  const u64 w_each = sm->hist[bsel] / members;
  const u64 need = min(want, above + sm->hist[bsel]) - above;
  const u32 r = (u32)((need + w_each - 1) / w_each);
  __syncthreads();
  if (r <= 1) return res;
  // Rare: the r-th member of a tie, found by warps over contiguous segments.
  u32* seg_count = reinterpret_cast<u32*>(sm->hist);
  const u32 seg = ((n + WARPS - 1) / WARPS + WARP_SIZE - 1) / WARP_SIZE * WARP_SIZE;
  const u32 begin = warp_id() * seg, end = min(n, begin + seg);
  auto member = [&](u32 i) {
    u32 key;
    u64 w;
    return i < end && src(i, key, w) && w != 0 && key == prefix;
  };
  u32 cnt = 0;
  for (u32 base = begin; base < end; base += WARP_SIZE) cnt += __popc(__ballot_sync(FULL_MASK, member(base + lane_id())));
  if (lane_id() == 0) seg_count[warp_id()] = cnt;
  __syncthreads();
  u32 before = 0;
  for (int w = 0; w < (int)warp_id(); ++w) before += seg_count[w];
  if (before < r && before + cnt >= r) {
    u32 seen = before;
    for (u32 base = begin; base < end; base += WARP_SIZE) {
      const u32 m = __ballot_sync(FULL_MASK, member(base + lane_id()));
      if (seen + __popc(m) >= r) {
        u32 mm = m;
        for (u32 k = seen + 1; k < r; ++k) mm &= mm - 1;  // drop the members before the r-th
        if (lane_id() == 0) sm->bcast[2] = base + __ffs(mm) - 1;
        break;
      }
      seen += __popc(m);
    }
  }
  __syncthreads();
  res.last = (u32)sm->bcast[2];
  __syncthreads();
  return res;
}
