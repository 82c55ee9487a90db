//! What the bulk-copy micro-benchmarks share (tma_micro, pace_micro, layer_sim): TMA bulk
//! copies from global into shared memory and the mbarriers that count their bytes.
#pragma once
#include "common.cuh"

__device__ __forceinline__ u32 saddr(const void* p) { return (u32)__cvta_generic_to_shared(p); }
/// A barrier whose phase completes after `count` arrivals (and the bytes they expect).
__device__ __forceinline__ void mbar_init(unsigned long long* bar, u32 count = 1) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(saddr(bar)), "r"(count));
}
/// One arrival that also expects `bytes` of copies to land on the barrier.
__device__ __forceinline__ void mbar_expect(unsigned long long* bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(saddr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned long long* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(saddr(bar)) : "memory");
}
/// `bytes` (a multiple of 16, 16-byte aligned) from global `src` into shared `dst`,
/// completing on `bar`.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, u32 bytes, unsigned long long* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(saddr(dst)), "l"(src),
               "r"(bytes), "r"(saddr(bar))
               : "memory");
}
/// Waits until the barrier's phase of parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, u32 parity) {
  asm volatile(
      "{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W;\n}" ::"r"(saddr(bar)),
      "r"(parity)
      : "memory");
}
