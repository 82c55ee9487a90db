//! Matrix-vector products on the tensor cores for the layer simulator's ring+mma mode:
//! W (bf16) · x with mma.sync m16n8k16, W as the B operand (8 rows per tile) and x as
//! the A operand split into a bf16 high part (row 0) and the bf16 rounding of its
//! remainder (row 1), so the products keep ~16 bits of x and the sums are f32 (the
//! register path's precision); the other 14 rows of A are zero. A weight tile is 8
//! rows × 16 columns = 256 bytes, stored in fragment order (lane L's 8 bytes are the
//! pairs (W[L/4][2(L%4)], +1) and (W[L/4][2(L%4)+8], +1)), so a lane reads its half of
//! two consecutive tiles with one 16-byte shared-memory load and no bank conflicts.
//! The engine would permute each matrix into that order once at load time.
#pragma once
#include "common.cuh"

__device__ __forceinline__ void mma_rows_bf16(float (&c)[4], u32 a0, u32 a2, u32 b0, u32 b1) {
  // a1, a3 (A rows 8..15) are zero: only x's two rows are real. (Not volatile: a pure
  // register operation the compiler may schedule around the loads.)
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1));
}

/// Two floats as a bf16 pair (round to nearest even; `first` in the low half).
__device__ __forceinline__ u32 bf16_pair(float first, float second) {
  return (u32)f32_to_bf16(first) | ((u32)f32_to_bf16(second) << 16);
}

/// x's A fragment for lane `l` < 8 of column tile kt (16 columns from `x`): lanes 0–3 the
/// high parts, lanes 4–7 the remainders, of columns (2t, 2t+1) and (2t+8, 2t+9), t = l % 4.
__device__ __forceinline__ uint2 x_fragment(const float* x, int kt, int l) {
  const int t = l & 3, c = kt * 16 + 2 * t;
  float v[4] = {x[c], x[c + 1], x[c + 8], x[c + 9]};
  if (l >= 4)
#pragma unroll
    for (float& e : v) e -= round_bf16(e);
  return make_uint2(bf16_pair(v[0], v[1]), bf16_pair(v[2], v[3]));
}

/// One unit (8 rows × 16·TILES columns, fragment order, in shared memory at `w`) times
/// x's fragments `xf` ([column tile][8 lanes], the unit's first tile at xf[0]): returns,
/// in lanes 0–3, rows 2t and 2t+1 of the unit's partial sums (t = lane), in r0 and r1.
/// Four independent accumulators keep four mma in flight.
template <int TILES>
__device__ __forceinline__ void mma_unit(const uint4* w, const uint2* xf, float& r0, float& r1) {
  static_assert(TILES % 8 == 0, "units are whole groups of 8 tiles (4 accumulators × 2 tiles per load)");
  const int lane = lane_id();
  float acc[4][4] = {};
#pragma unroll 4
  for (int p = 0; p < TILES / 2; ++p) {
    const uint4 b = w[p * 32 + lane];  // tiles 2p and 2p + 1
    // Every lane loads (lanes 8–31 a copy of lanes 0–7's words) and keeps zero: no branch,
    // so the loads of later iterations can be issued early.
    const uint2 f0 = xf[(2 * p) * 8 + (lane & 7)], f1 = xf[(2 * p + 1) * 8 + (lane & 7)];
    const bool real = lane < 8;
    const uint2 x0 = make_uint2(real ? f0.x : 0u, real ? f0.y : 0u), x1 = make_uint2(real ? f1.x : 0u, real ? f1.y : 0u);
    mma_rows_bf16(acc[(2 * p) & 3], x0.x, x0.y, b.x, b.y);
    mma_rows_bf16(acc[(2 * p + 1) & 3], x1.x, x1.y, b.z, b.w);
  }
  float d0 = acc[0][0] + acc[1][0] + acc[2][0] + acc[3][0];
  float d1 = acc[0][1] + acc[1][1] + acc[2][1] + acc[3][1];
  // Lanes 4–7 hold the remainder row's products: fold them into lanes 0–3.
  d0 += __shfl_xor_sync(0xffffffffu, d0, 4);
  d1 += __shfl_xor_sync(0xffffffffu, d1, 4);
  r0 = d0, r1 = d1;
}
