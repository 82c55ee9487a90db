//! The decode kernel's shared-memory plan: the offsets and sizes of every region (main
//! vector, reduction scratch, resident residual, prepared quantized input, stage slots),
//! the switches that depend on what fits (stage_ahead, attn_own's fast path), and the
//! sizes the host reads.
#pragma once
#include "schedule.cuh"
#include "ops/attend_own.cuh"
#include "ops/attention.cuh"
#include "ops/qmatvec.cuh"
#include "ops/select.cuh"

// ---- shared memory -------------------------------------------------------------

__host__ __device__ constexpr int cmax(int a, int b) { return a > b ? a : b; }
/// The normalised input vector of a matrix phase (the LM head's: every lane's h under a `lane` head).
constexpr int VEC_FLOATS = cmax(cmax(LM_K, QD), F);
/// Attention: q, k, v of the current position plus the lane groups' partial states.
constexpr int ATTN_BASE_FLOATS = 3 * HD + attn_scratch_floats<THREADS, HD>();
/// tagged: the head's output, 16-byte aligned after the attention scratch.
constexpr int ATTN_OUT = (ATTN_BASE_FLOATS + 3) / 4 * 4;
constexpr int ATTN_FLOATS = TAGGED ? ATTN_OUT + HD : ATTN_BASE_FLOATS;
/// Positions one block scores per pass of loads (the split size to aim for).
constexpr int ATTN_PASS = AttnShape<THREADS, HD>::PER_PASS;
constexpr int SAMPLE_TOP_FLOATS = 2 * PG_MAX_TOP + 4;
constexpr int SELECT_FLOATS = (int)(sizeof(SelectSmem) / sizeof(float)) + SAMPLE_TOP_FLOATS;
__host__ __device__ constexpr int align4(int n) { return (n + 3) / 4 * 4; }
constexpr int MAIN_FLOATS = cmax(cmax(VEC_FLOATS, ATTN_FLOATS), SELECT_FLOATS);
/// Reduction scratch after the main region (one float per warp, LM stats per warp).
constexpr int RED_FLOATS = 8 * WARPS;
/// resid_smem: the residual the current layer's o / down epilogues add to.
constexpr int RESID_OFF = align4(MAIN_FLOATS + RED_FLOATS);
constexpr int RESID_FLOATS = RESID_SMEM ? D : 0;
/// stage: one slot per warp, sized for the largest K of the staged phases.
template <int K>
using Stage = RowStage<K, NR, STAGE_CAP>;
constexpr int STAGE_WORDS = STAGE ? cmax(cmax(Stage<D>::WORDS, Stage<QD>::WORDS), Stage<F>::WORDS) : 0;
/// Quantized models: the matrix phases' input prepared as integer chunks (ops/qdot.cuh).
constexpr int XQ_OFF = align4(RESID_OFF + RESID_FLOATS);
constexpr int XQ_FLOATS = QUANT ? xq_bytes(VEC_FLOATS) / 4 : 0;
constexpr int STAGE_OFF = align4(XQ_OFF + XQ_FLOATS);
/// Staging ahead: a second set of slots, so each matrix phase starts the copy of the
/// *next* matrix phase's first row group (QKV and gate/up in set A, o and down in set
/// B; layer l's down stages layer l+1's q/k/v) before waiting on its own inputs: the
/// copy gets a whole phase more to land. Only where every staged row fits its slot (the
/// pending-group count of a ring would mix with the next stage's) and both sets fit in
/// shared memory; elsewhere the kernel stages one phase at a time.
/// Set A holds q/k/v, gate/up and attention's staged k/v; set B the o and down rows.
constexpr bool ROWS_FIT = Stage<D>::ITERS <= Stage<D>::N && Stage<QD>::ITERS <= Stage<QD>::N && Stage<F>::ITERS <= Stage<F>::N;
constexpr int A_WORDS = cmax(Stage<D>::WORDS, (attn_stage_words<THREADS, HD>() + WARPS - 1) / WARPS);
constexpr int B_WORDS = cmax(Stage<QD>::WORDS, Stage<F>::WORDS);
constexpr bool AHEAD = STAGE && ROWS_FIT && STAGE_OFF * 4 + WARPS * (A_WORDS + B_WORDS) * 16 <= PG_AHEAD_SMEM_BYTES;
/// With AHEAD, the q/k/v and gate/up phases start the next phase's copy after their own
/// input has arrived instead of before their wait, so the polls of that wait do not
/// queue behind every SM's weight copies; the o phase (whose wait on attention is long)
/// and the down phase start it before their waits.
constexpr bool LATE_QKV = AHEAD, LATE_GU = AHEAD;
/// uint4 words per warp of set A (the only set without stage_ahead) and the whole staging region.
constexpr int SLOT_WORDS = AHEAD ? A_WORDS : STAGE_WORDS;
constexpr int STAGE_REGION_WORDS = AHEAD ? WARPS * (A_WORDS + B_WORDS) : WARPS * STAGE_WORDS;
/// stage: attention stages its first pass of cached k/v in set A's slots when they hold it.
constexpr bool ATTN_STAGE = STAGE && attn_stage_words<THREADS, HD>() <= WARPS * SLOT_WORDS;
/// attn_own (PG_ATTN_OWN; one GPU with staging ahead, tensor parallelism where a rank
/// has few heads, layout.rs): the last PG_ATTN_OWN · NH blocks run attention only and the layers'
/// matrix phases hand their row groups to the others (row_grid): attention's blocks then
/// own no q/k/v rows and are polling when q/k/v land. The LM head still uses every
/// block. Splits per head are capped by the blocks reserved.
constexpr int ATTN_OWN = (AHEAD && !IS_TP) || (IS_TP && STAGE) ? PG_ATTN_OWN * NH : 0;
/// attn_own with one block per head: attend_own (every cached k/v row in shared memory)
/// for contexts up to OWN_MAX positions; longer contexts spread their attention over
/// every block as without attn_own (flash-decoding splits). The block's stage region
/// holds OWN_CAP rows of k and of v.
constexpr bool OWN_FAST = ATTN_OWN == NH && HD % 64 == 0 && THREADS >= 2 * HD;
constexpr int OWN_CAP = STAGE_REGION_WORDS / (2 * (HD / 8));
constexpr int OWN_MAX = OWN_CAP + 1 < OwnAttn<THREADS, HD>::MAX_N ? OWN_CAP + 1 : OwnAttn<THREADS, HD>::MAX_N;
static_assert(!OWN_FAST || (OWN_CAP > 0 && OwnAttn<THREADS, HD>::SCRATCH <= attn_scratch_floats<THREADS, HD>()),
              "attend_own's stage and scratch fit");
/// Commit groups the next phase's stage leaves in flight while a phase reads its own (0 without stage_ahead).
constexpr int N_QKV = AHEAD ? Stage<D>::N : 0, N_O = AHEAD ? Stage<QD>::N : 0, N_GU = AHEAD ? Stage<D>::N : 0,
              N_DOWN = AHEAD ? Stage<F>::N : 0;
/// Models with Q8_0 matrices and no stage_ahead: the rest of the shared-memory budget
/// extends the one stage set, so a Q8_0 phase stages longer rows and its ring has more
/// room (ops/qmatvec.cuh, q_slot).
constexpr int QSTAGE_EXTRA_WORDS =
    q_enabled(QF_Q8_0) && STAGE && !AHEAD ? cmax(0, (PG_AHEAD_SMEM_BYTES - (STAGE_OFF + STAGE_REGION_WORDS * 4) * 4) / 16) : 0;
/// Bytes of stage set A (q/k/v, gate/up; every phase without stage_ahead) and set B (o, down).
constexpr int SET_A_BYTES = (AHEAD ? WARPS * A_WORDS : STAGE_REGION_WORDS + QSTAGE_EXTRA_WORDS) * 16;
constexpr int SET_B_BYTES = AHEAD ? WARPS * B_WORDS * 16 : SET_A_BYTES;
constexpr int SMEM_FLOATS = STAGE_OFF + (STAGE_REGION_WORDS + QSTAGE_EXTRA_WORDS) * 4;

/// Read by the host (cuModuleGetGlobal) so the sizes exist only here.
extern "C" __constant__ u32 pg_smem_bytes = SMEM_FLOATS * sizeof(float);
extern "C" __constant__ u32 pg_num_counters = L * PHASES + STEP_COUNTERS + L * NH;
/// Floats each block writes for the sampler (packed LmStats).
extern "C" __constant__ u32 pg_partial_floats = 4;
/// Words of each rank's exchange region and floats of its receive slots (0 without TP).
extern "C" __constant__ u32 pg_exchange_words = IS_TP ? X_WORDS : 0;
extern "C" __constant__ u32 pg_rx_floats = IS_TP ? RX_FLOATS : 0;
/// u64 words of the tagged buffer (0 under TP; layout::tagged_words allocates it).
extern "C" __constant__ u32 pg_tagged_words = TAGGED ? L * T_LAYER : 0;
/// Events of one block's trace record (PG_TRACE; ops/trace.cuh, cuda/trace.rs).
extern "C" __constant__ u32 pg_trace_events = TRACE_EVENTS;
