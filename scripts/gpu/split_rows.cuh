//! Balanced streaming of a matrix phase whose row groups do not spread evenly over the
//! grid's warps (tensor parallelism's gate/up: ~2.1 groups per warp, so the last round
//! runs on a tenth of the warps; its down-projection: fewer groups than warps). Each
//! block takes a contiguous range of rows (an equal share, in units of ALIGN rows), cut
//! into S equal K-segments per row ("units"); its warps take equal contiguous runs of
//! units and stream them B 16-byte loads per lane at a time. A warp's partial sum of a
//! row goes to shared memory at the index of its first unit in that row (zeros at the
//! row's other units it covers), and the block adds a row's S entries in order: the sum
//! depends only on the grid size, never on timing.
#pragma once
#include "common.cuh"

/// Rows [r0, r1) of block `b` of `grid`: an equal share of the rows in units of ALIGN rows
/// (ALIGN divides `rows`; gate/up keeps its (gate, up) pairs together with ALIGN 2).
template <int ALIGN>
__device__ __forceinline__ void split_row_range(int rows, int b, int grid, int& r0, int& r1) {
  const int n = rows / ALIGN;
  r0 = (int)((long long)b * n / grid) * ALIGN;
  r1 = (int)((long long)(b + 1) * n / grid) * ALIGN;
}

/// Words (16 bytes), loads per lane and units of a K-wide row cut into S segments.
template <int K, int S>
struct SplitShape {
  static_assert(K % (8 * S) == 0, "segments are whole 16-byte words");
  static constexpr int SW = K / 8 / S;                           // words per unit
  static constexpr int IPU = (SW + WARP_SIZE - 1) / WARP_SIZE;  // loads per lane per unit
};

/// This warp's share of rows [r0, r1) of W · xs: part[(row - r0) · S + seg] for the units
/// it covers (see the file comment). Call from every warp of the block, then barrier, then
/// split_row_sum.
template <int K, int S, int B, int WARPS>
__device__ __forceinline__ void split_rows_partials(const bf16_t* __restrict__ W, int r0, int r1, const float* xs, float* part) {
  using Sh = SplitShape<K, S>;
  constexpr int SW = Sh::SW, IPU = Sh::IPU;
  const int units = (r1 - r0) * S;
  const int u0 = warp_id() * units / WARPS, u1 = (warp_id() + 1) * units / WARPS;
  if (u0 >= u1) return;
  const int i1 = u1 * IPU;
  const int lane = lane_id();
  const bf16_t* base = W + (size_t)r0 * K;  // the block's rows are one contiguous range
  float acc = 0.f;
  int piece = u0;  // first unit of the row piece being summed
  for (int i = u0 * IPU; i < i1; i += B) {
    uint4 w[B];
#pragma unroll
    for (int b = 0; b < B; ++b) {
      const int it = i + b, u = it / IPU, c = (it % IPU) * WARP_SIZE + lane;
      w[b] = it < i1 && (SW % WARP_SIZE == 0 || c < SW) ? ld_weight16(base + ((size_t)u * SW + c) * 8) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int b = 0; b < B; ++b) {
      const int it = i + b;
      if (it >= i1) break;  // warp-uniform
      const int u = it / IPU, c = (it % IPU) * WARP_SIZE + lane;
      if (u / S != piece / S) {  // a new row: the finished piece's sum out
        const float v = warp_sum(acc);
        if (lane == 0) part[piece] = v;
        acc = 0.f;
        piece = u;
      } else if (lane == 0 && it % IPU == 0 && u != piece) {
        part[u] = 0.f;  // a later unit of the piece: its sum is at `piece`
      }
      if (SW % WARP_SIZE == 0 || c < SW) {
        const float* x = xs + ((u % S) * SW + c) * 8;
        acc += dot8(w[b], *reinterpret_cast<const float4*>(x), *reinterpret_cast<const float4*>(x + 4));
      }
    }
  }
  const float v = warp_sum(acc);
  if (lane == 0) part[piece] = v;
}

/// Row `local` (row - r0) of the block's range after split_rows_partials and a barrier.
template <int S>
__device__ __forceinline__ float split_row_sum(const float* part, int local) {
  float v = 0.f;
#pragma unroll
  for (int k = 0; k < S; ++k) v += part[local * S + k];
  return v;
}
