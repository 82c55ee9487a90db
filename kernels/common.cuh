//! Portability layer for every kernel: integer and bf16 types, warp size, shuffles,
//! warp/block reductions, 16-byte vector loads and timers. Inline PTX lives only here
//! and in sync.cuh, so a HIP port (wavefront 64) replaces these two files, not the ops.
#pragma once

typedef unsigned int u32;
typedef unsigned long long u64;
/// Raw bf16 bits; converted by hand so NVRTC needs no CUDA headers.
typedef unsigned short bf16_t;

#define WARP_SIZE 32
#define FULL_MASK 0xffffffffu
#define NEG_INF (-__int_as_float(0x7f800000))

/// Tensor-parallel ranks that share this launch (PG_VRANKS: ranks on one GPU run as one
/// kernel, rank r on the r-th contiguous range of blocks); 1 for a launch per rank.
#ifndef PG_VRANKS
#define PG_VRANKS 1
#endif
constexpr int VRANKS = PG_VRANKS;
/// One rank's grid, and this block's index in it and its rank: every schedule that
/// hands work to blocks names these, never gridDim.x / blockIdx.x.
__device__ __forceinline__ u32 rank_grid() { return VRANKS > 1 ? gridDim.x / VRANKS : gridDim.x; }
__device__ __forceinline__ u32 rank_block() { return VRANKS > 1 ? blockIdx.x % rank_grid() : blockIdx.x; }
__device__ __forceinline__ u32 launch_rank() { return VRANKS > 1 ? blockIdx.x / rank_grid() : 0; }

__device__ __forceinline__ u32 lane_id() { return threadIdx.x & (WARP_SIZE - 1); }
__device__ __forceinline__ u32 warp_id() { return threadIdx.x / WARP_SIZE; }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = WARP_SIZE / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(FULL_MASK, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = WARP_SIZE / 2; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, offset));
  return v;
}

__device__ __forceinline__ u64 warp_sum_u64(u64 v) {
#pragma unroll
  for (int offset = WARP_SIZE / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(FULL_MASK, v, offset);
  return v;
}

/// `v` of the lane whose id differs from this one's in the bits of `mask`.
__device__ __forceinline__ float lane_xor(float v, int mask) { return __shfl_xor_sync(FULL_MASK, v, mask); }

/// Sum over the `width` lanes of an aligned lane group (width a power of two ≤ 32).
template <int WIDTH>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int offset = WIDTH / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(FULL_MASK, v, offset);
  return v;
}

/// Block-wide sum; `red` is shared scratch of at least one float per warp. Every
/// thread gets the result; safe to call back to back.
template <int THREADS>
__device__ __forceinline__ float block_sum(float v, float* red) {
  constexpr int WARPS = THREADS / WARP_SIZE;
  v = warp_sum(v);
  __syncthreads();
  if (lane_id() == 0) red[warp_id()] = v;
  __syncthreads();
  float t = 0.f;
#pragma unroll
  for (int w = 0; w < WARPS; ++w) t += red[w];
  return t;
}

/// Block-wide u64 sum (exact, so order-independent); `red` holds one u64 per warp.
template <int THREADS>
__device__ __forceinline__ u64 block_sum_u64(u64 v, u64* red) {
  constexpr int WARPS = THREADS / WARP_SIZE;
  v = warp_sum_u64(v);
  __syncthreads();
  if (lane_id() == 0) red[warp_id()] = v;
  __syncthreads();
  u64 t = 0;
#pragma unroll
  for (int w = 0; w < WARPS; ++w) t += red[w];
  return t;
}

// ---- bf16 ----------------------------------------------------------------------

__device__ __forceinline__ float bf16_lo(u32 pair) { return __uint_as_float(pair << 16); }
__device__ __forceinline__ float bf16_hi(u32 pair) { return __uint_as_float(pair & 0xffff0000u); }
__device__ __forceinline__ float bf16_to_f32(bf16_t b) { return __uint_as_float(((u32)b) << 16); }

/// Round to nearest even, like the host's `half::bf16::from_f32`.
__device__ __forceinline__ bf16_t f32_to_bf16(float f) {
  u32 u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_t)0x7fc0;  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return (bf16_t)(u >> 16);
}

__device__ __forceinline__ float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

/// Dot product of 8 bf16 (one 16-byte word) with 8 floats.
__device__ __forceinline__ float dot8(uint4 w, float4 a, float4 b) {
  float s = bf16_lo(w.x) * a.x;
  s = fmaf(bf16_hi(w.x), a.y, s);
  s = fmaf(bf16_lo(w.y), a.z, s);
  s = fmaf(bf16_hi(w.y), a.w, s);
  s = fmaf(bf16_lo(w.z), b.x, s);
  s = fmaf(bf16_hi(w.z), b.y, s);
  s = fmaf(bf16_lo(w.w), b.z, s);
  s = fmaf(bf16_hi(w.w), b.w, s);
  return s;
}

// ---- loads ---------------------------------------------------------------------

#ifndef PG_WEIGHT_EVICT_FIRST
#define PG_WEIGHT_EVICT_FIRST 0
#endif
/// weights_evict_first (PG_WEIGHT_EVICT_FIRST): the L2 policy weight loads carry,
/// evict-first, so a token's weight stream (larger than L2, read once) does not push out
/// what is reused across phases and steps (KV cache, partials, norms). Not volatile: the
/// compiler may hoist it out of the loops.
__device__ __forceinline__ u64 weight_l2_policy() {
  u64 p;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}

/// 16 bytes of weights: read-only for the whole launch, streamed once per token, so
/// the non-coherent path without L1 allocation.
__device__ __forceinline__ uint4 ld_weight16(const void* p) {
  uint4 v;
  if (PG_WEIGHT_EVICT_FIRST)
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p), "l"(weight_l2_policy()));
  else
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  return v;
}

/// Starts an asynchronous 16-byte copy global → shared (L2 only, no registers held);
/// complete once this thread's cp_async_wait_all returns.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const u32 s = (u32)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}

/// cp_async16 for weights (the L2 policy of ld_weight16).
__device__ __forceinline__ void cp_async16_weight(void* smem, const void* gmem) {
  if (PG_WEIGHT_EVICT_FIRST) {
    const u32 s = (u32)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "l"(weight_l2_policy()) : "memory");
  } else {
    cp_async16(smem, gmem);
  }
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

/// Waits until at most N of this thread's most recent cp.async commit groups are pending.
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

/// Waits for every cp.async this thread issued.
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// Data written by other blocks of this launch: L1 is not coherent across SMs, so
// these read at L2 ("cache global"). Never use __ldg / const __restrict__ on them.
__device__ __forceinline__ float ld_shared_f32(const float* p) { return __ldcg(p); }
__device__ __forceinline__ float4 ld_shared_f32x4(const float* p) { return __ldcg(reinterpret_cast<const float4*>(p)); }
__device__ __forceinline__ uint4 ld_shared_16(const void* p) { return __ldcg(reinterpret_cast<const uint4*>(p)); }
__device__ __forceinline__ u32 ld_shared_u32(const u32* p) { return __ldcg(p); }
__device__ __forceinline__ unsigned char ld_shared_u8(const unsigned char* p) {
  return (unsigned char)__ldcg(reinterpret_cast<const char*>(p));
}

/// Nanoseconds on the GPU's global timer (coarse, but comparable across SMs).
__device__ __forceinline__ u64 global_timer_ns() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/// The SM's cycle counter: fine-grained but per SM (the phase trace maps it onto the
/// global timer per block, cuda/trace.rs).
__device__ __forceinline__ u64 clock_cycles() {
  u64 t;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(t));
  return t;
}

/// Order-preserving key of a float: larger value ⇒ larger key (NaN sorts first).
__device__ __forceinline__ u32 order_key(float f) {
  u32 u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
