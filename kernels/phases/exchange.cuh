//! Tensor parallelism's exchanges outside the matrix phases: the receive slots between
//! steps, refilled with the sentinel the peers' values are told apart by (sync.cuh),
//! once every sent value has landed; DTP's mean (or concatenation) of the lanes' final
//! hidden states; and
//! the samplers' exchange of their statistics.
#pragma once
#include "schedule.cuh"
#include "sync.cuh"
#include "ops/allreduce.cuh"
#include "ops/lm_head.cuh"

/// Every block of this rank is done with the previous step's receive slots `rx`: refill
/// the peers' slots, which peers write again next step. A slot a peer sent into but
/// nobody read (the last layer's down partials after a prompt step without LM head) may
/// still be in flight: wait for every sent slot to land before refilling it, or the late
/// store would survive the refill and be read as next-but-one step's value. The first
/// `writers` blocks share the work.
__device__ __forceinline__ void refill_receive_slots(float* rx, int rank, int writers) {
  constexpr int CHUNKS = D / 4;
  const float sentinel = __uint_as_float(PEER_SENTINEL);
  for (int c = rank_block() * THREADS + threadIdx.x; c < 2 * L * TP * CHUNKS; c += writers * THREADS) {
    const int group = c / (TP * CHUNKS), slot = (c / CHUNKS) % TP, lyr = group / 2;
    if (slot == rank) continue;
    if (x_mode[lyr] == XM_ALL || x_send[lyr] != 0) (void)ld_peer_ready(rx + (size_t)c * 4);
    *reinterpret_cast<float4*>(rx + (size_t)c * 4) = make_float4(sentinel, sentinel, sentinel, sentinel);
  }
  __threadfence_system();
}

/// DTP: sends this lane's final h (`vec`, the same bits in every block) to every other
/// lane and waits for theirs. The first `writers` blocks push their share into the other
/// lanes' exchange regions (`peer_xc`) and arrive on each lane's XC_HMEAN counter; then
/// every block may read the lanes' h in `my_xch` (this lane's exchange region as floats;
/// `my_xc` as counters). `runs`: LM-head runs before this one (the counter's target
/// grows by one round per run).
__device__ __forceinline__ void dtp_swap_h(const float* vec, u32* const (&peer_xc)[TP], const u32* my_xc, int rank, int writers, u32 runs) {
  if ((int)rank_block() < writers) {
    for (int i = threadIdx.x * 4; i < D; i += THREADS * 4) {
      if ((i / 4) % writers != (int)rank_block()) continue;
      const float4 h = *reinterpret_cast<const float4*>(vec + i);
#pragma unroll
      for (int r = 0; r < TP; ++r)
        if (r != rank) *reinterpret_cast<float4*>(reinterpret_cast<float*>(peer_xc[r]) + X_HMEAN + rank * D + i) = h;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
#pragma unroll
      for (int r = 0; r < TP; ++r)
        if (r != rank) peer_arrive(peer_xc[r] + XC_HMEAN);
    }
  }
  if (threadIdx.x == 0) wait_peers(my_xc + XC_HMEAN, (runs + 1) * writers * (TP - 1));
  __syncthreads();
}

/// DTP: the LM head reads the mean of every lane's h (`scale` 1/TP; 1: their sum, for
/// the residuals a `pre_norm_lane_agg` head normalises after summing), summed in lane
/// order into `vec`.
__device__ __forceinline__ void dtp_mean_h(float* vec, u32* const (&peer_xc)[TP], const u32* my_xc, const float* my_xch, int rank, int writers,
                                           u32 runs, float scale = 1.0f / TP) {
  dtp_swap_h(vec, peer_xc, my_xc, rank, writers, runs);
  for (int i = threadIdx.x; i < D; i += THREADS) {
    float h = 0.f;
    for (int r = 0; r < TP; ++r) h += r == rank ? vec[i] : ld_shared_f32(my_xch + X_HMEAN + r * D + i);
    vec[i] = h * scale;
  }
  __syncthreads();
}

/// DTP, a `lane` LM head: `vec` (LM_K = TP·D floats) becomes every lane's h side by side
/// in lane order, the input of this lane's vocabulary rows of the [V, TP·D] head. Each
/// thread moves its own index of every lane, so lane 0's h overwrites this lane's only
/// after it was copied out.
__device__ __forceinline__ void dtp_concat_h(float* vec, u32* const (&peer_xc)[TP], const u32* my_xc, const float* my_xch, int rank, int writers,
                                             u32 runs) {
  dtp_swap_h(vec, peer_xc, my_xc, rank, writers, runs);
  for (int i = threadIdx.x; i < D; i += THREADS) {
    const float own = vec[i];
    for (int r = 0; r < TP; ++r) vec[r * D + i] = r == rank ? own : ld_shared_f32(my_xch + X_HMEAN + r * D + i);
  }
  __syncthreads();
}

/// TP, each rank's sampler thread: sends this rank's statistics `*total` (and rank 0 the
/// host's stop flag) to every rank and merges all of them in rank order, so every rank
/// picks the same token; the raw logit at the winning index comes with the winner's
/// message (`my_xc`, `my_xch`: this rank's exchange region as counters and floats). Leaves the merge in `*total`, that raw logit in `*win_raw` and the stop flag
/// in `*any_stop`. `runs`: LM-head runs finished before this one; `gather`: every
/// rank's logits are gathered (wait for them too).
__device__ __forceinline__ void tp_merge_sampler(LmStats* total, float* win_raw, u32* any_stop, u32* const (&peer_xc)[TP], const u32* my_xc,
                                                 const float* my_xch, int rank, const float* logits, u32 host_stop, u32 runs, bool gather) {
  const LmStats mine = *total;
  const float raw_mine = mine.adj_idx < (u32)VF ? ld_shared_f32(logits + mine.adj_idx) : NEG_INF;
#pragma unroll
  for (int r = 0; r < TP; ++r) {
    float4* dst = reinterpret_cast<float4*>(reinterpret_cast<float*>(peer_xc[r]) + X_LMX + rank * LMX_FLOATS);
    dst[0] = lm_stats_pack(mine);
    dst[1] = make_float4(raw_mine, __uint_as_float(host_stop), 0.f, 0.f);
  }
#pragma unroll
  for (int r = 0; r < TP; ++r)
    if (r != rank) peer_arrive(peer_xc[r] + XC_LMX);
  wait_peers(my_xc + XC_LMX, runs * (TP - 1));
  if (gather) wait_peers(my_xc + XC_GATHER, runs * rank_grid() * (TP - 1));
  LmStats m = lm_stats_empty();
  float raw = NEG_INF;
  u32 stop = 0;
  for (int r = 0; r < TP; ++r) {
    const LmStats o = lm_stats_unpack(ld_shared_f32x4(my_xch + X_LMX + r * LMX_FLOATS));
    const float4 extra = ld_shared_f32x4(my_xch + X_LMX + r * LMX_FLOATS + 4);
    if (o.adj_max > m.adj_max || (o.adj_max == m.adj_max && o.adj_idx < m.adj_idx)) raw = extra.x;
    m = lm_stats_merge(m, o);
    stop |= __float_as_uint(extra.y);
  }
  *total = m;
  *win_raw = raw;
  *any_stop = stop;
}
