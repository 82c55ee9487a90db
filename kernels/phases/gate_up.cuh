//! The gate/up phase: the FFN norm, gate and up projections and SwiGLU.
#pragma once
#include "decode_state.cuh"

/// The FFN norm, gate/up projection and SwiGLU of layer `l`.
__device__ __forceinline__ void Decode::gate_up_phase() {
  const bf16_t* w = LAYER_PTR(const bf16_t*, lw, WGATE_UP);
  const QMat wq = qmat1(w, fmt_of(fmts, QR_GU), 2 * F);
  const bool quant = fmt_of(fmts, QR_GU) != 0;
  // stage_ahead: the down rows into set B (the o-projection is done with it).
  auto start_down = [&] {
    if (!AHEAD) return false;
    const bf16_t* wd = LAYER_PTR(const bf16_t*, lw, WDOWN);
    return stage_ahead<F, D>(wd, slot_b, qmat1(wd, fmt_of(fmts, QR_DOWN), D), set_b());
  };
  bool down_ahead = !LATE_GU && start_down();
  if (LATE_GU && !has_rows(2 * F)) (void)start_down();
  if (has_rows(2 * F)) {
    if (!AHEAD) maybe_stage<D, 2 * F>(w, slot, wq, set_a());
    const float* norm_w = LAYER_PTR(const float*, lw, FFN_NORM);
    const auto norm_regs = early_norm(norm_w);
    u64* ev = trace_event(tr, l * PHASES + PH_GATE_UP);
    if (TAGGED) {
      load_tagged<THREADS, D>(vec, tl + T_XO, tag, rcopy, ev);
    } else {
      block_wait(layer_ctr(ctr, l, PH_O), done, ev);
      load_after(s, l, 0, xb, l == 0 ? emb_row : nullptr, x, w_gu);
    }
    if (LATE_GU) down_ahead = start_down();
    norm_vec(vec, norm_regs, norm_w, red);
    // Rows interleave (gate_j, up_j); a group of NR rows holds NR/2 whole pairs.
    if (QUANT && quant) {
      float gate = 0.f;  // lane 0 gets each pair's gate row just before its up row
      phase_rows<D, N_DOWN>(
          w, 2 * F, vec, slot,
          [&](int r, float v) {
            if ((r & 1) == 0) gate = v;
            else if (ACT_TAGGED) st_tagged(tl + T_ACT + r / 2, swiglu(gate, v), tag);
            else act[r / 2] = swiglu(gate, v);
          },
          down_ahead, NoWait{}, &wq, xq_smem(), set_a());
    } else {
      const int gw = warp_id() * row_grid() + rank_block();
      const int nw = WARPS * row_grid();
      constexpr int GROUPS = (2 * F + NR - 1) / NR;
      for (int grp = gw; grp < GROUPS; grp += nw) {
        float acc[NR];
        // stage: the warp's first group (grp == gw, warp-uniform) was copied before the wait.
        if (grp == gw && stage_fits(2 * F))
          warp_rows_dot_staged<D, NR, STAGE_CAP, N_DOWN>(w, grp * NR, 2 * F, vec, slot, acc, down_ahead);
        else warp_rows_dot<D, NR>(w, grp * NR, 2 * F, vec, acc);
        if (lane_id() == 0) {
#pragma unroll
          for (int r = 0; r < NR; r += 2) {
            const int j = (grp * NR + r) / 2;
            if (j >= F) continue;
            if (ACT_TAGGED) st_tagged(tl + T_ACT + j, swiglu(acc[r], acc[r + 1]), tag);
            else act[j] = swiglu(acc[r], acc[r + 1]);
          }
        }
      }
    }
  }
  phase_end(layer_ctr(ctr, l, PH_GATE_UP), trace_event(tr, l * PHASES + PH_GATE_UP));
}
