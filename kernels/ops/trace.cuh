//! Phase trace (PG_TRACE, off by default): for one chosen step, every block records
//! the global timer and its SM's cycle counter at each dependency wait's start and end
//! and at each arrival, into a device buffer the host reads back and analyses
//! (backend/engine/src/cuda/trace.rs: per phase kind, how long blocks waited, the
//! latency from the last producer's arrival to the first consumer's wake, and the
//! slowest block's work). The stamps themselves are taken in sync.cuh's block_wait /
//! block_arrive; this file only says where each block's record lies.
#pragma once
#include "common.cuh"
#include "sync.cuh"

/// u64 words per event: (global ns, SM cycles) at wait start, wait end, arrive (the
/// host reads the record back: cuda/trace.rs defines the layout).
constexpr int TRACE_WORDS = PG_TRACE_WORDS;
constexpr int TRACE_WAIT_END = PG_TRACE_WAIT_END;
/// Offset of the arrive stamp inside an event (sync.cuh's block_arrive writes there too).
constexpr int TRACE_ARRIVE = PG_TRACE_ARRIVE;

/// This block's record (`events` events) when tracing is compiled in, the buffer is
/// set and `on` (the traced step); else null, which every stamp site skips.
__device__ __forceinline__ u64* trace_record(u64* buf, int events, bool on) {
  return PG_TRACE && buf && on ? buf + (size_t)rank_block() * events * TRACE_WORDS : nullptr;
}

/// Event `e` of a record, or null.
__device__ __forceinline__ u64* trace_event(u64* rec, int e) { return PG_TRACE && rec ? rec + e * TRACE_WORDS : nullptr; }

/// Thread 0 stamps an event's wait start / wait end / arrival (null: nothing). The
/// callers of the arrival stamp synchronise the block first.
__device__ __forceinline__ void trace_wait_start(u64* ev) {
  if (PG_TRACE && ev && threadIdx.x == 0) trace_stamp(ev);
}
__device__ __forceinline__ void trace_wait_end(u64* ev) {
  if (PG_TRACE && ev && threadIdx.x == 0) trace_stamp(ev + TRACE_WAIT_END);
}
__device__ __forceinline__ void trace_arrive(u64* ev) {
  if (PG_TRACE && ev && threadIdx.x == 0) trace_stamp(ev + TRACE_ARRIVE);
}
