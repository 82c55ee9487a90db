//! The down-projection phase: the FFN output times w_down plus the residual (the
//! down_waves helpers are in phases/down_waves.cuh).
#pragma once
#include "decode_state.cuh"

/// The down projection of layer `l` plus the residual (down_waves: in segments while its input lands).
__device__ __forceinline__ void Decode::down_phase() {
  const bf16_t* w = LAYER_PTR(const bf16_t*, lw, WDOWN);
  const QMat wq = qmat1(w, fmt_of(fmts, QR_DOWN), D);
  const bool quant = fmt_of(fmts, QR_DOWN) != 0;
  // stage_ahead: the next layer's q/k/v rows into set A (gate/up is done with it).
  auto start_qkv = [&] {
    if (!AHEAD || l + 1 >= L) return false;
    const bf16_t* wn = LAYER_PTR(const bf16_t*, lw + PG_LW_SLOTS, WQKV);
    return stage_ahead<D, QKV>(wn, slot, qkv_mat(wn, layer_fmts(lw + PG_LW_SLOTS)), set_a());
  };
  bool qkv_ahead = start_qkv();
  if (has_rows(D)) {
    if (!AHEAD) maybe_stage<F, D>(w, slot, wq, set_a());
    u64* ev = trace_event(tr, l * PHASES + PH_DOWN);
    // down_waves' segments are counted in bf16 iterations: a quantized down waits for all of its input.
    const bool waves = !(QUANT && quant) && down_waves_here();
    // down_waves: the row warps are the low ones (grid_rows hands out groups warp-major).
    const int row_warps = waves ? ((D + NR - 1) / NR - (int)rank_block() + row_grid() - 1) / row_grid() : WARPS;
    if (waves) {
      if (warp_id() >= row_warps) load_down_segments(vec, tl + T_ACT, tag, row_warps);
      else trace_wait_start(ev);
    } else {
      if (ACT_TAGGED) load_tagged<THREADS, F>(vec, tl + T_ACT, tag, nullptr, ev);
      else load_phase_input<F>(vec, tl + T_ACT, tag, layer_ctr(ctr, l, PH_GATE_UP), done, act, ev);
    }
    float* pd[TP];
    const bool send = slots_of(pd, s, l, 1);
    // resid_smem: this block loaded the residual in its gate/up phase.
    const bool res_here = RESID_SMEM && has_rows(2 * F);
    auto down_epi = [&](int r, float v) {
      if (IS_TP) push_partial<TP, D>(pd, rank, r, v, send);
      else st_tagged(tl + T_XD + r, (res_here ? resid_s[r] : wait_tagged(tl + T_XO + r, tag)) + v, tag);
    };
    if (!waves) {
      phase_rows<F, N_QKV>(w, D, vec, slot_b, down_epi, qkv_ahead, NoWait{}, quant ? &wq : nullptr, xq_smem(), set_b());
    } else if (warp_id() < row_warps) {
      // Sync on each segment's barrier before its first iteration reads it.
      auto seg_wait = [&](int it) {
        if (it % DW_SEG_ITERS != 0) return;
        named_bar_sync(1 + it / DW_SEG_ITERS, THREADS);
        if (it / DW_SEG_ITERS == DW_SEGS - 1) trace_wait_end(ev);
      };
      phase_rows<F, N_QKV>(w, D, vec, slot_b, down_epi, qkv_ahead, seg_wait);
    }
  }
  phase_end(layer_ctr(ctr, l, PH_DOWN), trace_event(tr, l * PHASES + PH_DOWN));
}
