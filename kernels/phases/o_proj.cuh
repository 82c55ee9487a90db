//! The o-projection phase: attention output times wo plus the residual.
#pragma once
#include "decode_state.cuh"

/// The o-projection of layer `l` plus the residual (TP: partials pushed to every rank).
__device__ __forceinline__ void Decode::o_phase() {
  const bf16_t* w = LAYER_PTR(const bf16_t*, lw, WO);
  const QMat wq = qmat1(w, fmt_of(fmts, QR_O), D);
  const bool quant = fmt_of(fmts, QR_O) != 0;
  // stage_ahead: the gate/up rows into set A (attention is done with it).
  auto start_gu = [&] {
    if (!AHEAD) return false;
    const bf16_t* wgu = LAYER_PTR(const bf16_t*, lw, WGATE_UP);
    return stage_ahead<D, 2 * F>(wgu, slot, qmat1(wgu, fmt_of(fmts, QR_GU), 2 * F), set_a());
  };
  bool gu_ahead = start_gu();
  if (has_rows(D)) {
    if (!AHEAD) maybe_stage<QD, D>(w, slot, wq, set_a());
    load_phase_input<QD>(vec, tl + T_ATTN, tag, layer_ctr(ctr, l, PH_ATTN), done, attn, trace_event(tr, l * PHASES + PH_O));
    float* po[TP];
    const bool send = slots_of(po, s, l, 0);
    // resid_smem: this block loaded the residual in its QKV phase (if it had QKV rows).
    const bool res_here = RESID_SMEM && has_rows(QKV);
    phase_rows<QD, N_GU>(
        w, D, vec, slot_b,
        [&](int r, float v) {
      if (IS_TP) {
        push_partial<TP, D>(po, rank, r, v, send);
      } else {
        const float res = res_here ? resid_s[r] : l == 0 ? bf16_to_f32(emb_row[r]) : wait_tagged(tprev + T_XD + r, tag);
        st_tagged(tl + T_XO + r, res + v, tag);
      }
        },
        gu_ahead, NoWait{}, quant ? &wq : nullptr, xq_smem(), set_b());
  }
  phase_end(layer_ctr(ctr, l, PH_O), trace_event(tr, l * PHASES + PH_O));
}
