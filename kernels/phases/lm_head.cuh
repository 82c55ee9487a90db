//! The LM-head phase: the final norm, the logits with bias and penalties, and each
//! block's statistics for the sampler.
#pragma once
#include "decode_state.cuh"

static_assert(!HEAD_LANE || (IS_DTP && LM_FMT == QF_BF16), "a `lane` LM head is a DTP run's bf16 [V, TP·D] matrix");

#ifndef PG_GRAMMAR_MASK
#define PG_GRAMMAR_MASK 0
#endif
/// Constrained decoding on the device (`--gpu-grammar-mask`, one GPU; not yet run on a
/// GPU): a constrained run passes the allowed-token bitmap of each generated token in
/// `grammar_bits` (device memory the host copies into) and its generated-token index + 1
/// in the host control word CTL_MASK_SEQ once the copy landed. The LM head of the step
/// that samples generated token t waits for seq ≥ t + 1 (the host computes the mask
/// while the layers of the step run), then sets every forbidden token's logits to −∞.
constexpr bool GRAMMAR_MASK = PG_GRAMMAR_MASK != 0;
static_assert(!GRAMMAR_MASK || !IS_TP, "the grammar mask is a one-GPU path");

/// Waits until the host published the mask of the token step `s` samples (true), or
/// asked the run to stop (false: a grammar that cannot continue publishes no mask; the
/// step's token is dropped, and an unmasked step samples a real token id).
__device__ __forceinline__ bool wait_grammar_mask(const u32* ctl, u32 s, u32 n_prompt) {
  bool arrived = false;
  if (threadIdx.x == 0) {
    const u32 want = s + 2 - n_prompt;  // generated token s - (n_prompt - 1), plus one
    while (!(arrived = ld_host_flag(ctl + PG_CTL_MASK_SEQ) >= want) && ld_host_flag(ctl + PG_CTL_STOP) == 0) __nanosleep(200);
  }
  return __syncthreads_or(arrived);
}

/// Whether the grammar allows token `id` (the bitmap was copied in before the wait: read
/// from L2, not a line an earlier step left in L1).
__device__ __forceinline__ bool grammar_allows(const u32* bits, u32 id) { return (__ldcg(bits + (id >> 5)) >> (id & 31)) & 1u; }

/// The final norm and LM head of step `s`; returns the host's stop flag (read early, block 0 of rank 0).
__device__ __forceinline__ u32 Decode::lm_head_phase() {
  // Read the host's stop flag early: the PCIe round trip overlaps the LM head.
  u32 host_stop = 0;
  if (!score && rank == 0 && rank_block() == 0 && threadIdx.x == 0) host_stop = ld_host_flag(ctl + PG_CTL_STOP);
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
  const bool masked = GRAMMAR_MASK && grammar_bits != nullptr && !score && wait_grammar_mask(ctl, s, n_prompt);
  {
    LmStats st = lm_stats_empty();
    float* dbg_row = dbg ? dbg + (size_t)lm_runs * V : nullptr;
    const bool penalise_on = penalty != 1.0f;
    const u32 row0 = (u32)rank * V;  // this rank's first vocabulary row
    auto lm_epi = [&](int r, float v) {
      const u32 gr = row0 + (u32)r;
      // A forbidden token's raw logit too: log-probabilities are of the masked logits, as on the host.
      if (masked && !grammar_allows(grammar_bits, gr)) v = __int_as_float(0xff800000u);  // −∞
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
      qmat_grid_rows<D, 2, WARPS>(qmat1(lm_head, LM_FMT, V), V, vec, xq_smem(), lm_epi, rank_grid(), QSet{}, false, set_all());
    else if constexpr (LM_FMT != QF_BF16) qmat_grid_rows<D, LM_NR, WARPS>(qmat1(lm_head, LM_FMT, V), V, vec, xq_smem(), lm_epi);
    else grid_rows<LM_K, LM_NR, WARPS>(lm_head, V, vec, lm_epi);
    // Lane 0 of each warp holds its warp's statistics; merge them in warp order.
    LmStats* wst = reinterpret_cast<LmStats*>(red);
    if (lane_id() == 0) wst[warp_id()] = st;
    __syncthreads();
    if (threadIdx.x == 0) {
      LmStats b = wst[0];
      for (int w = 1; w < WARPS; ++w) b = lm_stats_merge(b, wst[w]);
      reinterpret_cast<float4*>(partials)[rank_block()] = lm_stats_pack(b);
    }
  }
  block_arrive(step_ctr(ctr, CTR_LM), trace_event(tr, EV_LM));
  if (gather) arrive_peers(XC_GATHER);
  ++lm_runs;
  return host_stop;
}
