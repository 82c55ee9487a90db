//! Dependency counters between the blocks of the persistent kernel (no grid-wide
//! barrier): producers publish with a GPU-scope release after the block's writes,
//! consumers spin with a GPU-scope acquire on monotonically increasing counters whose
//! target is (runs so far) × producers, so nothing is ever reset inside a launch.
//! Host-mapped flags and the token ring use system-scope ordering.
#pragma once
#include "common.cuh"

__device__ __forceinline__ u32 ld_acquire_gpu(const u32* p) {
  u32 v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void red_release_gpu(u32* p, u32 v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

/// A value in host-mapped memory the host may change at any time.
__device__ __forceinline__ u32 ld_host_flag(const u32* p) {
  u32 v;
  asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void st_host(u32* p, u32 v) {
  asm volatile("st.volatile.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

/// Every earlier write of this thread (and, through the block barrier before it, of
/// its block) becomes visible to the host before any later write.
__device__ __forceinline__ void fence_system() { __threadfence_system(); }

#ifdef PG_CHAOS
/// Race hunting: a pseudo-random delay keyed by block and counter target.
__device__ __forceinline__ void chaos_delay(u32 salt) {
  u32 h = (blockIdx.x + 1) * 0x9E3779B1u ^ salt * 0x85EBCA6Bu;
  h ^= h >> 15;
  h *= 0x2C1B3C6Du;
  h ^= h >> 12;
  if ((h & 7u) == 0) __nanosleep(h >> 20);
}
#else
__device__ __forceinline__ void chaos_delay(u32) {}
#endif

/// Named barrier `id` (1..15; 0 is __syncthreads) of `n` threads, whole warps: the
/// caller waits for the others (bar.sync) or only counts itself in (bar.arrive, a
/// producer). Shared-memory writes before the arrival are visible after the sync.
__device__ __forceinline__ void named_bar_sync(int id, int n) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void named_bar_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory"); }

/// Phase trace (PG_TRACE, off by default): the global timer and this SM's cycle
/// counter at one moment, into st[0] and st[1] (thread 0 only; ops/trace.cuh says
/// where). With PG_TRACE=0 every call below compiles away.
__device__ __forceinline__ void trace_stamp(u64* st) {
  st[0] = global_timer_ns();
  st[1] = clock_cycles();
}

/// This block's results are complete: one arrival on `ctr`. The block barrier
/// orders every thread's writes before thread 0's release (CUTLASS's barrier does
/// the same): release/acquire only, no full fence on either side.
/// `stamp` (PG_TRACE): the event's record; its arrive stamp is taken before the release.
__device__ __forceinline__ void block_arrive(u32* ctr, u64* stamp = nullptr) {
  __syncthreads();
  if (threadIdx.x == 0) {
    chaos_delay(reinterpret_cast<u64>(ctr) >> 2);
    if (PG_TRACE && stamp) trace_stamp(stamp + PG_TRACE_ARRIVE);
    red_release_gpu(ctr, 1);
  }
}

/// Waits until `ctr` reaches `target`; afterwards every thread of the block may read
/// what the producers wrote before arriving. `stamp` (PG_TRACE): the event's record;
/// wait start before the spin (after the chaos delay), wait end when the spin ends.
__device__ __forceinline__ void block_wait(const u32* ctr, u32 target, u64* stamp = nullptr) {
  if (threadIdx.x == 0) {
    chaos_delay(target);
    if (PG_TRACE && stamp) trace_stamp(stamp);
    while (ld_acquire_gpu(ctr) < target) {
    }
    if (PG_TRACE && stamp) trace_stamp(stamp + PG_TRACE_WAIT_END);
  }
  __syncthreads();
}

// ---- across GPUs (tensor parallelism) -------------------------------------------
// Peer GPUs' memory is reached through NVLink with plain stores; a counter in the
// receiver's memory, bumped with a system-scope release after the block barrier,
// publishes them, and the receiver spins with a system-scope acquire (the same
// cumulativity argument as block_arrive, at system scope).

__device__ __forceinline__ u32 ld_acquire_sys(const u32* p) {
  u32 v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void red_release_sys(u32* p, u32 v) {
  asm volatile("red.release.sys.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

/// Thread 0, after a block barrier that follows the block's writes (local and to
/// peers): one arrival on a counter in a peer GPU's memory.
__device__ __forceinline__ void peer_arrive(u32* ctr) {
  chaos_delay(reinterpret_cast<u64>(ctr) >> 2);
  // Ranks of one launch (VRANKS) are blocks of one GPU: device scope suffices.
  if (VRANKS > 1) red_release_gpu(ctr, 1);
  else red_release_sys(ctr, 1);
}

/// Thread 0: spins until `ctr` (written by peer GPUs) reaches `target`.
__device__ __forceinline__ void wait_peers(const u32* ctr, u32 target) {
  chaos_delay(target ^ 0x5bd1e995u);
  if (VRANKS > 1) {
    while (ld_acquire_gpu(ctr) < target) {
    }
  } else {
    while (ld_acquire_sys(ctr) < target) {
    }
  }
}

/// Lamport-style exchange: a value a peer GPU writes into this GPU's memory with plain
/// stores, over a slot pre-filled with a sentinel no arithmetic produces (PG_PEER_SENTINEL,
/// 0xffffffff: a NaN whose sign and payload real NaNs never take). Volatile 16-byte loads: each
/// 4-byte component is either the sentinel or the peer's value.
constexpr u32 PEER_SENTINEL = PG_PEER_SENTINEL;

__device__ __forceinline__ float4 ld_volatile_f32x4(const float* p) {
  float4 v;
  asm volatile("ld.volatile.global.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p) : "memory");
  return v;
}

/// Spins until all four floats at `p` (written by a peer) have left the sentinel.
__device__ __forceinline__ float4 ld_peer_ready(const float* p) {
  float4 v = ld_volatile_f32x4(p);
  while (__float_as_uint(v.x) == PEER_SENTINEL || __float_as_uint(v.y) == PEER_SENTINEL || __float_as_uint(v.z) == PEER_SENTINEL ||
         __float_as_uint(v.w) == PEER_SENTINEL) {
    v = ld_volatile_f32x4(p);
  }
  return v;
}

/// A self-resetting ticket for `n` participants: returns true to exactly the last
/// of every n calls (the counter wraps to 0), with acquire-release ordering so the
/// last one sees what the others wrote before calling. Thread 0 only; callers
/// synchronise the block before and broadcast the answer.
__device__ __forceinline__ bool ticket_is_last(u32* ticket, u32 n) {
  u32 old;
  asm volatile("atom.acq_rel.gpu.global.inc.u32 %0, [%1], %2;" : "=r"(old) : "l"(ticket), "r"(n - 1) : "memory");
  return old == n - 1;
}

// ---- tagged values within one GPU (decode.cu TAGGED) ----------------------------------
// A float published with the step that wrote it in one 64-bit word (value bits low,
// tag high). The consumer polls the data itself until every word it needs carries
// this step's tag: no counter and no release fence sits between producer and
// consumer. Naturally aligned 64-bit strong (relaxed) accesses are single-copy
// atomic, so a reader sees one store's tag and value, never a mix.

__device__ __forceinline__ void st_tagged(u64* p, float v, u32 tag) {
  const u64 w = ((u64)tag << 32) | __float_as_uint(v);
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(w) : "memory");
}

/// Two tagged words at a 16-byte aligned `p` (each word atomic on its own).
__device__ __forceinline__ void ld_tagged2(const u64* p, u64& a, u64& b) {
  asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}

__device__ __forceinline__ u64 ld_tagged1(const u64* p) {
  u64 w;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(w) : "l"(p) : "memory");
  return w;
}

__device__ __forceinline__ u32 tag_of(u64 w) { return (u32)(w >> 32); }
__device__ __forceinline__ float value_of(u64 w) { return __uint_as_float((u32)w); }

/// Spins until the words at `pa` and `pb` carry `tag` (both loads in flight at once); their values.
__device__ __forceinline__ void wait_tagged2(const u64* pa, const u64* pb, u32 tag, float& a, float& b) {
  u64 wa = ld_tagged1(pa), wb = ld_tagged1(pb);
  while (tag_of(wa) != tag) wa = ld_tagged1(pa);
  while (tag_of(wb) != tag) wb = ld_tagged1(pb);
  a = value_of(wa);
  b = value_of(wb);
}

/// Spins until the word at `p` carries `tag`; its value.
__device__ __forceinline__ float wait_tagged(const u64* p, u32 tag) {
  u64 w = ld_tagged1(p);
  while (tag_of(w) != tag) w = ld_tagged1(p);
  return value_of(w);
}
