//! The sampler phase (block 0): merges the blocks' statistics, picks the token, and
//! hands it to the next step and to the host ring.
#pragma once
#include "decode_state.cuh"

/// Block 0 after every block's LM head: the token of step `s`, or the end of the run.
__device__ __forceinline__ void Decode::sampler_phase(u32 host_stop) {
  block_wait(step_ctr(ctr, CTR_LM), lm_runs * G, trace_event(tr, EV_SAMPLER));
  SelectSmem* sel = reinterpret_cast<SelectSmem*>(sm);
  u32* top_ids = reinterpret_cast<u32*>(sm + (sizeof(SelectSmem) / sizeof(float)));
  float* top_vals = reinterpret_cast<float*>(top_ids + PG_MAX_TOP);
  u32* top_count = reinterpret_cast<u32*>(top_vals + PG_MAX_TOP);
  LmStats* total = reinterpret_cast<LmStats*>(red);
  if (warp_id() == 0) {
    // Every lane's first SAMPLER_LOADS partials are loaded before any is merged (one
    // L2 round trip, not one per partial); the merge order is the loop's, so the same bits.
    constexpr int SAMPLER_LOADS = 8;
    float4 pre[SAMPLER_LOADS];
#pragma unroll
    for (int k = 0; k < SAMPLER_LOADS; ++k) {
      const u32 b = lane_id() + k * WARP_SIZE;
      pre[k] = b < G ? ld_shared_f32x4(partials + 4 * b) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    LmStats st = lm_stats_empty();
#pragma unroll
    for (int k = 0; k < SAMPLER_LOADS; ++k)
      if (lane_id() + k * WARP_SIZE < G) st = lm_stats_merge(st, lm_stats_unpack(pre[k]));
    for (u32 b = lane_id() + SAMPLER_LOADS * WARP_SIZE; b < G; b += WARP_SIZE)
      st = lm_stats_merge(st, lm_stats_unpack(ld_shared_f32x4(partials + 4 * b)));
    st = lm_stats_warp_merge(st);
    if (lane_id() == 0) *total = st;
  }
  __syncthreads();
  // TP: every rank's sampler sends its statistics (and rank 0 the host's stop flag)
  // to every rank and merges all of them in rank order, so every rank picks the same
  // token; the raw logit at the winning index comes with the winner's message.
  float* win_raw = red + 4;
  u32* any_stop = reinterpret_cast<u32*>(red + 5);
  if (IS_TP && threadIdx.x == 0) tp_merge_sampler(total, win_raw, any_stop, peer_xc, my_xc, my_xch, rank, logits, host_stop, lm_runs, gather);
  __syncthreads();
  const LmStats tot = *total;
  if (IS_TP && threadIdx.x == 0) host_stop = *any_stop;
  const float log_z = tot.raw_max + logf(tot.raw_sum);
  const u32 t = s + 1 - n_prompt;  // index of the token being generated
  u32 id = tot.adj_idx;
  if (sp.temperature != 0.f) id = sample_draw<THREADS>(adj, VF, tot.adj_max, sp, t, sel);
  u32 n_top = 0;
  if (top_logprobs > 0) {
    top_logits<THREADS>(logits, VF, min((u32)top_logprobs, (u32)PG_MAX_TOP), sel, top_ids, top_vals, top_count);
    n_top = *top_count;
  }
  if (threadIdx.x == 0) {
    for (u32 k = 0; k < n_top; ++k) top_vals[k] -= log_z;
    bool is_stop = false;
    for (u32 k = 0; k < n_stop; ++k) is_stop |= __ldg(stop_ids + k) == id;
    // Without the gather, a TP rank holds only its own rows of `logits`.
    const float raw = is_stop ? 0.f : IS_TP && !gather ? *win_raw : ld_shared_f32(logits + id);
    const u32 reason = is_stop ? PG_END_STOP_TOKEN : host_stop ? PG_END_STOPPED : t + 1 >= max_tokens ? PG_END_LENGTH : 0;
    if (!reason) {
      tokens[s + 1] = id;
      seen[id] = 1;
      if (count_on) counts[id] += 1;
    }
    if (reason) *step_ctr(ctr, CTR_HALT) = 1;
    __threadfence();
    if (u64* ev = trace_event(tr, EV_SAMPLER)) trace_stamp(ev + TRACE_ARRIVE);
    red_release_gpu(step_ctr(ctr, CTR_TOKEN), 1);
    // The next step starts before the host hears of this token: the record's PCIe
    // writes and system fence are off the token loop's critical path. (This block's
    // smem and the logits stay untouched until thread 0 is back: the next step needs
    // this block's work before any LM head.)
    if (rank == 0) {
      if (!is_stop) emit_token(ring, ctl, t, id, raw - log_z, n_top, top_ids, top_vals, consumed_seen);
      if (reason) emit_end(ctl, reason);
    }
  }
  __syncthreads();
}
