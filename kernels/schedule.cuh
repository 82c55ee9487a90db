//! The decode kernel's compile-time schedule: block size, the tensor-parallel and DTP
//! exchange layout, which optimisations this shape turns on (staging, tagged words,
//! down_waves), the tagged-buffer layout and the dependency counters.
#pragma once
#include "common.cuh"
#include "shape.cuh"
#include "ops/allreduce.cuh"
#include "ops/matvec.cuh"

constexpr int THREADS = PG_THREADS;
constexpr int WARPS = THREADS / WARP_SIZE;
/// Rows per warp group in the matrix phases (loads in flight = NR × PG_UNROLL).
constexpr int NR = PG_NR;

// ---- tensor parallelism and DTP ------------------------------------------------
// With PG_TP > 1 this launch is rank PG_ARG_RANK of TP: NH, NKV, F and V above are
// this rank's shard (its heads, FFN columns and vocabulary rows); D is whole. The
// o- and down-projections produce partial D-vectors that ranks push into each
// other's receive slots (sentinel-filled, one per step parity, layer, projection and
// sending rank); the next consumer adds what the schedule says while it loads
// (allreduce.cuh). Standard TP all-reduces every layer; DTP (PG_DTP) keeps one
// residual per lane and adds other lanes' partials d layers late.

constexpr int TP = PG_TP;
constexpr bool IS_TP = TP > 1;
constexpr bool IS_DTP = PG_DTP != 0;
/// The whole vocabulary (the sampler's view; V is this rank's rows).
constexpr int VF = PG_V_FULL;
/// Per-layer schedule from the engine's DtpSchedule (standard TP: all-reduce everywhere).
__constant__ int x_mode[L] = PG_X_MODE;  // XMode
__constant__ int x_recv[L] = PG_X_RECV;  // layer whose other-lane partials this layer adds, or -1
__constant__ int x_send[L] = PG_X_SEND;  // this layer's partials go to the other lanes
/// Laneformer's LM head: each lane's own h reads its vocabulary rows (`vocab_parallel`,
/// no mean of the lanes), every lane's h side by side reads a [V, TP·D] head (`lane`),
/// and the lanes' residuals summed before the final norm (`pre_norm_lane_agg`).
constexpr bool HEAD_OWN_H = PG_HEAD_OWN != 0;
constexpr bool HEAD_LANE = PG_HEAD_LANE != 0;
/// Columns of the LM head.
constexpr int LM_K = HEAD_LANE ? TP * D : D;
constexpr bool SUM_BEFORE_NORM = PG_SUM_BEFORE_NORM != 0;
// ---- sliding-window attention (ModelConfig::sliding_window) --------------------------
/// Positions a windowed layer attends to, the current one included; 0: none.
constexpr int WINDOW = PG_WINDOW;
__constant__ int win_layer[L] = PG_WIN_LAYERS;  // 1: layer l uses the window
/// The first cached position layer l's query at position n − 1 attends to.
__device__ __forceinline__ int first_key(int l, int n) { return WINDOW > 0 && win_layer[l] ? max(0, n - WINDOW) : 0; }
/// Floats of one rank's LM-head message: packed LmStats, then (raw logit at its
/// best index, host stop flag bits, 0, 0).
constexpr int LMX_FLOATS = 8;
/// Exchange region of one rank (zeroed per run): counters peers bump, the LM-head
/// messages, and (DTP) every lane's final h for the mean.
enum XCounter { XC_LMX, XC_GATHER, XC_HMEAN };
constexpr int XC_WORDS = 32;
constexpr int X_LMX = XC_WORDS;                   // [TP][LMX_FLOATS]
constexpr int X_HMEAN = X_LMX + TP * LMX_FLOATS;  // [TP][D]
constexpr int X_WORDS = X_HMEAN + TP * D;
/// Receive slots of one rank (sentinel-filled per run): [2 step parities][L][o, down][TP][D].
constexpr int RX_KIND = TP * D;
constexpr int RX_LAYER = 2 * RX_KIND;
constexpr int RX_PARITY = L * RX_LAYER;
constexpr int RX_FLOATS = 2 * RX_PARITY;
__device__ __forceinline__ size_t rx_off(u32 step, int l, int kind) {
  return (size_t)(step & 1) * RX_PARITY + (size_t)l * RX_LAYER + (size_t)kind * RX_KIND;
}
static_assert(NR % 2 == 0, "gate/up rows are streamed in (gate, up) pairs");

// ---- the kernel's schedule (docs/kernel.md) ---------------------------------------
static_assert(THREADS % WARP_SIZE == 0 && THREADS >= HD, "block too small");
/// Staging: each warp starts copying its first row group of a matrix phase (up to
/// STAGE_CAP 16-byte words per lane per row) into its shared-memory slot with
/// cp.async before the phase's dependency wait and reads it from there after it; a
/// longer row keeps streaming through the slot as a ring (ops/matvec.cuh RowStage): the
/// group's DRAM round trip overlaps the wait, with no registers held across it, and
/// STAGE_CAP iterations stay in flight per lane. Only phases where every warp has at
/// most one row group stage (stage_fits). Rank-local weights, so it holds under TP too.
constexpr int STAGE_CAP = 8;
constexpr bool STAGE = true;
/// One GPU: the o- and down-projection epilogues add their row to the residual this
/// block loaded into shared memory for the phase before (QKV, gate/up) instead of
/// re-reading it from L2 after the dot product; the same bits. Under TP the residual
/// moves with the exchange.
constexpr bool RESID_SMEM = !IS_TP;
/// Rows per warp group of the LM head (more 16-byte loads in flight per lane than NR).
constexpr int LM_NR = 4;
/// Tagged words (one GPU): every per-layer vector a phase publishes (q/k/v, attention
/// output, residual after o, activations, residual after down) is written as tagged
/// words (sync.cuh: value + step tag in one 64-bit store, one buffer per layer, zeroed
/// per run) and its consumers poll the words they read instead of a phase counter: no
/// release fence at the producer, no counter poll and separate load at the consumer.
/// The step chain (token, LM head, prompt steps) keeps its counters, which also order
/// the KV-cache rows written in earlier steps. Under TP the ranks keep their phase
/// counters: the exchange with the peers is built on them.
constexpr bool TAGGED = !IS_TP;
/// down_waves: the down phase reads its input in segments of
/// DW_SEG_ITERS row iterations (DW_SEG_ITERS · 256 activations). The block's warps
/// without a down row group poll each segment's tagged words into shared memory and
/// arrive on the segment's named barrier (1 + segment); the row warps stream their rows
/// and sync on that barrier before the segment's first iteration. Gate/up completes the
/// activations in grid-wide rounds of ascending index, so most of a down row is summed
/// while the last round's words are still on their way: the dependency wait overlaps
/// the stream. Same summation order, so the same bits. Under tensor parallelism the
/// activations are rank-local: gate/up publishes them as tagged words there too (the
/// other phases keep their counters), and every down block reads them tagged.
#ifndef PG_DOWN_WAVES
#define PG_DOWN_WAVES 0
#endif
constexpr bool DOWN_WAVES = PG_DOWN_WAVES != 0 && (TAGGED || IS_TP);
/// The activations go out as tagged words (tagged, or down_waves under TP).
constexpr bool ACT_TAGGED = TAGGED || DOWN_WAVES;
constexpr int DW_ITERS = (F / 8 + WARP_SIZE - 1) / WARP_SIZE;
/// At most 15 segments (named barriers 1..15; 0 is __syncthreads).
constexpr int DW_SEG_ITERS = DW_ITERS <= 15 * 4 ? 4 : (DW_ITERS + 14) / 15;
constexpr int DW_SEGS = (DW_ITERS + DW_SEG_ITERS - 1) / DW_SEG_ITERS;
constexpr int DW_SEG = DW_SEG_ITERS * WARP_SIZE * 8;
static_assert(!DOWN_WAVES || (DW_SEGS <= 15 && F % 2 == 0), "down_waves: at most 15 segments of whole pairs");
/// Word offsets inside one layer's tagged buffer.
constexpr int T_QKV = 0;
constexpr int T_ATTN = T_QKV + QKV;
constexpr int T_XO = T_ATTN + QD;
constexpr int T_ACT = T_XO + D;
constexpr int T_XD = T_ACT + F;
constexpr int T_LAYER = T_XD + D;
static_assert(QKV % 2 == 0 && QD % 2 == 0 && D % 2 == 0 && F % 2 == 0, "tagged vectors are read in 16-byte pairs");

// ---- dependency counters -------------------------------------------------------

/// Per-layer phases, each a counter every block arrives on once per step (the order is
/// cuda/trace.rs LAYER_PHASES, which names them in traces).
enum Phase { PH_QKV = PG_PH_QKV, PH_ATTN = PG_PH_ATTN, PH_O = PG_PH_O, PH_GATE_UP = PG_PH_GATE_UP, PH_DOWN = PG_PH_DOWN, PHASES = PG_PHASES };
/// Trace events (PG_TRACE) after the per-layer ones (event l·PHASES + phase): the LM
/// head, the sampler (its "arrive" = the token's release), the step-start wait of the
/// step after the traced one (its producer is the traced step's sampler).
enum TraceTail {
  EV_LM = L * PHASES + PG_EV_LM,
  EV_SAMPLER = L * PHASES + PG_EV_SAMPLER,
  EV_STEP = L * PHASES + PG_EV_STEP,
  TRACE_EVENTS = L * PHASES + PG_TAIL_EVENTS
};
/// Whole-step counters.
enum StepCounter {
  CTR_LM,     // LM-head arrivals (once per block per step that runs the head)
  CTR_TOKEN,  // sampler decisions; step P+t's input waits for t+1 of them
  CTR_HALT,   // non-zero once the sampler ended the run (set before CTR_TOKEN moves)
  STEP_COUNTERS
};
/// After the step counters: one self-resetting ticket per (layer, head) for the
/// split-attention merge.

__device__ __forceinline__ u32* layer_ctr(u32* c, int layer, int phase) { return c + layer * PHASES + phase; }
__device__ __forceinline__ u32* step_ctr(u32* c, int which) { return c + L * PHASES + which; }
