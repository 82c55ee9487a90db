//! The decode kernel's state: the arguments unpacked once per launch, the current step's
//! and layer's values, and the phases as member functions (one file each in phases/), so
//! pg_decode in decode.cu reads as the step loop it is. Everything is inlined: the
//! members live in registers as the locals of one function would.
#pragma once
#include "smem_plan.cuh"
#include "args.cuh"
#include "phases/common.cuh"
#include "phases/exchange.cuh"

extern __shared__ float4 smem_f4[];
/// The quantized phases' prepared input (a fixed address: no register to keep).
__device__ __forceinline__ unsigned char* xq_smem() { return reinterpret_cast<unsigned char*>(reinterpret_cast<float*>(smem_f4) + XQ_OFF); }

/// The stage region's first byte.
__device__ __forceinline__ unsigned char* stage_region() { return reinterpret_cast<unsigned char*>(reinterpret_cast<float*>(smem_f4) + STAGE_OFF); }
/// Stage sets A and B as whole regions, for Q8_0 row groups (ops/qmatvec.cuh QSet;
/// functions, not members: fixed addresses need no registers).
__device__ __forceinline__ QSet set_a() { return QSet{stage_region(), SET_A_BYTES}; }
__device__ __forceinline__ QSet set_b() { return QSet{stage_region() + (AHEAD ? SET_A_BYTES : 0), SET_B_BYTES}; }
/// The whole stage region (both sets, the Q8_0 extra), free in the LM head.
__device__ __forceinline__ QSet set_all() { return QSet{stage_region(), (STAGE_REGION_WORDS + QSTAGE_EXTRA_WORDS) * 16}; }

struct Decode {
  const Args& args;
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
  const u32* grammar_bits = ARG_PTR(const u32*, MASK);           // GRAMMAR_MASK: [V/32] allowed tokens, or null
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

  const u32 G = rank_grid();
  // Tensor parallelism: every rank's exchange region, receive slots and
  // full-vocabulary logits/adj (PG_PEER_SLOTS pointers per rank; this rank's are local).
  const int rank = IS_TP ? (int)ARG_U32(RANK) : 0;
  const bool gather = IS_TP && ARG_U32(GATHER) != 0;  // sampling needs every rank's logits
  float* xb = ARG_PTR(float*, RESID);                 // residual entering attention (TP)
  u32* peer_xc[TP];
  float* peer_rx[TP];
  float* peer_logits[TP];
  float* peer_adj[TP];
  float* my_xch = nullptr;  // this rank's exchange region (TP)
  u32* my_xc = nullptr;
  float* my_rx = nullptr;  // this rank's receive slots (TP)
  // Blocks owning rows of each matrix (grid_rows hands row groups to blocks 0, 1, …).
  const int w_qkv = min(row_grid(), (QKV + NR - 1) / NR);
  const int w_d = min((int)G, (D + NR - 1) / NR);  // (the DTP mean of h: every block runs the LM head)
  const int w_gu = min(row_grid(), (2 * F + NR - 1) / NR);
  const u32 steps = score ? n_prompt : n_prompt + max_tokens - 1;
  // Steps before `start` ran in the batched prefill (KV rows written); counters count this launch's.
  const u32 start = ARG_U32(START_STEP);
  u32 lm_runs = 0;        // LM-head runs finished before the current step
  u32 consumed_seen = 0;  // sampler (block 0, thread 0): host's consumed count, cached

  // The current step (begin_step).
  u32 s = 0;
  u32 done = 0;                     // a per-layer counter's value once step s is complete
  u32 tag = 0;                      // tagged: this step's words (0 = never written)
  bool lm_here = false;             // the step runs the LM head
  u64* tr = nullptr;                // PG_TRACE: this block's record in the traced step, or null
  const bf16_t* emb_row = nullptr;  // the step's token's embedding row
  // The current layer (begin_layer).
  int l = 0;
  const u64* lw = nullptr;     // the layer's weight slots
  u64 fmts = 0;                // the matrices' weight formats (all 0: bf16)
  bf16_t* kc = nullptr;        // the layer's K cache, then its V cache
  bf16_t* vc = nullptr;
  u64* tl = nullptr;           // tagged: this layer's words
  const u64* tprev = nullptr;  // tagged: the previous layer's (l > 0)

  __device__ __forceinline__ explicit Decode(const Args& a) : args(a) {
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
    my_xch = IS_TP ? reinterpret_cast<float*>(peer_xc[rank]) : nullptr;
    my_xc = IS_TP ? peer_xc[rank] : nullptr;
    my_rx = IS_TP ? peer_rx[rank] : nullptr;
  }

  // Thread 0 after a block barrier: one arrival on every peer's counter `which`.
  __device__ __forceinline__ void arrive_peers(int which) const {
    if (IS_TP && threadIdx.x == 0) {
#pragma unroll
      for (int r = 0; r < TP; ++r)
        if (r != rank) peer_arrive(peer_xc[r] + which);
    }
  }
  // Layer l's projection `kind` (0 = o, 1 = down) into `vec`: base plus the partials the schedule adds.
  __device__ __forceinline__ void load_after(u32 step, int l, int kind, const float* base, const bf16_t* base_bf16, float* out, int writers) const {
    const int m = x_recv[l];
    load_combined<THREADS, D, TP>(vec, base, base_bf16, my_rx + rx_off(step, l, kind), m >= 0 ? my_rx + rx_off(step, m, kind) : nullptr,
                                  x_mode[l], PG_DTP_LANE_SCALE, rank, out, rank_block(), writers);
  }
  // Where layer l's partials of projection `kind` go: slot `rank` of each rank's slots.
  __device__ __forceinline__ bool slots_of(float* (&dst)[TP], u32 step, int l, int kind) const {
#pragma unroll
    for (int r = 0; r < TP; ++r) dst[r] = IS_TP ? peer_rx[r] + rx_off(step, l, kind) : nullptr;
    return x_mode[l] == XM_ALL || x_send[l] != 0;
  }

  /// Starts step `step`: the waits every block does before layer 0. False once the run halted.
  __device__ __forceinline__ bool begin_step(u32 step) {
    s = step;
    done = (s - start + 1) * G;
    tag = s + 1;
    lm_here = score || s + 1 >= n_prompt;
    tr = trace_record(trace, TRACE_EVENTS, s == trace_step);
    if (!score && s >= n_prompt) {
      // Every block waits here, work or not, so all of them see a halt.
      block_wait(step_ctr(ctr, CTR_TOKEN), s - n_prompt + 1,
                 trace_event(trace_record(trace, TRACE_EVENTS, s == trace_step + 1), EV_STEP));
      if (ld_shared_u32(step_ctr(ctr, CTR_HALT)) != 0) return false;
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
    emb_row = embed + (size_t)tok * D;
    return true;
  }

  /// Layer `layer`'s weights, cache and tagged words.
  __device__ __forceinline__ void begin_layer(int layer) {
    l = layer;
    lw = layers + (size_t)l * PG_LW_SLOTS;
    fmts = layer_fmts(lw);
    kc = kv + (size_t)l * 2 * NKV * KV_CAP * HD;
    vc = kc + (size_t)NKV * KV_CAP * HD;
    tl = tagged + (size_t)l * T_LAYER;
    tprev = tl - T_LAYER;       
  }

  __device__ __forceinline__ void qkv_phase();
  __device__ __forceinline__ void attention_phase();
  __device__ __forceinline__ void o_phase();
  __device__ __forceinline__ void gate_up_phase();
  __device__ __forceinline__ void down_phase();
  __device__ __forceinline__ u32 lm_head_phase();
  __device__ __forceinline__ void sampler_phase(u32 host_stop);
};
