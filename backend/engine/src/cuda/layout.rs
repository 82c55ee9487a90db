//! Everything the host and the decode kernel must agree on, defined once here and
//! handed to NVRTC as `-D` defines: the model's shape, kernel variants, argument
//! slots, per-layer weight slots, the token ring's record layout and the host
//! control words. The kernel (kernels/decode.cu) only ever names these defines.

use crate::config::{ModelConfig, RopeLayout};
use crate::dtp::{Combine, DtpSchedule, ShardPlan};
use crate::sampling::MAX_TOP_LOGPROBS;

/// Declares an enum of consecutive slots plus their names, for `PG_<PREFIX>_<NAME>`.
macro_rules! slots {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $v:ident),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name { $($(#[$vdoc])* $v),* }
        impl $name {
            /// Every slot, in slot order.
            pub const ALL: &'static [$name] = &[$($name::$v),*];
            /// Slot names as written in Rust (CamelCase).
            pub const NAMES: &'static [&'static str] = &[$(stringify!($v)),*];
            /// Number of slots.
            pub const COUNT: usize = Self::ALL.len();
            /// This slot's index.
            pub fn index(self) -> usize { self as usize }
        }
    };
}

slots! {
    /// Kernel argument slots: one u64 each (pointers, integers, or f32 bits).
    Arg {
        /// Device array of `num_layers × LayerSlot::COUNT` weight pointers.
        Layers, Embed, LmHead, FinalNorm, InvFreq,
        Kv, X, Qkv, Attn,
        /// Split attention's partial states: `[heads × attn_max_splits × (head_dim + 2)]` f32.
        AttnPart,
        Act, Logits, Adj, Partials, Counters, Tokens, Seen,
        /// `[runs × vocab]` f32 of raw logits per LM-head run, or 0 (off).
        DebugLogits,
        StopIds,
        /// Device view of the host-mapped token ring.
        Ring,
        /// Device view of the host-mapped control words.
        HostCtl,
        NPrompt, MaxTokens,
        /// 1: run the prompt only, LM head at every position, no sampling (scoring).
        ScoreMode,
        /// First step the kernel runs: 0, or P-1 when the batched prefill (prefill.cu)
        /// already wrote positions 0..P-2 into the KV cache.
        StartStep,
        NStop, TopLogprobs, RepetitionPenalty, Temperature, TopK, TopP, MinP, Seed,
        /// Tensor parallelism: this launch's rank (0 ≤ rank < tp).
        Rank,
        /// Tensor parallelism: device array of `tp × PeerSlot::COUNT` pointers (every rank's buffers).
        Peers,
        /// Tensor parallelism: f32 `[hidden]`, the residual entering attention.
        Resid,
        /// Tensor parallelism: 1 when every rank needs every rank's logits (sampling, top log-probs).
        Gather,
        /// `fuse_o`: f32 `[heads × hidden]`, each head's o-projection partial (kernels/ops/oproj.cuh).
        OPart,
        /// `trace`: u64 `[grid × pg_trace_events × TRACE_WORDS_PER_EVENT]` stamps (zeroed per run), or 0 (off).
        Trace,
        /// `fuse_down`: i64 `[2 × layers × hidden]` fixed-point down-projection sums (zeroed per run).
        DownAcc,
        /// `trace`: the step whose phases are stamped.
        TraceStep,
        /// `tagged`: u64 `[layers × tagged_layer_words]` tagged words (zeroed per run; [`tagged_words`]).
        Tagged,
    }
}

slots! {
    /// Per-rank buffers every rank of a tensor-parallel run writes into (peer table).
    PeerSlot {
        /// The rank's exchange region (`pg_exchange_words` u32: counters, LM messages, DTP's final h).
        Exchange,
        /// The rank's receive slots (`pg_rx_floats` f32, sentinel-filled per run): partial sums from every rank.
        Rx,
        /// The rank's f32 `[vocab]` raw logits.
        Logits,
        /// The rank's f32 `[vocab]` penalised logits.
        Adj,
    }
}

slots! {
    /// Per-layer weight pointers (bf16 matrices `[out, in]`, f32 norms and biases).
    LayerSlot {
        /// q, k, v rows stacked: `[(heads + 2·kv_heads)·head_dim, hidden]`.
        Wqkv,
        /// f32 `[q+k+v rows]`, or 0 without attention bias.
        QkvBias,
        /// `[hidden, heads·head_dim]` row-major. With `fuse_o` the attention block of head h
        /// reads its slice in place: row r's columns h·head_dim .. (h+1)·head_dim are one
        /// contiguous run of head_dim bf16 (a whole 128-byte line at head_dim 64), so the
        /// strided read streams like a copy and no re-laid copy is uploaded
        /// ([`o_head_slice_index`] is the index the kernel uses).
        Wo,
        /// gate and up rows interleaved: row 2j = gate_j, row 2j+1 = up_j.
        WgateUp,
        Wdown, AttnNorm, FfnNorm,
    }
}

/// Word offsets of one token record in the host ring.
pub mod rec {
    use super::MAX_TOP_LOGPROBS;
    pub const ID: usize = 0;
    /// f32 bits: log-softmax of the raw logits at the chosen id.
    pub const LOGPROB: usize = 1;
    pub const NTOP: usize = 2;
    /// GPU global timer (ns) when the token was published, low and high word.
    pub const TIME_LO: usize = 3;
    pub const TIME_HI: usize = 4;
    pub const TOP_IDS: usize = 8;
    pub const TOP_LPS: usize = TOP_IDS + MAX_TOP_LOGPROBS;
    pub const WORDS: usize = TOP_LPS + MAX_TOP_LOGPROBS;
}

/// Word offsets of the host control block (before the ring in the same mapping).
pub mod ctl {
    /// Device → host: records published so far.
    pub const PUBLISHED: usize = 0;
    /// Device → host: 1 once the run ended (after REASON).
    pub const DONE: usize = 1;
    /// Device → host: one of `end::*`.
    pub const REASON: usize = 2;
    /// Host → device: non-zero asks the kernel to stop after the current token.
    pub const STOP: usize = 3;
    /// Host → device: records the host has read (ring back-pressure).
    pub const CONSUMED: usize = 4;
    /// Words reserved for the control block (a 32-byte line).
    pub const WORDS: usize = 8;
}

/// Why the kernel ended a run (`ctl::REASON`).
pub mod end {
    pub const LENGTH: u32 = 1;
    pub const STOP_TOKEN: u32 = 2;
    pub const STOPPED: u32 = 3;
}

/// Threads per block of the persistent kernel (16 warps: 8 KB of 16-byte loads in
/// flight per SM per unrolled load step).
pub const DEFAULT_THREADS: u32 = 512;
/// Rows a warp streams together (even: gate/up rows come in pairs).
pub const DEFAULT_ROWS_PER_WARP: u32 = 2;
/// 16-byte loads per lane per row in flight.
pub const DEFAULT_UNROLL: u32 = 4;
/// Records in the host ring before the kernel waits for the host.
pub const DEFAULT_RING: usize = 1024;
/// Stop tokens the kernel checks itself (more are checked by the host).
pub const MAX_DEVICE_STOP_TOKENS: usize = 16;
/// Most blocks one attention head is split over (flash-decoding).
pub const DEFAULT_ATTN_MAX_SPLITS: u32 = 16;
/// KV-cache positions allocated when the model's context is longer.
pub const DEFAULT_MAX_KV_POSITIONS: usize = 16_384;
/// Prompt positions the batched prefill runs per chunk (bounds its activation buffers:
/// ~70 MB for the ≤ 2B benchmark shapes).
pub const DEFAULT_PREFILL_CHUNK: usize = 1024;
/// Threads per block of the prefill's per-row kernels (embedding, RMSNorm, RoPE, SwiGLU).
pub const PREFILL_ROW_THREADS: u32 = 256;
/// Threads per block of the prefill's attention kernel.
pub const PREFILL_ATTN_THREADS: u32 = 128;
/// Lanes that split each tile's keys per query in the prefill attention (CUDA-core kernel).
pub const PREFILL_KEY_SPLIT: u32 = 4;
/// Keys per shared-memory tile of the tensor-core prefill attention.
pub const PREFILL_MMA_KEY_TILE: u32 = 64;
/// Queries per warp of the tensor-core prefill attention (one m16n8k16 row block).
pub const PREFILL_MMA_WARP_QUERIES: u32 = 16;
/// Environment variable: `tokens` runs the prompt token by token inside the persistent
/// kernel (the pre-prefill path, kept as a cross-check); anything else, or unset, batches it.
pub const PREFILL_ENV: &str = "PEREGRINE_PREFILL";

/// Steps after the prompt's last position at which `KernelOptions::trace` stamps the
/// phases (the step after it is stamped too, for its step-start wait): past the first
/// generated tokens, with a KV cache as long as a short prompt's.
pub const TRACE_AFTER_PROMPT: usize = 8;

/// Element index in the row-major `[d, heads·hd]` W_o of row `r`, column `c` of head
/// `h`'s slice (`fuse_o`'s o-projection in the attention tail, kernels/ops/oproj.cuh:
/// `wo + h·HD + sl·8 + r·QD`).
pub fn o_head_slice_index(heads: usize, hd: usize, h: usize, r: usize, c: usize) -> usize {
    r * heads * hd + h * hd + c
}

/// Kernel variants and sizes chosen at load time.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelOptions {
    pub threads: u32,
    pub rows_per_warp: u32,
    pub unroll: u32,
    /// Prefetch each phase's first weight lines into L2 before waiting on its inputs (with
    /// `fuse_o`, the attention block also prefetches its head's W_o slice).
    pub prefetch: bool,
    /// Race hunting: random delays in the dependency waits of random blocks.
    pub chaos: bool,
    /// Tensor parallelism: the one rank whose kernel gets the chaos delays.
    pub chaos_rank: u32,
    /// Counter arrive/wait with release/acquire only (CUTLASS's barrier), without a
    /// full fence.sc.gpu on each side (v1 had it).
    pub light_fences: bool,
    /// Split each head's attention over up to this many blocks (1 = one block per head).
    pub attn_max_splits: u32,
    /// KV-cache positions (prompt + generated tokens per request).
    pub kv_positions: usize,
    /// Host ring records.
    pub ring: usize,
    /// Run prompt positions 0..P-2 as a batch (cuBLAS GEMMs + prefill.cu) before the
    /// persistent kernel, which then starts at P-1; off: every prompt token is a step of
    /// the persistent kernel. Scoring always uses the per-token path.
    pub batched_prefill: bool,
    /// Prompt positions per prefill chunk.
    pub prefill_chunk: usize,
    /// Prefill attention on the tensor cores (mma.sync, FlashAttention-2 layout) where
    /// the shape allows it (`PrefillShape::mma`); off: the CUDA-core kernel.
    pub prefill_mma_attention: bool,
    /// Phase trace (PG_TRACE): global-timer and SM-clock stamps at every dependency wait
    /// and arrival of one step ([`TRACE_AFTER_PROMPT`]), read back after the run
    /// (`CudaRuntime::last_trace`). Off by default.
    pub trace: bool,
    /// O-projection fused into the attention item's tail as per-head partials the gate/up
    /// phase sums on load (PG_FUSE_O): one dependent phase less per layer. One GPU only
    /// ([`unsupported_tp`]). Off by default.
    pub fuse_o: bool,
    /// Each warp starts copying its first row group of a matrix phase into shared memory
    /// (cp.async, up to this many 16-byte words per lane per row) before the phase's
    /// dependency wait and reads it from there after it (PG_STAGE_ITERS,
    /// kernels/ops/matvec.cuh `RowStage`): the weights never depend on the data, so the
    /// group's DRAM round trip overlaps the wait. Bit-identical results; composes with
    /// `fuse_o` and tensor parallelism (rank-local weights). 0 = off (the default).
    pub stage_iters: u32,
    /// One GPU: the o- and down-projection epilogues add to the residual the block holds
    /// in shared memory from its previous phase instead of re-reading it from L2
    /// (PG_RESID_SMEM). Bit-identical results. Ignored under tensor parallelism (the
    /// residual moves with the exchange there).
    pub resid_smem: bool,
    /// Rows per warp group of the LM head (PG_LM_NR): more loads in flight per lane on
    /// small hidden sizes. Any value ≥ 1; the logits are bit-identical for every value.
    pub lm_rows_per_warp: u32,
    /// The down-projection folded into the gate/up phase as per-block partials summed by
    /// fixed-point 64-bit atomics (exact, order-independent; kernels/ops/fused_down.cuh):
    /// one dependent phase less per layer (PG_FUSE_DOWN). One GPU, not with `fuse_o`;
    /// needs intermediate_size divisible by the warps per block. Off by default.
    pub fuse_down: bool,
    /// Phases publish their vectors as tagged words (value and step tag in one 64-bit
    /// store) that consumers poll directly, instead of arriving on a phase counter
    /// (PG_TAGGED, kernels/ops/tagged.cuh): no release fence and no counter round trip
    /// between dependent phases; the norm weights and rope angles are read before the
    /// waits. Bit-identical results. Not with `fuse_o` or `fuse_down`. The one-GPU
    /// kernel's scheduling: under tensor parallelism the kernel keeps its counters
    /// ([`tagged_for`]). On by default (v5).
    pub tagged: bool,
    /// With staging, each matrix phase also starts copying the next matrix phase's first
    /// row group (a second set of shared-memory slots) before its own wait, so that copy
    /// has a whole phase more to land (PG_STAGE_AHEAD, decode.cu `AHEAD`). Applies where
    /// every staged row fits its slot and both slot sets fit in shared memory, without
    /// `fuse_o` / `fuse_down`; elsewhere the kernel stages as without it. Bit-identical
    /// results. On by default (v5).
    pub stage_ahead: bool,
    /// With `stage_ahead`: the q/k/v, gate/up and down phases start the next phase's copy
    /// once their own input has arrived, not before their wait (PG_AHEAD_LATE, decode.cu
    /// `AHEAD_LATE`), so the wait's polls do not queue behind every SM's weight copies.
    /// A mask of those phases (1 q/k/v, 2 gate/up, 4 down, 8 o); 0 = every phase starts
    /// it before its wait. Bit-identical results. 3 by default (v7: q/k/v and gate/up late).
    pub ahead_late: u32,
    /// With `tagged` and `stage_ahead` on one GPU: the last `attn_own` × heads blocks run
    /// attention only and the layers' matrix rows go to the other blocks (PG_ATTN_OWN,
    /// decode.cu `row_grid`); splits per head are capped by the blocks reserved. With 1
    /// (one block per head) and head_dim a multiple of 64, those blocks keep the head's
    /// whole cached k/v in shared memory and run ops/attend_own.cuh up to a context of
    /// OWN_MAX positions (every block attends past it, as with 0). 1 by default (v6);
    /// not bit-identical with 0 (another summation order).
    pub attn_own: u32,
    /// Tensor parallelism: staging ahead also where a staged row is longer than its slot
    /// (a ring) and where a phase has several row groups per warp (its first group is
    /// staged), with at most 6 iterations per slot so both slot sets fit (PG_TP_AHEAD,
    /// decode.cu `TP_AHEAD`). The rows of the TP shapes never fit `ROWS_FIT`, so without
    /// it their layers stage one phase at a time. Bit-identical results (the same sums,
    /// read from shared memory earlier). No effect on one GPU. Off by default: measured
    /// slower at TP 2 (Qwen2.5-Coder-1.5B 1,164 → 1,113 tok/s; perf-notes "tp_ahead").
    pub tp_ahead: bool,
    /// Tensor parallelism: `attn_own` there too (the last heads-per-rank blocks run
    /// attention only, attend_own with the head's cache in shared memory; the matrix
    /// phases use the other blocks), where a rank has at most [`TP_OWN_MAX_HEADS`] query
    /// heads (PG_ATTN_OWN under TP, with staging). On by default (v8): Qwen2.5-Coder-1.5B
    /// TP 2 (6 heads per rank) 1,163 → 1,214 tok/s; SmolLM2-1.7B (16) lost 3.3 % with it,
    /// so it stays off there (perf-notes "tp_attn_own").
    pub tp_attn_own: bool,
    /// One GPU: weight loads and copies carry an L2 evict-first policy
    /// (PG_WEIGHT_EVICT_FIRST, common.cuh `ld_weight16`), so the token's weight stream
    /// (larger than L2, read once) does not push what is reused (KV cache, residuals,
    /// norms) out of L2. Bit-identical. On by default (v9): SmolLM2-135M +1.4 %,
    /// Llama-3.2-1B +2.4 %, Qwen2.5-Coder-1.5B +2.3 % (perf-notes "Session 9: weights
    /// evict first").
    pub weights_evict_first: bool,
    /// The same under tensor parallelism. Off by default until it is measured on two
    /// GPUs (the 2×H200 host was not lent when it was found); gpu_check modifier `tp-evict`.
    pub tp_weights_evict_first: bool,
    /// The down phase sums its rows segment by segment of the activations as they land
    /// (PG_DOWN_WAVES, decode.cu `DOWN_WAVES`; one GPU with `tagged`, and under tensor
    /// parallelism, where gate/up then publishes the rank-local activations as tagged
    /// words): the block's warps without a down row poll each segment into shared memory
    /// and release it to the row warps on a named barrier, so the wait for gate/up's
    /// last round overlaps the stream of the earlier segments. Bit-identical. On by
    /// default on one GPU (v10; gpu_check modifier `waves`).
    pub down_waves: bool,
    /// The same under tensor parallelism. Off by default until it is measured on two
    /// GPUs; gpu_check modifier `tp-waves`.
    pub tp_down_waves: bool,
}

/// `tp_attn_own` reserves one block per query head of a rank: measured a gain with 6 heads
/// per rank (Qwen2.5-Coder-1.5B at TP 2, 4.5 % of the blocks), a loss with 16 (12 %).
pub const TP_OWN_MAX_HEADS: usize = 8;

/// Environment switch for benchmarking against the previous kernels: `v9` turns off the
/// session-10 default (the down phase streaming while its input lands, one GPU), `v8` also the
/// session-9 one (weights loaded evict-first on one GPU), `v7` also the session-7 default (attention on blocks of its own under tensor parallelism), `v6` also the session-6 default (the next phase's weight copy after the wake), `v5` also the
/// session-5 one (attention on blocks of its own), `v4` also the session-4 ones
/// (tagged phase outputs, staging ahead), `v3` also the session-3 ones (staging,
/// residual in shared memory, 4-row LM head).
pub const KERNEL_ENV: &str = "PEREGRINE_KERNEL";

/// `KernelOptions::ahead_late` by default: q/k/v and gate/up start the next phase's copy late,
/// down and o before their waits (measured 1.3 % faster than 7 and race-checked: perf-notes "v7").
pub const AHEAD_LATE_DEFAULT: u32 = 3;

/// Staged 16-byte words per lane per row by default (a whole row up to K = 2048 at 2 rows per warp).
pub const DEFAULT_STAGE_ITERS: u32 = 8;
/// LM-head rows per warp group by default.
pub const DEFAULT_LM_ROWS_PER_WARP: u32 = 4;

/// A kernel version's name and the options that make it.
type NamedKernel = (&'static str, fn() -> KernelOptions);

impl KernelOptions {
    /// v3's settings (session 2's default kernel): no staging, residual re-read from L2,
    /// 2-row LM head. Kept for comparisons (`PEREGRINE_KERNEL=v3`, `gpu_check ... v3`).
    pub fn v3() -> Self {
        KernelOptions { stage_iters: 0, resid_smem: false, lm_rows_per_warp: DEFAULT_ROWS_PER_WARP, ..Self::v4() }
    }

    /// v4's settings (session 3's default kernel): phase counters, staging one phase at a
    /// time. Kept for comparisons (`PEREGRINE_KERNEL=v4`, `gpu_check ... v4`).
    pub fn v4() -> Self {
        KernelOptions { tagged: false, stage_ahead: false, ..Self::v5() }
    }

    /// v6's settings (session 5's default kernel): each matrix phase starts the next
    /// phase's weight copy before its own wait. Kept for comparisons
    /// (`PEREGRINE_KERNEL=v6`, `gpu_check ... v6`).
    pub fn v6() -> Self {
        KernelOptions { ahead_late: 0, ..Self::v7() }
    }

    /// v7's settings (session 6's default kernel with session 7's late mask): under tensor
    /// parallelism attention runs on every block. Kept for comparisons
    /// (`PEREGRINE_KERNEL=v7`, `gpu_check ... v7`); on one GPU the same kernel as v8.
    pub fn v7() -> Self {
        KernelOptions { tp_attn_own: false, ..Self::v8() }
    }

    /// v8's settings (sessions 7–8's default kernel): weights loaded with the default L2
    /// policy. Kept for comparisons (`PEREGRINE_KERNEL=v8`, `gpu_check ... v8`); under
    /// tensor parallelism the same kernel as v9.
    pub fn v8() -> Self {
        KernelOptions { weights_evict_first: false, ..Self::v9() }
    }

    /// v5's settings (session 4's default kernel): attention spread over every block.
    /// Kept for comparisons (`PEREGRINE_KERNEL=v5`, `gpu_check ... v5`).
    pub fn v5() -> Self {
        KernelOptions { attn_own: 0, ..Self::v6() }
    }

    /// v9's settings (session 9's default kernel): the down phase waits for all of its
    /// input before it streams. Kept for comparisons (`PEREGRINE_KERNEL=v9`,
    /// `gpu_check ... v9`); under tensor parallelism the same kernel as v10.
    pub fn v9() -> Self {
        KernelOptions { down_waves: false, ..Self::current() }
    }

    /// The named kernels, newest first: `PEREGRINE_KERNEL` picks among them and
    /// [`Self::summary`] names options after the closest one.
    const NAMED: [NamedKernel; 8] = [
        ("v10", Self::current),
        ("v9", Self::v9),
        ("v8", Self::v8),
        ("v7", Self::v7),
        ("v6", Self::v6),
        ("v5", Self::v5),
        ("v4", Self::v4),
        ("v3", Self::v3),
    ];

    /// A short form for logs: the named kernel these options are closest to, then the
    /// fields that differ from it, e.g. `v10 + threads: 448, kv_positions: 2048` (the
    /// whole Debug form is ~30 fields, too long for a load line).
    pub fn summary(&self) -> String {
        // Pretty Debug puts one scalar field per line, in declaration order on both sides.
        let fields = |o: &Self| format!("{o:#?}").lines().map(|l| l.trim().trim_end_matches(',').to_string()).collect::<Vec<_>>();
        let mine = fields(self);
        let differing = |base: Self| mine.iter().zip(fields(&base)).filter(|(a, b)| **a != *b).map(|(a, _)| a.clone()).collect::<Vec<_>>();
        let (name, diff) = Self::NAMED.iter().map(|(n, make)| (*n, differing(make()))).min_by_key(|(_, d)| d.len()).expect("named kernels");
        if diff.is_empty() {
            name.to_string()
        } else {
            format!("{name} + {}", diff.join(", "))
        }
    }

    fn current() -> Self {
        KernelOptions {
            threads: DEFAULT_THREADS,
            rows_per_warp: DEFAULT_ROWS_PER_WARP,
            unroll: DEFAULT_UNROLL,
            prefetch: false,
            chaos: false,
            chaos_rank: 0,
            light_fences: true,
            attn_max_splits: DEFAULT_ATTN_MAX_SPLITS,
            kv_positions: DEFAULT_MAX_KV_POSITIONS,
            ring: DEFAULT_RING,
            batched_prefill: std::env::var(PREFILL_ENV).map_or(true, |v| v != "tokens"),
            prefill_chunk: DEFAULT_PREFILL_CHUNK,
            prefill_mma_attention: true,
            trace: false,
            fuse_o: false,
            stage_iters: DEFAULT_STAGE_ITERS,
            resid_smem: true,
            lm_rows_per_warp: DEFAULT_LM_ROWS_PER_WARP,
            fuse_down: false,
            tagged: true,
            stage_ahead: true,
            ahead_late: AHEAD_LATE_DEFAULT,
            attn_own: 1,
            tp_ahead: false,
            tp_attn_own: true,
            weights_evict_first: true,
            tp_weights_evict_first: false,
            down_waves: true,
            tp_down_waves: false,
        }
    }
}

impl Default for KernelOptions {
    /// The current kernel (v10, measured fastest, docs/perf-notes.md), or an earlier one with `PEREGRINE_KERNEL=v3` … `v9`.
    fn default() -> Self {
        let wanted = std::env::var(KERNEL_ENV).unwrap_or_default();
        Self::NAMED.iter().find(|(name, _)| *name == wanted).map_or_else(Self::current, |(_, make)| make())
    }
}

/// How the prefill attention splits one query's work over a lane group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefillShape {
    /// Lanes splitting the head's dimensions (4-float chunks dealt round-robin).
    pub dim_lanes: u32,
    /// Lanes splitting each key tile.
    pub key_lanes: u32,
    /// Keys per shared-memory tile.
    pub key_tile: u32,
    /// Queries per attention block.
    pub queries_per_block: u32,
    /// The tensor-core kernel exists for this shape (head_dim a multiple of 16, ≤ 128:
    /// its K and transposed V tiles fit 48 KB of static shared memory).
    pub mma: bool,
    /// Queries per block of the tensor-core kernel.
    pub mma_queries_per_block: u32,
}

/// The prefill attention's split for `config`, or why the batched prefill cannot run
/// it (the runtime then uses the per-token path).
pub fn prefill_shape(config: &ModelConfig) -> std::result::Result<PrefillShape, String> {
    let hd = config.head_dim as u32;
    // Each dim lane holds ≤ 64 floats of q and of the accumulator in registers.
    let dim_lanes = [1u32, 2, 4].into_iter().find(|&t| hd.is_multiple_of(4 * t) && hd / t <= 64);
    let Some(dim_lanes) = dim_lanes else {
        return Err(format!("head_dim {hd} does not split into ≤ 4 lanes of ≤ 64 dims in 4-float chunks"));
    };
    let key_lanes = PREFILL_KEY_SPLIT;
    // Two f32 tiles (K and V) of key_tile × (hd + pad) stay under 48 KB of static shared memory.
    let key_tile = if hd <= 128 { 32 } else { 16 };
    Ok(PrefillShape {
        dim_lanes,
        key_lanes,
        key_tile,
        queries_per_block: PREFILL_ATTN_THREADS / (dim_lanes * key_lanes),
        mma: hd.is_multiple_of(16) && hd <= 128,
        mma_queries_per_block: PREFILL_ATTN_THREADS / 32 * PREFILL_MMA_WARP_QUERIES,
    })
}

/// `LmHead` → `LM_HEAD`.
fn screaming(name: &str) -> String {
    let mut out = String::new();
    for (i, ch) in name.chars().enumerate() {
        if ch.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(ch.to_ascii_uppercase());
    }
    out
}

/// Largest tensor-parallel degree (the kernel keeps one pointer per rank in registers).
pub const MAX_TP: usize = 8;

/// This rank's shard of `config` under tensor parallelism of degree `tp`: its query
/// heads, KV heads (replicated when `tp` exceeds them), FFN columns and vocabulary
/// rows; hidden size, layers and head size stay whole. The split itself is
/// [`ShardPlan`]'s (shared with the CPU reference); on top of it the kernel needs
/// every rank's shard to be the same shape (one compiled kernel): the vocabulary must
/// divide by `tp` and each rank's FFN slice be whole 16-byte rows. An error names what
/// does not divide.
pub fn shard(config: &ModelConfig, tp: usize) -> std::result::Result<ModelConfig, String> {
    let c = config;
    if tp == 0 || tp > MAX_TP {
        return Err(format!("tensor-parallel degree {tp} is not in 1..={MAX_TP}"));
    }
    let plan = ShardPlan::new(c, tp).map_err(|e| e.to_string())?;
    let name = &c.name;
    if !c.intermediate_size.is_multiple_of(8 * tp) {
        return Err(format!("{name}: FFN size {} does not split over {tp} GPUs in multiples of 8", c.intermediate_size));
    }
    if !c.vocab_size.is_multiple_of(tp) {
        return Err(format!("{name}: vocabulary {} does not split evenly over {tp} GPUs (the kernel needs equal shards)", c.vocab_size));
    }
    let lane = &plan.lanes[0];
    let (heads, kv) = (lane.q_heads.len(), lane.kv_heads.len());
    if !(heads * c.head_dim).is_multiple_of(8) {
        return Err(format!("{name}: {heads} query heads of {} per GPU are not whole 16-byte rows", c.head_dim));
    }
    Ok(ModelConfig { num_heads: heads, num_kv_heads: kv, intermediate_size: lane.ffn.len(), vocab_size: lane.vocab.len(), ..c.clone() })
}

/// u64 words of the `tagged` variant's buffer for `config` (one GPU): per layer q/k/v,
/// the attention output, the residual after o, the activations and the residual after
/// down (decode.cu's T_* offsets; the kernel's `pg_tagged_words` must equal it).
pub fn tagged_words(config: &ModelConfig) -> usize {
    let c = config;
    let qd = c.num_heads * c.head_dim;
    let qkv = qd + 2 * c.num_kv_heads * c.head_dim;
    c.num_layers * (qkv + qd + 2 * c.hidden_size + c.intermediate_size)
}

/// Whether the kernel of a run with tensor parallelism `tp` uses tagged phase outputs:
/// `options.tagged` on one GPU; under TP the ranks' kernels keep their phase counters
/// (the exchange with the peers is built on them).
pub fn tagged_for(options: &KernelOptions, tp: usize) -> bool {
    options.tagged && tp == 1
}

/// Whether the kernel writes the tagged buffer (so the host zeroes it per run): the
/// tagged kernel, or down_waves' activations under tensor parallelism.
pub fn tagged_words_used(options: &KernelOptions, tp: usize) -> bool {
    tagged_for(options, tp) || down_waves_for(options, tp)
}

/// Whether the kernel runs down_waves: `down_waves` on one GPU, `tp_down_waves` under
/// tensor parallelism.
pub fn down_waves_for(options: &KernelOptions, tp: usize) -> bool {
    if tp == 1 {
        options.down_waves
    } else {
        options.tp_down_waves
    }
}

/// Whether weights load evict-first: `weights_evict_first` on one GPU,
/// `tp_weights_evict_first` under tensor parallelism.
pub fn evict_first_for(options: &KernelOptions, tp: usize) -> bool {
    if tp == 1 {
        options.weights_evict_first
    } else {
        options.tp_weights_evict_first
    }
}

/// KV positions actually allocated for `config` under `options`.
pub fn kv_positions(config: &ModelConfig, options: &KernelOptions) -> usize {
    config.max_context.min(options.kv_positions).max(1)
}

/// How one layer's partial sums enter the residual in the kernel (`PG_XM_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XMode {
    /// Sum of every rank's partial, in rank order (standard TP; DTP's `present` early layers).
    All = 0,
    /// Own partial times the lane scale (DTP's `none` early layers).
    Local = 1,
    /// Own partial now plus the other lanes' partials of the received layer (DTP).
    Delayed = 2,
}

/// The kernel's per-layer exchange table: (mode, received layer or -1, send) for each
/// layer, from the DTP schedule (`None`: standard tensor parallelism, all-reduce everywhere).
pub fn exchange_table(num_layers: usize, dtp: Option<&DtpSchedule>) -> Vec<(XMode, i64, bool)> {
    (0..num_layers)
        .map(|n| match dtp.map(|s| s.combine(n)) {
            None => (XMode::All, -1, true),
            Some(Combine::AllReduce) => (XMode::All, -1, true),
            Some(Combine::LaneLocal { .. }) => (XMode::Local, -1, false),
            // Delay 0: received this very layer, i.e. a blocking all-reduce.
            Some(Combine::Delayed { received: Some(m), .. }) if m == n => (XMode::All, -1, true),
            Some(Combine::Delayed { received, send }) => (XMode::Delayed, received.map_or(-1, |m| m as i64), send),
        })
        .collect()
}

/// Every `-D` define the kernel needs, as `(name, value)` (one GPU).
pub fn defines(config: &ModelConfig, options: &KernelOptions) -> Vec<(String, String)> {
    defines_tp(config, options, 1, config.vocab_size, None)
}

/// The defines of one rank of a tensor-parallel run: `config` is that rank's
/// [`shard`], `full_vocab` the whole model's vocabulary, `dtp` the DTP schedule
/// (`None`: standard tensor parallelism).
pub fn defines_tp(
    config: &ModelConfig,
    options: &KernelOptions,
    tp: usize,
    full_vocab: usize,
    dtp: Option<&DtpSchedule>,
) -> Vec<(String, String)> {
    let mut d: Vec<(String, String)> = Vec::new();
    let mut put = |k: &str, v: String| d.push((format!("PG_{k}"), v));
    put("TP", tp.to_string());
    put("V_FULL", full_vocab.to_string());
    put("DTP", u8::from(dtp.is_some()).to_string());
    let scale = dtp.and_then(|s| s.kernel_defines().into_iter().find(|(k, _)| *k == "DTP_LANE_SCALE").map(|(_, v)| v));
    put("DTP_LANE_SCALE", scale.unwrap_or_else(|| "1.0f".into()));
    for (name, mode) in [("XM_ALL", XMode::All), ("XM_LOCAL", XMode::Local), ("XM_DELAYED", XMode::Delayed)] {
        put(name, (mode as u8).to_string());
    }
    let table = exchange_table(config.num_layers, dtp);
    let list = |f: &dyn Fn(&(XMode, i64, bool)) -> String| format!("{{{}}}", table.iter().map(f).collect::<Vec<_>>().join(","));
    put("X_MODE", list(&|t| (t.0 as u8).to_string()));
    put("X_RECV", list(&|t| t.1.to_string()));
    put("X_SEND", list(&|t| u8::from(t.2).to_string()));
    put("D", config.hidden_size.to_string());
    put("F", config.intermediate_size.to_string());
    put("L", config.num_layers.to_string());
    put("NH", config.num_heads.to_string());
    put("NKV", config.num_kv_heads.to_string());
    put("HD", config.head_dim.to_string());
    put("V", config.vocab_size.to_string());
    put("KV_CAP", kv_positions(config, options).to_string());
    // Rust prints the shortest string that round-trips the f32.
    put("EPS", format!("{:e}f", config.rms_norm_eps));
    put("ROPE_INTERLEAVED", u8::from(config.rope_layout == RopeLayout::Interleaved).to_string());
    put("QKV_BIAS", u8::from(config.attention_bias).to_string());
    put("THREADS", options.threads.to_string());
    put("NR", options.rows_per_warp.to_string());
    put("UNROLL", options.unroll.to_string());
    put("PREFETCH", u8::from(options.prefetch).to_string());
    put("LIGHT_FENCE", u8::from(options.light_fences).to_string());
    put("ATTN_MAX_SPLITS", options.attn_max_splits.to_string());
    put("TRACE", u8::from(options.trace).to_string());
    put("FUSE_O", u8::from(options.fuse_o).to_string());
    put("STAGE_ITERS", options.stage_iters.to_string());
    put("RESID_SMEM", u8::from(options.resid_smem).to_string());
    put("LM_NR", options.lm_rows_per_warp.to_string());
    put("FUSE_DOWN", u8::from(options.fuse_down).to_string());
    put("TAGGED", u8::from(tagged_for(options, tp)).to_string());
    put("STAGE_AHEAD", u8::from(options.stage_ahead).to_string());
    put("TP_AHEAD", u8::from(options.tp_ahead).to_string());
    put("WEIGHT_EVICT_FIRST", u8::from(evict_first_for(options, tp)).to_string());
    put("AHEAD_LATE", options.ahead_late.to_string());
    put("DOWN_WAVES", u8::from(down_waves_for(options, tp)).to_string());
    let own = tagged_for(options, tp) || (tp > 1 && options.tp_attn_own && options.stage_iters > 0 && config.num_heads <= TP_OWN_MAX_HEADS);
    put("ATTN_OWN", if own { options.attn_own } else { 0 }.to_string());
    if options.chaos {
        put("CHAOS", "1".into());
    }
    if let Ok(pf) = prefill_shape(config) {
        put("PF_TPQ", pf.dim_lanes.to_string());
        put("PF_KS", pf.key_lanes.to_string());
        put("PF_KT", pf.key_tile.to_string());
        put("PF_ATTN_THREADS", PREFILL_ATTN_THREADS.to_string());
        put("PF_ROW_THREADS", PREFILL_ROW_THREADS.to_string());
        put("PF_MMA", u8::from(pf.mma).to_string());
        put("PF_MMA_KT", PREFILL_MMA_KEY_TILE.to_string());
    }
    put("MAX_TOP", MAX_TOP_LOGPROBS.to_string());
    put("RING", options.ring.to_string());
    for (i, name) in Arg::NAMES.iter().enumerate() {
        put(&format!("ARG_{}", screaming(name)), i.to_string());
    }
    put("NUM_ARGS", Arg::COUNT.to_string());
    for (i, name) in LayerSlot::NAMES.iter().enumerate() {
        put(&format!("LW_{}", screaming(name)), i.to_string());
    }
    put("LW_SLOTS", LayerSlot::COUNT.to_string());
    for (i, name) in PeerSlot::NAMES.iter().enumerate() {
        put(&format!("PEER_{}", screaming(name)), i.to_string());
    }
    put("PEER_SLOTS", PeerSlot::COUNT.to_string());
    for (k, v) in [
        ("REC_ID", rec::ID),
        ("REC_LOGPROB", rec::LOGPROB),
        ("REC_NTOP", rec::NTOP),
        ("REC_TIME_LO", rec::TIME_LO),
        ("REC_TIME_HI", rec::TIME_HI),
        ("REC_TOP_IDS", rec::TOP_IDS),
        ("REC_TOP_LPS", rec::TOP_LPS),
        ("REC_WORDS", rec::WORDS),
        ("CTL_PUBLISHED", ctl::PUBLISHED),
        ("CTL_DONE", ctl::DONE),
        ("CTL_REASON", ctl::REASON),
        ("CTL_STOP", ctl::STOP),
        ("CTL_CONSUMED", ctl::CONSUMED),
    ] {
        put(k, v.to_string());
    }
    put("END_LENGTH", end::LENGTH.to_string());
    put("END_STOP_TOKEN", end::STOP_TOKEN.to_string());
    put("END_STOPPED", end::STOPPED.to_string());
    d
}

/// Variants that do not run under tensor parallelism of degree `tp`, as a message.
/// `fuse_o` under TP would need each rank's per-head partials exchanged (one receive
/// slot per head instead of per rank, and DTP's lane-local and delayed modes over
/// them); not built yet, so it is refused rather than silently run unfused.
pub fn unsupported_tp(options: &KernelOptions, tp: usize) -> Option<String> {
    let variant = if options.fuse_o { "fuse_o" } else { "fuse_down" };
    (tp > 1 && (options.fuse_o || options.fuse_down)).then(|| {
        format!("the {variant} kernel variant runs on one GPU only (tensor parallelism {tp} requested); turn {variant} off for --tp > 1")
    })
}

/// Shapes the kernel cannot run, as a message (checked before compiling).
pub fn unsupported(config: &ModelConfig, options: &KernelOptions) -> Option<String> {
    let c = config;
    let checks = [
        (!c.hidden_size.is_multiple_of(8), "hidden_size must be a multiple of 8".to_string()),
        (!c.intermediate_size.is_multiple_of(8), "intermediate_size must be a multiple of 8".to_string()),
        (!c.head_dim.is_multiple_of(8) || c.head_dim > 256, "head_dim must be a multiple of 8, at most 256".to_string()),
        (c.num_kv_heads == 0 || !c.num_heads.is_multiple_of(c.num_kv_heads), "num_heads must be a multiple of num_kv_heads".to_string()),
        (!(c.num_heads * c.head_dim).is_multiple_of(8), "num_heads × head_dim must be a multiple of 8".to_string()),
        (c.vocab_size >= u32::MAX as usize, "vocab_size too large".to_string()),
        (!options.threads.is_multiple_of(32) || (options.threads as usize) < c.head_dim, format!("threads {} invalid", options.threads)),
        (options.rows_per_warp == 0 || !options.rows_per_warp.is_multiple_of(2), "rows_per_warp must be even".to_string()),
        (options.lm_rows_per_warp == 0 || options.lm_rows_per_warp > 16, "lm_rows_per_warp must be 1 to 16".to_string()),
        (options.stage_iters > 16, "stage_iters must be at most 16".to_string()),
        (options.fuse_down && options.fuse_o, "fuse_down and fuse_o do not combine".to_string()),
        (options.tagged && (options.fuse_o || options.fuse_down), "tagged does not combine with fuse_o or fuse_down".to_string()),
        (
            options.fuse_down
                && (!options.threads.is_multiple_of(256) || !c.intermediate_size.is_multiple_of(options.threads as usize / 32)),
            "fuse_down needs a multiple of 256 threads and intermediate_size divisible by the warps per block".to_string(),
        ),
        (options.ring == 0, "ring must hold at least one record".to_string()),
        (options.attn_max_splits == 0, "attn_max_splits must be at least 1".to_string()),
        (options.prefill_chunk == 0, "prefill_chunk must be at least 1".to_string()),
    ];
    checks.into_iter().find(|(bad, _)| *bad).map(|(_, m)| m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_names_the_closest_kernel_and_what_differs() {
        assert_eq!(KernelOptions::current().summary(), "v10");
        assert_eq!(KernelOptions::v8().summary(), "v8");
        assert_eq!(KernelOptions::v3().summary(), "v3");
        let tuned = KernelOptions { threads: 448, kv_positions: 2048, ..KernelOptions::current() };
        assert_eq!(tuned.summary(), "v10 + threads: 448, kv_positions: 2048");
        let old = KernelOptions { chaos: true, ..KernelOptions::v9() };
        assert_eq!(old.summary(), "v9 + chaos: true");
    }

    #[test]
    fn names_become_screaming_snake() {
        assert_eq!(screaming("LmHead"), "LM_HEAD");
        assert_eq!(screaming("Wqkv"), "WQKV");
        assert_eq!(screaming("NPrompt"), "N_PROMPT");
    }

    #[test]
    fn shards_split_heads_ffn_and_vocab_or_say_why_not() {
        let qwen = crate::synthetic::preset("qwen2.5-coder-1.5b").expect("preset");
        let s2 = shard(&qwen, 2).expect("tp 2");
        assert_eq!((s2.num_heads, s2.num_kv_heads, s2.intermediate_size, s2.vocab_size), (6, 1, 4480, qwen.vocab_size / 2));
        assert_eq!((s2.hidden_size, s2.num_layers, s2.head_dim), (qwen.hidden_size, qwen.num_layers, qwen.head_dim));
        // 4 GPUs, 2 KV heads: each GPU keeps the KV head of its 3 query heads.
        let s4 = shard(&qwen, 4).expect("tp 4");
        assert_eq!((s4.num_heads, s4.num_kv_heads), (3, 1));
        assert!(shard(&qwen, 8).expect_err("12 heads over 8").contains("query heads"));
        assert!(shard(&qwen, 0).is_err() && shard(&qwen, 16).is_err());
        assert_eq!(shard(&qwen, 1).expect("tp 1"), qwen);
        let smol = crate::synthetic::preset("smollm2-135m").expect("preset");
        assert!(shard(&smol, 2).is_err(), "9 heads do not split over 2");
        let d = defines_tp(&s2, &KernelOptions::default(), 2, qwen.vocab_size, None);
        let get = |k: &str| d.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("PG_TP").as_deref(), Some("2"));
        assert_eq!(get("PG_NH").as_deref(), Some("6"));
        assert_eq!(get("PG_V_FULL"), Some(qwen.vocab_size.to_string()));
    }

    #[test]
    fn every_rank_gets_the_shard_shape_the_kernel_is_compiled_for() {
        // One kernel serves every rank, so ShardPlan's ranges must all have the sizes
        // `shard` reports, for every preset and degree the kernel accepts.
        let mut checked = 0;
        for name in crate::synthetic::PRESET_NAMES {
            let c = crate::synthetic::preset(name).expect("preset");
            for tp in [1, 2, 4, 8] {
                let Ok(sh) = shard(&c, tp) else { continue };
                let plan = ShardPlan::new(&c, tp).expect("shard accepted it");
                for lane in &plan.lanes {
                    let sizes = (lane.q_heads.len(), lane.kv_heads.len(), lane.ffn.len(), lane.vocab.len());
                    assert_eq!(sizes, (sh.num_heads, sh.num_kv_heads, sh.intermediate_size, sh.vocab_size), "{name} tp {tp}");
                }
                checked += 1;
            }
        }
        assert!(checked >= 8, "only {checked} (preset, degree) pairs shard");
    }

    #[test]
    fn exchange_table_follows_the_dtp_schedule() {
        let shape = crate::synthetic::preset("dtp-2b").expect("preset");
        let dtp = crate::synthetic::dtp_preset("dtp-2b").expect("dtp preset");
        let sched = DtpSchedule::new(&dtp, &shape, 2).expect("schedule");
        let t = exchange_table(shape.num_layers, Some(&sched));
        // delay 2, 15 layers, early layers present: 0-1 all-reduce, 2-3 own only (sent),
        // 4..12 add layer n-2 (sent), 13-14 add n-2 (not sent).
        assert_eq!(t[0], (XMode::All, -1, true));
        assert_eq!(t[2], (XMode::Delayed, -1, true));
        assert_eq!(t[4], (XMode::Delayed, 2, true));
        assert_eq!(t[12], (XMode::Delayed, 10, true));
        assert_eq!(t[13], (XMode::Delayed, 11, false));
        assert_eq!(t[14], (XMode::Delayed, 12, false));
        let standard = DtpSchedule::standard(&shape, 2).expect("standard");
        assert!(exchange_table(shape.num_layers, Some(&standard)).iter().all(|&e| e == (XMode::All, -1, true)));
        assert_eq!(exchange_table(3, None), vec![(XMode::All, -1, true); 3]);
    }

    #[test]
    fn defines_cover_every_slot_once() {
        let config = crate::synthetic::preset("smollm2-135m").expect("preset");
        let d = defines(&config, &KernelOptions::default());
        let names: std::collections::HashSet<_> = d.iter().map(|(k, _)| k.clone()).collect();
        assert_eq!(names.len(), d.len(), "duplicate define");
        assert!(names.contains("PG_ARG_DEBUG_LOGITS") && names.contains("PG_LW_WGATE_UP"));
        assert_eq!(d.iter().find(|(k, _)| k == "PG_EPS").map(|(_, v)| v.as_str()), Some("1e-5f"));
    }

    #[test]
    fn prefill_shape_covers_every_benchmark_head_dim() {
        for name in crate::synthetic::PRESET_NAMES {
            let config = crate::synthetic::preset(name).expect("preset");
            let pf = prefill_shape(&config).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(pf.queries_per_block * pf.dim_lanes * pf.key_lanes, PREFILL_ATTN_THREADS, "{name}");
            assert!(config.head_dim as u32 / pf.dim_lanes <= 64 && pf.key_tile.is_multiple_of(pf.key_lanes), "{name}: {pf:?}");
            let d = defines(&config, &KernelOptions::default());
            assert!(d.iter().any(|(k, v)| k == "PG_PF_TPQ" && *v == pf.dim_lanes.to_string()), "{name}");
        }
        let base = crate::synthetic::preset("smollm2-135m").expect("preset");
        for (hd, lanes, mma) in [(64, 1, true), (96, 2, true), (128, 2, true), (256, 4, false), (144, 4, false), (40, 1, false)] {
            let pf = prefill_shape(&ModelConfig { head_dim: hd, ..base.clone() });
            assert_eq!(pf.map(|p| (p.dim_lanes, p.mma)), Ok((lanes, mma)), "head_dim {hd}");
        }
        // 200 = 4 × 50: 4-float chunks do not deal evenly over 4 lanes → per-token path, no PF defines.
        let odd = ModelConfig { head_dim: 200, ..base };
        assert!(prefill_shape(&odd).is_err());
        assert!(!defines(&odd, &KernelOptions::default()).iter().any(|(k, _)| k.starts_with("PG_PF_")));
    }

    /// fuse_o's decomposition on the CPU: each head's partial (its slice of W_o, read
    /// through the kernel's index, times its output) summed over heads equals the plain
    /// W_o times the concatenated head outputs, for GQA-like and odd shapes.
    #[test]
    fn o_head_slices_times_head_outputs_sum_to_w_o_times_attention() {
        for (d, heads, hd) in [(24, 3, 8), (40, 4, 16), (16, 1, 8), (32, 5, 24)] {
            let qd = heads * hd;
            let mut rng = crate::rng::SplitMix64(0x0F5E ^ (d * heads * hd) as u64);
            let wo: Vec<f32> = (0..d * qd).map(|_| rng.next_signed()).collect();
            let attn: Vec<f32> = (0..qd).map(|_| rng.next_signed()).collect();
            let plain: Vec<f32> = (0..d).map(|r| (0..qd).map(|c| wo[r * qd + c] * attn[c]).sum()).collect();
            let mut fused = vec![0.0f32; d];
            for h in 0..heads {
                let out_h = &attn[h * hd..(h + 1) * hd];
                for (r, acc) in fused.iter_mut().enumerate() {
                    *acc += (0..hd).map(|c| wo[o_head_slice_index(heads, hd, h, r, c)] * out_h[c]).sum::<f32>();
                }
            }
            for (r, (a, b)) in fused.iter().zip(&plain).enumerate() {
                assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "d {d} heads {heads} hd {hd} row {r}: {a} vs {b}");
            }
            // Each slice row is one contiguous run of hd elements (what the kernel's 16-byte loads assume).
            for h in 0..heads {
                for r in 0..d {
                    let first = o_head_slice_index(heads, hd, h, r, 0);
                    assert!((0..hd).all(|c| o_head_slice_index(heads, hd, h, r, c) == first + c));
                    assert_eq!(first % 8, 0, "16-byte aligned at hd % 8 == 0");
                }
            }
        }
    }

    #[test]
    fn fuse_o_is_refused_under_tensor_parallelism_and_both_variants_are_defines() {
        let fused = KernelOptions { fuse_o: true, ..KernelOptions::default() };
        assert!(unsupported_tp(&fused, 1).is_none());
        assert!(unsupported_tp(&fused, 2).expect("refused").contains("one GPU"));
        assert!(unsupported_tp(&KernelOptions::default(), 2).is_none());
        let config = crate::synthetic::preset("smollm2-135m").expect("preset");
        let get = |o: &KernelOptions, k: &str| defines(&config, o).into_iter().find(|(n, _)| n == k).map(|(_, v)| v);
        let base = KernelOptions::default();
        assert!(!base.trace && !base.fuse_o, "both variants are off by default");
        assert_eq!((get(&base, "PG_TRACE").as_deref(), get(&base, "PG_FUSE_O").as_deref()), (Some("0"), Some("0")));
        let traced = KernelOptions { trace: true, ..fused };
        assert_eq!((get(&traced, "PG_TRACE").as_deref(), get(&traced, "PG_FUSE_O").as_deref()), (Some("1"), Some("1")));
    }

    #[test]
    fn stage_is_a_define_allowed_under_tensor_parallelism() {
        let config = crate::synthetic::preset("smollm2-135m").expect("preset");
        let get = |o: &KernelOptions, name: &str| defines(&config, o).into_iter().find(|(n, _)| n == name).map(|(_, v)| v);
        let base = KernelOptions::v3();
        assert_eq!(base.stage_iters, 0, "off in v3");
        assert_eq!(get(&base, "PG_STAGE_ITERS").as_deref(), Some("0"));
        assert_eq!(get(&base, "PG_RESID_SMEM").as_deref(), Some("0"));
        assert_eq!(get(&base, "PG_LM_NR").as_deref(), Some("2"));
        let staged = KernelOptions { stage_iters: 8, resid_smem: true, lm_rows_per_warp: 4, ..base };
        assert_eq!(KernelOptions::v4(), staged, "the session-3 settings are v4");
        let v5 = KernelOptions { tagged: true, stage_ahead: true, ..staged.clone() };
        assert_eq!(KernelOptions::v5(), v5, "v5 = v4 + tagged + ahead");
        let v6 = KernelOptions { attn_own: 1, ..v5 };
        assert_eq!(KernelOptions::v6(), v6, "v6 = v5 + attn_own");
        assert_eq!(KernelOptions::v7(), KernelOptions { ahead_late: AHEAD_LATE_DEFAULT, ..v6.clone() }, "v7 = v6 + ahead_late");
        assert_eq!(KernelOptions::v8(), KernelOptions { tp_attn_own: true, ..KernelOptions::v7() }, "v8 = v7 + tp_attn_own");
        assert_eq!(
            KernelOptions::v9(),
            KernelOptions { weights_evict_first: true, ..KernelOptions::v8() },
            "v9 = v8 + evict-first weights"
        );
        assert_eq!(KernelOptions::current(), KernelOptions { down_waves: true, ..KernelOptions::v9() }, "v10 = v9 + down_waves");
        // A define of Qwen2.5-Coder-1.5B's rank-0 kernel at degree `tp`.
        let qwen_define = |name: &str, o: &KernelOptions, tp: usize| {
            let config = crate::synthetic::preset("qwen2.5-coder-1.5b").expect("preset");
            let shard = shard(&config, tp).expect("shard");
            defines_tp(&shard, o, tp, config.vocab_size, None).into_iter().find(|(k, _)| k == name).map(|(_, v)| v)
        };
        // down_waves: one GPU by default, under tensor parallelism only when asked.
        let waves = |o: &KernelOptions, tp: usize| qwen_define("PG_DOWN_WAVES", o, tp);
        assert_eq!(waves(&KernelOptions::current(), 1).as_deref(), Some("1"));
        assert_eq!(waves(&KernelOptions::v9(), 1).as_deref(), Some("0"));
        assert_eq!(waves(&KernelOptions::current(), 2).as_deref(), Some("0"));
        assert_eq!(waves(&KernelOptions { tp_down_waves: true, ..KernelOptions::current() }, 2).as_deref(), Some("1"));
        assert!(!tagged_words_used(&KernelOptions::current(), 2) && tagged_words_used(&KernelOptions::current(), 1));
        assert!(tagged_words_used(&KernelOptions { tp_down_waves: true, ..KernelOptions::current() }, 2));
        // Evict-first weights: one GPU by default, under tensor parallelism only when asked.
        let evict = |o: &KernelOptions, tp: usize| qwen_define("PG_WEIGHT_EVICT_FIRST", o, tp);
        assert_eq!(evict(&KernelOptions::current(), 1).as_deref(), Some("1"));
        assert_eq!(evict(&KernelOptions::v8(), 1).as_deref(), Some("0"));
        assert_eq!(evict(&KernelOptions::current(), 2).as_deref(), Some("0"));
        assert_eq!(evict(&KernelOptions { tp_weights_evict_first: true, ..KernelOptions::current() }, 2).as_deref(), Some("1"));
        assert_eq!(get(&KernelOptions::current(), "PG_TP_AHEAD").as_deref(), Some("0"));
        assert_eq!(get(&KernelOptions { tp_ahead: true, ..KernelOptions::current() }, "PG_TP_AHEAD").as_deref(), Some("1"));
        // attn_own under tensor parallelism only with tp_attn_own, staging and few heads per rank.
        let own_at = |name: &str, o: &KernelOptions, tp: usize| {
            let config = crate::synthetic::preset(name).expect("preset");
            let shard = shard(&config, tp).expect("shard");
            defines_tp(&shard, o, tp, config.vocab_size, None).into_iter().find(|(k, _)| k == "PG_ATTN_OWN").map(|(_, v)| v)
        };
        let v10 = KernelOptions::current();
        assert_eq!(own_at("qwen2.5-coder-1.5b", &v10, 2).as_deref(), Some("1"), "6 heads per rank");
        assert_eq!(own_at("smollm2-1.7b", &v10, 2).as_deref(), Some("0"), "16 heads per rank");
        assert_eq!(own_at("qwen2.5-coder-1.5b", &KernelOptions::v7(), 2).as_deref(), Some("0"));
        assert_eq!(own_at("qwen2.5-coder-1.5b", &KernelOptions { stage_iters: 0, ..v10 }, 2).as_deref(), Some("0"));
        assert_eq!(get(&KernelOptions::current(), "PG_AHEAD_LATE").as_deref(), Some("3"));
        assert_eq!(get(&KernelOptions::current(), "PG_ATTN_OWN").as_deref(), Some("1"));
        assert_eq!(get(&staged, "PG_STAGE_ITERS").as_deref(), Some("8"));
        assert_eq!(get(&staged, "PG_RESID_SMEM").as_deref(), Some("1"));
        assert_eq!(get(&staged, "PG_LM_NR").as_deref(), Some("4"));
        // The staged weights are the rank's own shard: nothing to refuse under TP.
        assert!(unsupported_tp(&staged, 2).is_none());
        assert!(unsupported_tp(&KernelOptions { fuse_o: true, ..staged.clone() }, 2).is_some(), "fuse_o still one GPU only");
        assert!(unsupported(&config, &KernelOptions { lm_rows_per_warp: 0, ..staged }).is_some());
    }

    #[test]
    fn fuse_down_is_an_off_by_default_one_gpu_define() {
        let config = crate::synthetic::preset("smollm2-135m").expect("preset");
        let get = |o: &KernelOptions| defines(&config, o).into_iter().find(|(n, _)| n == "PG_FUSE_DOWN").map(|(_, v)| v);
        let base = KernelOptions::v4();
        assert!(!base.fuse_down, "off by default");
        assert_eq!(get(&base).as_deref(), Some("0"));
        let fused = KernelOptions { fuse_down: true, ..base };
        assert_eq!(get(&fused).as_deref(), Some("1"));
        assert!(unsupported(&config, &fused).is_none());
        let why = unsupported_tp(&fused, 2).expect("refused under TP");
        assert!(why.contains("fuse_down") && why.contains("one GPU"), "{why}");
        assert!(unsupported(&config, &KernelOptions { fuse_o: true, ..fused.clone() }).is_some(), "not with fuse_o");
        let odd = ModelConfig { intermediate_size: 1544, ..config };
        assert!(unsupported(&odd, &fused).is_some(), "F must divide by the warps per block");
    }

    #[test]
    fn tagged_is_the_default_one_gpu_define() {
        let config = crate::synthetic::preset("qwen2.5-coder-1.5b").expect("preset");
        let get = |o: &KernelOptions| defines(&config, o).into_iter().find(|(n, _)| n == "PG_TAGGED").map(|(_, v)| v);
        let tagged = KernelOptions::default();
        assert!(tagged.tagged && tagged.stage_ahead, "on by default (v5)");
        assert_eq!(get(&tagged).as_deref(), Some("1"));
        assert_eq!(get(&KernelOptions::v4()).as_deref(), Some("0"));
        assert!(unsupported(&config, &tagged).is_none());
        // Under TP the ranks keep their counters: not refused, compiled without it.
        assert!(unsupported_tp(&tagged, 2).is_none());
        let shard = shard(&config, 2).expect("qwen splits over 2");
        let tp2 = defines_tp(&shard, &tagged, 2, config.vocab_size, None);
        assert_eq!(tp2.iter().find(|(n, _)| n == "PG_TAGGED").map(|(_, v)| v.as_str()), Some("0"));
        assert!(unsupported(&config, &KernelOptions { fuse_o: true, ..tagged.clone() }).is_some(), "not with fuse_o");
        assert!(unsupported(&config, &KernelOptions { fuse_down: true, ..tagged }).is_some(), "not with fuse_down");
        // Per layer: q/k/v (1536 + 2·256), attention output 1536, two residuals of 1536, activations 8960.
        assert_eq!(tagged_words(&config), 28 * (2048 + 1536 + 2 * 1536 + 8960));
    }

    #[test]
    fn start_step_has_a_slot() {
        let d = defines(&crate::synthetic::preset("llama-3.2-1b").expect("preset"), &KernelOptions::default());
        let slot = d.iter().find(|(k, _)| k == "PG_ARG_START_STEP").map(|(_, v)| v.clone());
        assert_eq!(slot, Some(Arg::StartStep.index().to_string()));
    }

    #[cfg(feature = "cuda")]
    #[test]
    fn every_define_the_kernel_names_is_generated() {
        let config = crate::synthetic::preset("llama-3.2-1b").expect("preset");
        let generated: std::collections::HashSet<String> =
            defines(&config, &KernelOptions { chaos: true, ..Default::default() }).into_iter().map(|(k, _)| k).collect();
        for (file, src) in super::super::nvrtc::KERNEL_SOURCES {
            let mut rest = *src;
            while let Some(at) = rest.find("PG_") {
                let tail = &rest[at..];
                let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
                let name = &tail[..end];
                // ARG_PTR(T, NAME) pastes PG_ARG_##NAME: those names are checked below.
                if name != "PG_ARG_" && name != "PG_LW_" {
                    assert!(generated.contains(name), "{file} uses {name}, which layout.rs does not define");
                }
                rest = &tail[end..];
            }
            for (prefix, table) in [("ARG_", Arg::NAMES), ("LW_", LayerSlot::NAMES)] {
                let macro_name =
                    if prefix == "ARG_" { ["ARG_PTR(", "ARG_U32(", "ARG_F32("] } else { ["LAYER_PTR(", "LAYER_PTR(", "LAYER_PTR("] };
                for m in macro_name {
                    for call in src.split(m).skip(1) {
                        let inner = &call[..call.find(')').unwrap_or(0)];
                        let name = inner.rsplit(',').next().unwrap_or("").trim();
                        let known: Vec<String> = table.iter().map(|n| screaming(n)).collect();
                        let is_macro_param = name == "NAME" || name == "SLOT";
                        assert!(
                            name.is_empty() || is_macro_param || known.iter().any(|k| k == name),
                            "{file}: {m}{inner}) names unknown slot {prefix}{name}"
                        );
                    }
                }
            }
        }
    }
}
