//! The persistent decode kernel: ONE launch per request runs every step (prompt
//! tokens, then generated ones) and streams tokens to the host through host-mapped
//! memory. This file is the step loop and each phase's schedule (which block does what,
//! what it waits on); the math is in ops/*.cuh, the compile-time schedule in
//! schedule.cuh, shared memory in smem_plan.cuh, shared helpers in phases/*.cuh, the
//! design in docs/kernel.md. The shape and slots are -D defines from the engine
//! (cuda/layout); without them (scripts/check-kernels.sh) the file is empty.
#ifdef PG_D
#include "common.cuh"
#include "shape.cuh"
#include "sync.cuh"
#include "ops/allreduce.cuh"
#include "ops/attend_own.cuh"
#include "ops/attention.cuh"
#include "ops/emit.cuh"
#include "ops/lm_head.cuh"
#include "ops/matvec.cuh"
#include "ops/rmsnorm.cuh"
#include "ops/rope.cuh"
#include "ops/sample.cuh"
#include "ops/select.cuh"
#include "ops/swiglu.cuh"
#include "ops/tagged.cuh"
#include "ops/trace.cuh"
#include "schedule.cuh"
#include "smem_plan.cuh"
#include "args.cuh"
#include "phases/common.cuh"
#include "phases/exchange.cuh"
#include "phases/attention.cuh"
#include "phases/down.cuh"

extern "C" __global__ void __launch_bounds__(THREADS, 1) pg_decode(const Args args) {
  extern __shared__ float4 smem_f4[];
  float* sm = reinterpret_cast<float*>(smem_f4);
  float* vec = sm;
  float* red = sm + MAIN_FLOATS;
  float* resid_s = sm + RESID_OFF;  // resid_smem
  uint4* slot = reinterpret_cast<uint4*>(sm + STAGE_OFF) + warp_id() * SLOT_WORDS;  // stage (set A)
  // stage_ahead: set B after all of set A.
  uint4* slot_b = AHEAD ? reinterpret_cast<uint4*>(sm + STAGE_OFF) + WARPS * A_WORDS + warp_id() * B_WORDS : slot;
  float* rcopy = RESID_SMEM ? resid_s : nullptr;

  const u64* layers = ARG_PTR(const u64*, LAYERS);
  const bf16_t* embed = ARG_PTR(const bf16_t*, EMBED);
  const bf16_t* lm_head = ARG_PTR(const bf16_t*, LM_HEAD);
  const float* final_norm = ARG_PTR(const float*, FINAL_NORM);
  const float* inv_freq = ARG_PTR(const float*, INV_FREQ);
  bf16_t* kv = ARG_PTR(bf16_t*, KV);
  float* x = ARG_PTR(float*, X);
  float* qkv = ARG_PTR(float*, QKV);
  float* attn = ARG_PTR(float*, ATTN);
  float* act = ARG_PTR(float*, ACT);
  float* logits = ARG_PTR(float*, LOGITS);
  float* adj = ARG_PTR(float*, ADJ);
  float* partials = ARG_PTR(float*, PARTIALS);
  u32* ctr = ARG_PTR(u32*, COUNTERS);
  u32* tickets = ctr + L * PHASES + STEP_COUNTERS;
  float* attn_part = ARG_PTR(float*, ATTN_PART);
  u32* tokens = ARG_PTR(u32*, TOKENS);
  unsigned char* seen = ARG_PTR(unsigned char*, SEEN);
  const float* logit_bias = ARG_PTR(const float*, LOGIT_BIAS);  // [V] added to the logits, or null
  u32* counts = ARG_PTR(u32*, COUNTS);                           // [V] generated occurrences
  float* dbg = ARG_PTR(float*, DEBUG_LOGITS);
  const u32* stop_ids = ARG_PTR(const u32*, STOP_IDS);
  u32* ring = ARG_PTR(u32*, RING);
  u32* ctl = ARG_PTR(u32*, HOST_CTL);
  const u32 n_prompt = ARG_U32(N_PROMPT);
  const u32 max_tokens = ARG_U32(MAX_TOKENS);
  const bool score = ARG_U32(SCORE_MODE) != 0;
  const u32 n_stop = ARG_U32(N_STOP);
  const u32 top_logprobs = ARG_U32(TOP_LOGPROBS);
  const float penalty = ARG_F32(REPETITION_PENALTY);
  const float presence = ARG_F32(PRESENCE_PENALTY);
  const float frequency = ARG_F32(FREQUENCY_PENALTY);
  const bool count_on = presence != 0.f || frequency != 0.f;
  const SampleParams sp{ARG_F32(TEMPERATURE), ARG_U32(TOP_K), ARG_F32(TOP_P), ARG_F32(MIN_P), args.a[PG_ARG_SEED]};
  u64* trace = ARG_PTR(u64*, TRACE);       // PG_TRACE: [G][TRACE_EVENTS][TRACE_WORDS], or null
  const u32 trace_step = ARG_U32(TRACE_STEP);
  u64* tagged = ARG_PTR(u64*, TAGGED);  // tagged: [L][T_LAYER] words (zeroed per run)

  const u32 G = gridDim.x;
  // Tensor parallelism: every rank's exchange region, receive slots and
  // full-vocabulary logits/adj (PG_PEER_SLOTS pointers per rank; this rank's are local).
  const int rank = IS_TP ? (int)ARG_U32(RANK) : 0;
  const bool gather = IS_TP && ARG_U32(GATHER) != 0;  // sampling needs every rank's logits
  float* xb = ARG_PTR(float*, RESID);                 // residual entering attention (TP)
  u32* peer_xc[TP];
  float* peer_rx[TP];
  float* peer_logits[TP];
  float* peer_adj[TP];
  if (IS_TP) {
    const u64* peers = ARG_PTR(const u64*, PEERS);
#pragma unroll
    for (int r = 0; r < TP; ++r) {
      peer_xc[r] = reinterpret_cast<u32*>(__ldg(peers + r * PG_PEER_SLOTS + PG_PEER_EXCHANGE));
      peer_rx[r] = reinterpret_cast<float*>(__ldg(peers + r * PG_PEER_SLOTS + PG_PEER_RX));
      peer_logits[r] = reinterpret_cast<float*>(__ldg(peers + r * PG_PEER_SLOTS + PG_PEER_LOGITS));
      peer_adj[r] = reinterpret_cast<float*>(__ldg(peers + r * PG_PEER_SLOTS + PG_PEER_ADJ));
    }
  }
  float* my_xch = IS_TP ? reinterpret_cast<float*>(peer_xc[rank]) : nullptr;
  u32* my_xc = IS_TP ? peer_xc[rank] : nullptr;
  float* my_rx = IS_TP ? peer_rx[rank] : nullptr;
  // Blocks owning rows of each matrix (grid_rows hands row groups to blocks 0, 1, …).
  const int w_qkv = min(row_grid(), (QKV + NR - 1) / NR);
  const int w_d = min((int)G, (D + NR - 1) / NR);  // (the DTP mean of h: every block runs the LM head)
  const int w_gu = min(row_grid(), (2 * F + NR - 1) / NR);
  // Thread 0 after a block barrier: one arrival on every peer's counter `which`.
  auto arrive_peers = [&](int which) {
    if (IS_TP && threadIdx.x == 0) {
#pragma unroll
      for (int r = 0; r < TP; ++r)
        if (r != rank) peer_arrive(peer_xc[r] + which);
    }
  };
  // Layer l's projection `kind` (0 = o, 1 = down) into `vec`: base plus the partials the schedule adds.
  auto load_after = [&](u32 step, int l, int kind, const float* base, const bf16_t* base_bf16, float* out, int writers) {
    const int m = x_recv[l];
    load_combined<THREADS, D, TP>(vec, base, base_bf16, my_rx + rx_off(step, l, kind), m >= 0 ? my_rx + rx_off(step, m, kind) : nullptr,
                                  x_mode[l], PG_DTP_LANE_SCALE, rank, out, blockIdx.x, writers);
  };
  // Where layer l's partials of projection `kind` go: slot `rank` of each rank's slots.
  auto slots_of = [&](float* (&dst)[TP], u32 step, int l, int kind) {
#pragma unroll
    for (int r = 0; r < TP; ++r) dst[r] = IS_TP ? peer_rx[r] + rx_off(step, l, kind) : nullptr;
    return x_mode[l] == XM_ALL || x_send[l] != 0;
  };
  const u32 steps = score ? n_prompt : n_prompt + max_tokens - 1;
  // Steps before `start` ran in the batched prefill (KV rows written); counters count this launch's.
  const u32 start = ARG_U32(START_STEP);
  u32 lm_runs = 0;        // LM-head runs finished before the current step
  u32 consumed_seen = 0;  // sampler (block 0, thread 0): host's consumed count, cached

  for (u32 s = start; s < steps; ++s) {
    const u32 done = (s - start + 1) * G;  // a per-layer counter's value once step s is complete
    const u32 tag = s + 1;                  // tagged: this step's words (0 = never written)
    const bool lm_here = score || s + 1 >= n_prompt;
    // PG_TRACE: this block's record in the traced step (null otherwise: no stamps).
    u64* tr = trace_record(trace, TRACE_EVENTS, s == trace_step);
    if (!score && s >= n_prompt) {
      // Every block waits here, work or not, so all of them see a halt.
      block_wait(step_ctr(ctr, CTR_TOKEN), s - n_prompt + 1,
                 trace_event(trace_record(trace, TRACE_EVENTS, s == trace_step + 1), EV_STEP));
      if (ld_shared_u32(step_ctr(ctr, CTR_HALT)) != 0) return;
    }
    if (s > start && (score || s < n_prompt)) {
      // Every block acquires the step chain at a prompt or score step's start (a generated
      // step's token wait does the same), so the last step's writes are visible and layer
      // 0's q/k/v needs no wait: tagged polls are relaxed and order nothing, and a block
      // with no work in a step would otherwise run ahead on the counters.
      u64* ev = TAGGED ? nullptr : trace_event(tr, PH_QKV);
      if (score || s >= n_prompt) block_wait(step_ctr(ctr, CTR_LM), lm_runs * G, ev);
      else block_wait(layer_ctr(ctr, L - 1, PH_DOWN), (s - start) * G, ev);
    }
    const u32 tok = ld_shared_u32(tokens + s);
    const bf16_t* emb_row = embed + (size_t)tok * D;

    for (int l = 0; l < L; ++l) {
      const u64* lw = layers + (size_t)l * PG_LW_SLOTS;
      const u64 fmts = layer_fmts(lw);  // the matrices' weight formats (all 0: bf16)
      bf16_t* kc = kv + (size_t)l * 2 * NKV * KV_CAP * HD;
      bf16_t* vc = kc + (size_t)NKV * KV_CAP * HD;
      u64* tl = tagged + (size_t)l * T_LAYER;  // tagged: this layer's words
      const u64* tprev = tl - T_LAYER;         // tagged: the previous layer's (l > 0)

      // ---- attention norm + q/k/v projection (+ bias) ----------------------------
      {
        const bf16_t* w = LAYER_PTR(const bf16_t*, lw, WQKV);
        const QMat wq = qkv_mat(w, fmts);
        const bool quant = qkv_quant(fmts);
        // stage_ahead: layer 0's q/k/v now (layer l > 0's came with layer l-1's down), then the o rows.
        if (AHEAD && l == 0) (void)stage_ahead<D, QKV>(w, slot, quant);
        auto start_o = [&] { return AHEAD && stage_ahead<QD, D>(LAYER_PTR(const bf16_t*, lw, WO), slot_b, fmt_of(fmts, QR_O) != 0); };
        bool o_ahead = !LATE_QKV && start_o();
        if (LATE_QKV && !has_rows(QKV)) (void)start_o();
        if (has_rows(QKV)) {
          if (!AHEAD) maybe_stage<D, QKV>(w, slot, quant);
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
              o_ahead, NoWait{}, quant ? &wq : nullptr);
          (void)bias;
        }
        phase_end(layer_ctr(ctr, l, PH_QKV), trace_event(tr, l * PHASES + PH_QKV));
      }

      // ---- rope + attention: (head, position split) items over the grid ----------
      {
        // Flash-decoding split: enough splits that each block does about one pass of
        // loads, at most what the grid and the partial buffer hold.
        // Positions attended, the current one included: from `first` (a windowed layer's
        // oldest key) to s. Cache rows are addressed from `first` (`win`) in this section.
        const int first = first_key(l, (int)s + 1);
        const int n = (int)s + 1 - first;
        const size_t win = (size_t)first * HD;
        // attn_own: attention on the blocks after the row grid only (OWN_FAST: up to
        // OWN_MAX positions, on every block past it).
        int attn_first = 0;
        if constexpr (ATTN_OWN > 0) attn_first = row_grid() < (int)G && (!OWN_FAST || n <= OWN_MAX) ? row_grid() : 0;
        const bool own_fast = OWN_FAST && attn_first > 0;
        const int attn_blocks = (int)G - attn_first;
        const int attn_block = (int)blockIdx.x - attn_first;
        const int splits = min((n + ATTN_PASS - 1) / ATTN_PASS, max(1, min(PG_ATTN_MAX_SPLITS, attn_blocks / NH)));
        const int chunk = (n + splits - 1) / splits;
        const int sp_cur = (n - 1) / chunk;
        const int items = NH * splits;
        if (attn_block < items && (ATTN_OWN == 0 || attn_block >= 0)) {
          // stage: the cached k/v rows of this block's first item's first pass (written in
          // earlier steps) into the stage slots while waiting for this step's q/k/v.
          uint4* kv_stage = ATTN_STAGE ? reinterpret_cast<uint4*>(sm + STAGE_OFF) : nullptr;
          // own_fast: every cached row that fits.
          uint4* own_kv = reinterpret_cast<uint4*>(sm + STAGE_OFF);
          if (own_fast) {
            const int g0 = attn_block / GROUP;
            own_stage<THREADS, HD>(kc + (size_t)g0 * KV_CAP * HD + win, vc + (size_t)g0 * KV_CAP * HD + win, n - 1, OWN_CAP, own_kv);
          } else if (ATTN_STAGE) {
            const int h0 = attn_block % NH, sp0 = attn_block / NH, g0 = h0 / GROUP;
            const int a0 = sp0 * chunk;
            attend_stage<THREADS, HD>(kc + (size_t)g0 * KV_CAP * HD + win, vc + (size_t)g0 * KV_CAP * HD + win, a0,
                                      splits == 1 ? n - 1 : min(n - 1, a0 + chunk), kv_stage);
          }
          u64* ev = trace_event(tr, l * PHASES + PH_ATTN);
          // This thread's rope pair's sin and cos (tagged: before the wait; the position is known).
          float rope_s = 0.f, rope_c = 1.f;
          // (Threads < HD: q's pairs, then k's; head_qkv.)
          if (TAGGED && threadIdx.x < HD) rope_angle<HD>(threadIdx.x % (HD / 2), s, inv_freq, rope_s, rope_c);
          if (!TAGGED) {
            block_wait(layer_ctr(ctr, l, PH_QKV), done, ev);
            if (threadIdx.x < HD) rope_angle<HD>(threadIdx.x % (HD / 2), s, inv_freq, rope_s, rope_c);
          }
          trace_wait_start(TAGGED ? ev : nullptr);
          float* q_s = sm;
          float* kv_s = sm + HD;  // k then v, HD each
          float* scratch = sm + 3 * HD;
          float* out_s = sm + ATTN_OUT;  // tagged: the head's output before it goes out
          // tagged: head h's output, complete in out_s, out as this step's words.
          auto publish_head = [&](int h) {
            if (TAGGED)
              for (int d = threadIdx.x; d < HD; d += THREADS) st_tagged(tl + T_ATTN + h * HD + d, out_s[d], tag);
          };
          for (int item = attn_block; item < items; item += attn_blocks) {
            const int h = item % NH, sp = item / NH, g = h / GROUP;
            const bool with_current = sp == sp_cur;
            if (TAGGED) {
              head_qkv([&](int a, int b, float& x, float& y) { wait_tagged2(tl + T_QKV + a, tl + T_QKV + b, tag, x, y); }, h,
                       with_current, rope_s, rope_c, q_s, kv_s);
              if (item == attn_block) trace_wait_end(ev);
            } else {
              head_qkv(
                  [&](int a, int b, float& x, float& y) {
                    x = ld_shared_f32(qkv + a);
                    y = ld_shared_f32(qkv + b);
                  },
                  h, with_current, rope_s, rope_c, q_s, kv_s);
            }
            // tagged: the head's output goes to shared memory first, then out as tagged words.
            float* head_out = TAGGED ? out_s : attn + h * HD;
            // The staged first pass belongs to the block's first item.
            const uint4* staged = item == attn_block ? kv_stage : nullptr;
            bf16_t* kg = kc + (size_t)g * KV_CAP * HD;
            bf16_t* vg = vc + (size_t)g * KV_CAP * HD;
            if (with_current && h % GROUP == 0) {
              // The group's first head stores this position; the others use kv_s.
              for (int d = threadIdx.x; d < HD; d += THREADS) {
                kg[(size_t)s * HD + d] = f32_to_bf16(kv_s[d]);
                vg[(size_t)s * HD + d] = f32_to_bf16(kv_s[HD + d]);
              }
            }
            const int p0 = sp * chunk, p1 = min(n - 1, p0 + chunk);
            if (splits == 1) {
              if constexpr (OWN_FAST) {
                if (own_fast) attend_own<THREADS, HD>(q_s, kv_s, n, OWN_CAP, own_kv, scratch, head_out);
              }
              if (!own_fast)
                attend_range<THREADS, HD>(q_s, kv_s, kv_s + HD, true, kg + win, vg + win, 0, n - 1, nullptr, head_out, scratch, staged);
              publish_head(h);
            } else {
              float* head_parts = attn_part + (size_t)h * PG_ATTN_MAX_SPLITS * (HD + 2);
              attend_range<THREADS, HD>(q_s, kv_s, kv_s + HD, with_current, kg + win, vg + win, p0, p1, head_parts + sp * (HD + 2), nullptr,
                                        scratch, staged);
              // The last split of this head to finish merges all of them.
              u32* flag = reinterpret_cast<u32*>(red);
              if (threadIdx.x == 0) *flag = ticket_is_last(tickets + l * NH + h, (u32)splits) ? 1u : 0u;
              __syncthreads();
              if (*flag) {
                merge_states<THREADS, HD>(head_parts, splits, head_out);
                publish_head(h);  // (each thread reads back only the dimensions it wrote)
              }
              __syncthreads();
            }
          }
        }
        phase_end(layer_ctr(ctr, l, PH_ATTN), trace_event(tr, l * PHASES + PH_ATTN));
      }

      // ---- o-projection + residual ------------------------------------------------
      {
        const bf16_t* w = LAYER_PTR(const bf16_t*, lw, WO);
        const QMat wq = qmat1(w, fmt_of(fmts, QR_O), D);
        const bool quant = fmt_of(fmts, QR_O) != 0;
        // stage_ahead: the gate/up rows into set A (attention is done with it).
        auto start_gu = [&] { return AHEAD && stage_ahead<D, 2 * F>(LAYER_PTR(const bf16_t*, lw, WGATE_UP), slot, fmt_of(fmts, QR_GU) != 0); };
        bool gu_ahead = start_gu();
        if (has_rows(D)) {
          if (!AHEAD) maybe_stage<QD, D>(w, slot, quant);
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
              gu_ahead, NoWait{}, quant ? &wq : nullptr);
        }
        phase_end(layer_ctr(ctr, l, PH_O), trace_event(tr, l * PHASES + PH_O));
      }

      // ---- ffn norm + gate/up + SwiGLU -------------------------------------------
      {
        const bf16_t* w = LAYER_PTR(const bf16_t*, lw, WGATE_UP);
        const QMat wq = qmat1(w, fmt_of(fmts, QR_GU), 2 * F);
        const bool quant = fmt_of(fmts, QR_GU) != 0;
        // stage_ahead: the down rows into set B (the o-projection is done with it).
        auto start_down = [&] { return AHEAD && stage_ahead<F, D>(LAYER_PTR(const bf16_t*, lw, WDOWN), slot_b, fmt_of(fmts, QR_DOWN) != 0); };
        bool down_ahead = !LATE_GU && start_down();
        if (LATE_GU && !has_rows(2 * F)) (void)start_down();
        if (has_rows(2 * F)) {
          if (!AHEAD) maybe_stage<D, 2 * F>(w, slot, quant);
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
            qmat_grid_rows<D, NR, WARPS>(
                wq, 2 * F, vec,
                [&](int r, float v) {
                  if ((r & 1) == 0) gate = v;
                  else if (ACT_TAGGED) st_tagged(tl + T_ACT + r / 2, swiglu(gate, v), tag);
                  else act[r / 2] = swiglu(gate, v);
                },
                row_grid());
          } else {
            const int gw = warp_id() * row_grid() + blockIdx.x;
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

      // ---- down projection + residual --------------------------------------------
      {
        const bf16_t* w = LAYER_PTR(const bf16_t*, lw, WDOWN);
        const QMat wq = qmat1(w, fmt_of(fmts, QR_DOWN), D);
        const bool quant = fmt_of(fmts, QR_DOWN) != 0;
        // stage_ahead: the next layer's q/k/v rows into set A (gate/up is done with it).
        auto start_qkv = [&] {
          return AHEAD && l + 1 < L && stage_ahead<D, QKV>(LAYER_PTR(const bf16_t*, lw + PG_LW_SLOTS, WQKV), slot, qkv_quant(layer_fmts(lw + PG_LW_SLOTS)));
        };
        bool qkv_ahead = start_qkv();
        if (has_rows(D)) {
          if (!AHEAD) maybe_stage<F, D>(w, slot, quant);
          u64* ev = trace_event(tr, l * PHASES + PH_DOWN);
          // down_waves' segments are counted in bf16 iterations: a quantized down waits for all of its input.
          const bool waves = !(QUANT && quant) && down_waves_here();
          // down_waves: the row warps are the low ones (grid_rows hands out groups warp-major).
          const int row_warps = waves ? ((D + NR - 1) / NR - (int)blockIdx.x + row_grid() - 1) / row_grid() : WARPS;
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
            phase_rows<F, N_QKV>(w, D, vec, slot_b, down_epi, qkv_ahead, NoWait{}, quant ? &wq : nullptr);
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
    }

    if (!lm_here) {
      // tagged: a prompt step without LM head still arrives on the last layer's DOWN
      // counter (after phase_end's barrier): the next step's chain waits on it.
      if (TAGGED && threadIdx.x == 0) red_release_gpu(layer_ctr(ctr, L - 1, PH_DOWN), 1);
      continue;
    }

    // ---- final norm + LM head (+ penalty, statistics) ----------------------------
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
    if (IS_DTP && !SUM_BEFORE_NORM && !HEAD_OWN_H) dtp_mean_h(vec, peer_xc, my_xc, my_xch, rank, w_d, lm_runs);
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
      if constexpr (LM_FMT != QF_BF16) qmat_grid_rows<D, LM_NR, WARPS>(qmat1(lm_head, LM_FMT, V), V, vec, lm_epi);
      else grid_rows<D, LM_NR, WARPS>(lm_head, V, vec, lm_epi);
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
    if (score || blockIdx.x != 0) continue;

    // ---- sampler (block 0) ------------------------------------------------------
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
}

#endif  // PG_D
