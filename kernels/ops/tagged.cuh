//! Loading a vector other blocks publish as tagged words (decode.cu TAGGED, sync.cuh): each
//! thread polls its own words until they carry this step's tag, so the block waits for
//! exactly the data it reads, and the wait and the load are one L2 round trip instead of
//! a counter poll, a fence and a load.
#pragma once
#include "common.cuh"
#include "sync.cuh"
#include "ops/trace.cuh"

/// Waits for the pair at `p` to carry `tag` (a, b: its first load, updated).
__device__ __forceinline__ void spin_pair(const u64* p, u32 tag, u64& a, u64& b) {
  while (tag_of(a) != tag || tag_of(b) != tag) ld_tagged2(p, a, b);
}

/// Loads `N` tagged floats (N even, `src` 16-byte aligned) into shared `s` (and `copy`,
/// if set) once every one carries `tag`, then a block barrier. Each thread issues all
/// its pairs' loads (at most 4 rounds of THREADS pairs at once; fewer registers for
/// short vectors) before spinning on the ones not ready. `stamp` (PG_TRACE): the
/// event's wait start and end.
template <int THREADS, int N>
__device__ __forceinline__ void load_tagged(float* s, const u64* src, u32 tag, float* copy, u64* stamp) {
  constexpr int ROUNDS = (N / 2 + THREADS - 1) / THREADS;
  constexpr int BATCH = ROUNDS < 4 ? ROUNDS : 4;
  static_assert(N % 2 == 0, "tagged vectors are read in pairs");
  trace_wait_start(stamp);
#ifdef PG_CHAOS
  if (threadIdx.x == 0) chaos_delay(tag ^ (u32)(reinterpret_cast<u64>(src) >> 4));
  __syncthreads();
#endif
  for (int i0 = threadIdx.x * 2; i0 < N; i0 += THREADS * 2 * BATCH) {
    u64 w[BATCH][2];
#pragma unroll
    for (int k = 0; k < BATCH; ++k) {
      const int i = i0 + k * THREADS * 2;
      if (i < N) ld_tagged2(src + i, w[k][0], w[k][1]);
    }
#pragma unroll
    for (int k = 0; k < BATCH; ++k) {
      const int i = i0 + k * THREADS * 2;
      if (i >= N) continue;
      spin_pair(src + i, tag, w[k][0], w[k][1]);
      const float2 v = make_float2(value_of(w[k][0]), value_of(w[k][1]));
      *reinterpret_cast<float2*>(s + i) = v;
      if (copy) *reinterpret_cast<float2*>(copy + i) = v;
    }
  }
  __syncthreads();
  trace_wait_end(stamp);
}

/// Polls the tagged words [begin, end) (both even) into shared `s` on `n` threads, this
/// one being thread `t`, two pairs in flight per thread; no barrier (down_waves' loader
/// warps arrive on a named barrier after it).
__device__ __forceinline__ void load_tagged_part(float* s, const u64* src, u32 tag, int begin, int end, int t, int n) {
  for (int i = begin + 2 * t; i < end; i += 4 * n) {
    const int j = i + 2 * n;
    u64 a0, b0, a1 = 0, b1 = 0;
    ld_tagged2(src + i, a0, b0);
    if (j < end) ld_tagged2(src + j, a1, b1);
    spin_pair(src + i, tag, a0, b0);
    *reinterpret_cast<float2*>(s + i) = make_float2(value_of(a0), value_of(b0));
    if (j < end) {
      spin_pair(src + j, tag, a1, b1);
      *reinterpret_cast<float2*>(s + j) = make_float2(value_of(a1), value_of(b1));
    }
  }
}
