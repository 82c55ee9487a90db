//! The LM-head phase: the final norm, the logits with bias and penalties, and each
//! block's statistics for the sampler.
#pragma once
#include "decode_state.cuh"

static_assert(!HEAD_LANE || (IS_DTP && LM_FMT == QF_BF16), "a `lane` LM head is a DTP run's bf16 [V, TP·D] matrix");

/// The final norm and LM head of step `s`; returns the host's stop flag (read early, block 0 of rank 0).
__device__ __forceinline__ u32 Decode::lm_head_phase() {
  // Read the host's stop flag early: the PCIe round trip overlaps the LM head.
  u32 host_stop = 0;
  if (!score && rank == 0 && blockIdx.x == 0 && threadIdx.x == 0) host_stop = ld_host_flag(ctl + PG_CTL_STOP);
  const auto final_nw = early_norm(final_norm);
  if (TAGGED) {
    load_tagged<THREADS, D>(vec, tagged + (size_t)(L - 1) * T_LAYER + T_XD, tag, nullptr, trace_event(tr, EV_LM));
  } else {
    block_wait(layer_ctr(ctr, L - 1, PH_DOWN), done, trace_event(tr, EV_LM));
    load_after(s, L - 1, 1, x, nullptr, nullptr, 1);
  }
  if (IS_DTP && SUM_BEFORE_NORM) dtp_mean_h(vec, peer_xc, my_xc, my_xch, rank, w_d, lm_runs, 1.0f);
  norm_vec(vec, final_nw, final_norm, red);
  if (IS_DTP && HEAD_LANE) dtp_concat_h(vec, peer_xc, my_xc, my_xch, rank, w_d, lm_runs);
  else if (IS_DTP && !SUM_BEFORE_NORM && !HEAD_OWN_H) dtp_mean_h(vec, peer_xc, my_xc, my_xch, rank, w_d, lm_runs);
  {
    LmStats st = lm_stats_empty();
    float* dbg_row = dbg ? dbg + (size_t)lm_runs * V : nullptr;
    const bool penalise_on = penalty != 1.0f;
    const u32 row0 = (u32)rank * V;  // this rank's first vocabulary row
    auto lm_epi = [&](int r, float v) {
      const u32 gr = row0 + (u32)r;
      float a = logit_bias ? v + __ldg(logit_bias + gr) : v;
      if (penalise_on) a = penalise(a, ld_shared_u8(seen + gr) != 0, penalty);
      if (count_on) a = openai_penalise(a, ld_shared_u32(counts + gr), presence, frequency);
      logits[gr] = v;
      adj[gr] = a;
      if (gather) {
        for (int p = 0; p < TP; ++p) {
          if (p == rank) continue;
          peer_logits[p][gr] = v;
          peer_adj[p][gr] = a;
        }
      }
      if (dbg_row) dbg_row[r] = v;
      lm_stats_push(st, gr, v, a);
    };
    // Q8_0: groups of two rows streamed through a ring in the free stage region (qmatvec.cuh q_ring_rows).
    if constexpr (LM_FMT == QF_Q8_0)
      qmat_grid_rows<D, 2, WARPS>(qmat1(lm_head, LM_FMT, V), V, vec, xq_smem(), lm_epi, gridDim.x, QSet{}, false, set_all());
    else if constexpr (LM_FMT != QF_BF16) qmat_grid_rows<D, LM_NR, WARPS>(qmat1(lm_head, LM_FMT, V), V, vec, xq_smem(), lm_epi);
    else grid_rows<LM_K, LM_NR, WARPS>(lm_head, V, vec, lm_epi);
    // Lane 0 of each warp holds its warp's statistics; merge them in warp order.
    LmStats* wst = reinterpret_cast<LmStats*>(red);
    if (lane_id() == 0) wst[warp_id()] = st;
    __syncthreads();
    if (threadIdx.x == 0) {
      LmStats b = wst[0];
      for (int w = 1; w < WARPS; ++w) b = lm_stats_merge(b, wst[w]);
      reinterpret_cast<float4*>(partials)[blockIdx.x] = lm_stats_pack(b);
    }
  }
  block_arrive(step_ctr(ctr, CTR_LM), trace_event(tr, EV_LM));
  if (gather) arrive_peers(XC_GATHER);
  ++lm_runs;
  return host_stop;
}
