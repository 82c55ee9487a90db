//! The q/k/v phase: the attention norm and the q/k/v projection (+ bias), its rows
//! staged before the wait on the previous layer's down phase.
#pragma once
#include "decode_state.cuh"

/// The attention norm and the q/k/v projection (+ bias) of layer `l`: row groups over the row grid.
__device__ __forceinline__ void Decode::qkv_phase() {
  const bf16_t* w = LAYER_PTR(const bf16_t*, lw, WQKV);
  const QMat wq = qkv_mat(w, fmts);
  const bool quant = qkv_quant(fmts);
  // stage_ahead: layer 0's q/k/v now (layer l > 0's came with layer l-1's down), then the o rows.
  if (AHEAD && l == 0) (void)stage_ahead<D, QKV>(w, slot, wq, set_a());
  auto start_o = [&] {
    if (!AHEAD) return false;
    const bf16_t* wo = LAYER_PTR(const bf16_t*, lw, WO);
    return stage_ahead<QD, D>(wo, slot_b, qmat1(wo, fmt_of(fmts, QR_O), D), set_b());
  };
  bool o_ahead = !LATE_QKV && start_o();
  if (LATE_QKV && !has_rows(QKV)) (void)start_o();
  if (has_rows(QKV)) {
    if (!AHEAD) maybe_stage<D, QKV>(w, slot, wq, set_a());
    const float* norm_w = LAYER_PTR(const float*, lw, ATTN_NORM);
    const auto norm_regs = early_norm(norm_w);
    u64* ev = trace_event(tr, l * PHASES + PH_QKV);
    // (tagged: the load below polls layer l-1's words; the step chain is acquired.)
    if (!TAGGED && l > 0) {
      block_wait(layer_ctr(ctr, l - 1, PH_DOWN), done, ev);
    } else if (!TAGGED && s > start) {
      if (IS_TP) refill_receive_slots(my_rx + rx_off(s - 1, 0, 0), rank, w_qkv);
    }
    if (l == 0) load_vec_bf16<THREADS>(vec, emb_row, D, rcopy);
    else if (TAGGED) load_tagged<THREADS, D>(vec, tprev + T_XD, tag, rcopy, ev);
    else load_after(s, l - 1, 1, x, nullptr, xb, w_qkv);
    if (LATE_QKV) o_ahead = start_o();
    norm_vec(vec, norm_regs, norm_w, red);
    const float* bias = LAYER_PTR(const float*, lw, QKV_BIAS);
    phase_rows<D, N_O>(
        w, QKV, vec, slot,
        [&](int r, float v) {
#if PG_QKV_BIAS
          v += __ldg(bias + r);
#endif
          if (TAGGED) st_tagged(tl + T_QKV + r, v, tag);
          else qkv[r] = v;
        },
        o_ahead, NoWait{}, quant ? &wq : nullptr, xq_smem(), set_a());
    (void)bias;
  }
  phase_end(layer_ctr(ctr, l, PH_QKV), trace_event(tr, l * PHASES + PH_QKV));
}
