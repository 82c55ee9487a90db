//! Tensor parallelism's receive slots between steps: refilled with the sentinel the
//! peers' values are told apart by (sync.cuh), once every sent value has landed.
#pragma once
#include "schedule.cuh"
#include "sync.cuh"
#include "ops/allreduce.cuh"

/// Every block of this rank is done with the previous step's receive slots `rx`: refill
/// the peers' slots, which peers write again next step. A slot a peer sent into but
/// nobody read (the last layer's down partials after a prompt step without LM head) may
/// still be in flight: wait for every sent slot to land before refilling it, or the late
/// store would survive the refill and be read as next-but-one step's value. The first
/// `writers` blocks share the work.
__device__ __forceinline__ void refill_receive_slots(float* rx, int rank, int writers) {
  constexpr int CHUNKS = D / 4;
  const float sentinel = __uint_as_float(PEER_SENTINEL);
  for (int c = blockIdx.x * THREADS + threadIdx.x; c < 2 * L * TP * CHUNKS; c += writers * THREADS) {
    const int group = c / (TP * CHUNKS), slot = (c / CHUNKS) % TP, lyr = group / 2;
    if (slot == rank) continue;
    if (x_mode[lyr] == XM_ALL || (x_mode[lyr] == XM_DELAYED && x_send[lyr] != 0)) (void)ld_peer_ready(rx + (size_t)c * 4);
    *reinterpret_cast<float4*>(rx + (size_t)c * 4) = make_float4(sentinel, sentinel, sentinel, sentinel);
  }
  __threadfence_system();
}
