//! Everything the host and the decode kernel must agree on, defined once here and
//! handed to NVRTC as `-D` defines: the model's shape, kernel variants, argument
//! slots and per-layer weight slots (slots.rs), the token ring's record layout and the
//! host control words (host_words.rs). The kernel (kernels/decode.cu) only ever names these defines.

use crate::config::{ModelConfig, RopeLayout};
use crate::dtp::{Combine, DtpSchedule, ShardPlan};
pub use crate::options::Diagnostics;
use crate::options::{CudaOptions, PrefillMode, ThreadsPolicy};
use crate::cuda::trace;
use crate::sampling::MAX_TOP_LOGPROBS;

mod host_words;
mod slots;

pub use host_words::{ctl, end, rec};
pub use slots::{Arg, LayerSlot, PeerSlot};

/// Threads per block of the persistent kernel (16 warps: 8 KB of 16-byte loads in
/// flight per SM per unrolled load step); the first load of a shape may pick another
/// count (tune.rs).
/// Bits a receive slot holds until a peer's value lands: a NaN no arithmetic produces
/// (PG_PEER_SENTINEL in the kernel).
pub const PEER_SENTINEL: u32 = 0xffff_ffff;
pub const DEFAULT_THREADS: u32 = 512;
/// Rows a warp streams together (even: gate/up rows come in pairs).
pub const ROWS_PER_WARP: u32 = 2;
/// 16-byte loads per lane per row in flight.
pub const UNROLL: u32 = 4;
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
/// Ranks per launch: every rank under `one_launch` (all on one GPU), else one.
pub fn launch_ranks(options: &KernelOptions, tp: usize) -> usize {
    if options.one_launch {
        tp
    } else {
        1
    }
}

/// Keys per shared-memory tile of the tensor-core prefill attention.
pub const PREFILL_MMA_KEY_TILE: u32 = 64;
/// Queries per warp of the tensor-core prefill attention (one m16n8k16 row block).
pub const PREFILL_MMA_WARP_QUERIES: u32 = 16;

/// Steps after the prompt's last position at which `Diagnostics::trace` stamps the
/// phases (the step after it is stamped too, for its step-start wait): past the first
/// generated tokens, with a KV cache as long as a short prompt's.
pub const TRACE_AFTER_PROMPT: usize = 8;

/// Under tensor parallelism attention gets blocks of its own (one per query head of a
/// rank, `PG_ATTN_OWN`) only where a rank has at most this many heads: a gain with 6
/// heads per rank (4.5 % of the blocks), a loss with 16 (12 %).
pub const TP_OWN_MAX_HEADS: usize = 8;

/// How the persistent kernel is built and run: its block size, its buffers, the two
/// tensor-parallel schedules not yet measured on two GPUs, and the diagnostics.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelOptions {
    /// Threads per block ([`DEFAULT_THREADS`], or the count tune.rs measured fastest).
    pub threads: u32,
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
    /// Tensor parallelism: weight loads and copies carry an L2 evict-first policy, as on
    /// one GPU (common.cuh `ld_weight16`). Off until measured on two GPUs.
    pub tp_weights_evict_first: bool,
    /// Tensor parallelism: the down phase streams while its input lands (decode.cu
    /// `DOWN_WAVES`, on for one GPU), with gate/up publishing the rank-local activations
    /// as tagged words. Off until measured on two GPUs.
    pub tp_down_waves: bool,
    /// Quantized rows on the register path load a lane's next chunks while it does the
    /// arithmetic of the current ones (`PG_Q_PIPE`). Off until measured on a GPU.
    pub quant_pipeline: bool,
    /// Constrained runs mask the logits on the device with a bitmap the host writes per
    /// token (`PG_GRAMMAR_MASK`; one GPU). Off until run on a GPU.
    pub grammar_mask: bool,
    /// Tensor-parallel ranks that share one GPU run as one launch, each rank a range of
    /// its blocks, their exchanges at device scope (`PG_VRANKS`). Off until run on a GPU.
    pub one_launch: bool,
    /// Bit f set: some layer matrix is in `quant::GpuFormat` tag f (bit 0, bf16, is not
    /// counted); 0 for a bf16 model. Set from the uploaded weights: the kernel compiles
    /// the dequantizing row loops of these formats only.
    pub weight_formats: u8,
    /// The LM head's `GpuFormat` tag (a compile-time choice: one tensor).
    pub lm_head_format: u8,
    pub diagnostics: Diagnostics,
}

impl Default for KernelOptions {
    fn default() -> Self {
        KernelOptions {
            threads: DEFAULT_THREADS,
            attn_max_splits: DEFAULT_ATTN_MAX_SPLITS,
            kv_positions: DEFAULT_MAX_KV_POSITIONS,
            ring: DEFAULT_RING,
            batched_prefill: true,
            prefill_chunk: DEFAULT_PREFILL_CHUNK,
            prefill_mma_attention: true,
            tp_weights_evict_first: false,
            tp_down_waves: false,
            quant_pipeline: false,
            grammar_mask: false,
            one_launch: false,
            weight_formats: 0,
            lm_head_format: 0,
            diagnostics: Diagnostics::default(),
        }
    }
}

impl KernelOptions {
    /// The kernel the engine's CUDA options describe (a tuned thread count starts at
    /// the default; tune.rs sets the measured one).
    pub fn from_cuda(cuda: &CudaOptions) -> KernelOptions {
        let defaults = KernelOptions::default();
        KernelOptions {
            threads: match cuda.threads {
                ThreadsPolicy::Fixed(t) => t,
                ThreadsPolicy::Tuned => DEFAULT_THREADS,
            },
            kv_positions: cuda.kv_positions.unwrap_or(defaults.kv_positions),
            batched_prefill: cuda.prefill == PrefillMode::Batched,
            tp_weights_evict_first: cuda.tp_weights_evict_first,
            tp_down_waves: cuda.tp_down_waves,
            quant_pipeline: cuda.quant_pipeline,
            grammar_mask: cuda.grammar_mask,
            one_launch: cuda.one_launch,
            diagnostics: cuda.diagnostics.clone(),
            ..defaults
        }
    }

    /// The options of rank `rank`'s kernel in a run of degree `tp`: chaos delays only on
    /// `chaos_rank` under tensor parallelism (one rank's delays already reorder the exchange),
    /// on every rank of one launch (they share one kernel).
    pub fn for_rank(&self, rank: usize, tp: usize) -> KernelOptions {
        let d = &self.diagnostics;
        let chaos = d.chaos && (tp == 1 || self.one_launch || d.chaos_rank as usize == rank);
        KernelOptions { diagnostics: Diagnostics { chaos, ..d.clone() }, ..self.clone() }
    }

    /// A short form for logs: `default`, or the fields that differ from the default,
    /// e.g. `threads: 448, kv_positions: 2048`.
    pub fn summary(&self) -> String {
        // Pretty Debug puts one scalar field per line, in declaration order on both sides.
        let fields = |o: &Self| format!("{o:#?}").lines().map(|l| l.trim().trim_end_matches(',').to_string()).collect::<Vec<_>>();
        let differing: Vec<String> =
            fields(self).into_iter().zip(fields(&Self::default())).filter(|(a, b)| a != b).map(|(a, _)| a).collect();
        if differing.is_empty() {
            "default".to_string()
        } else {
            differing.join(", ")
        }
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

/// Shared memory per block kept unused when the decode kernel's plan with staging ahead
/// (`kernels/smem_plan.cuh`, `AHEAD`: both staging sets, the residual and the regions
/// before them) is sized against the device's opt-in maximum. It keeps the plans the
/// kernel was tuned with on the H200 (220 of its 227 KiB; a shape past that stages one
/// phase at a time and keeps the L1 the last 7 KiB would take); whether any shape
/// gains from the last 7 KiB is not measured.
pub const AHEAD_SHARED_MARGIN: usize = 7 * 1024;

/// The budget of the plan with staging ahead on a device whose blocks may opt in to
/// `shared_per_block` bytes (CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN).
pub fn stage_ahead_budget(shared_per_block: usize) -> usize {
    shared_per_block.saturating_sub(AHEAD_SHARED_MARGIN)
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

/// Whether the kernel writes the tagged buffer (so the host zeroes it per run): always
/// on one GPU; under tensor parallelism only for `tp_down_waves`' activations.
pub fn tagged_words_used(options: &KernelOptions, tp: usize) -> bool {
    tp == 1 || options.tp_down_waves
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
            Some(Combine::LaneLocal { send, .. }) => (XMode::Local, -1, send),
            // Delay 0: received this very layer, i.e. a blocking all-reduce.
            Some(Combine::Delayed { received, .. }) if received == n => (XMode::All, -1, true),
            Some(Combine::Delayed { received, send }) => (XMode::Delayed, received as i64, send),
        })
        .collect()
}

/// The defines of kernels/qcheck.cu (the quantized matrix-vector product alone, every
/// format compiled in) for rows of `k` elements: the GPU tests' kernel, not the product's.
#[cfg(feature = "lab")]
pub fn qcheck_defines(k: usize) -> Vec<(String, String)> {
    let all_formats = (1..=5).fold(0u8, |m, t| m | (1 << t));
    [("PG_QCHECK_K", k.to_string()), ("PG_UNROLL", UNROLL.to_string()), ("PG_QFMTS", all_formats.to_string())]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b))
        .collect()
}

/// The defines of kernels/rows_cost.cu: `nv` vectors of `k` elements per pass (the
/// measuring apparatus's kernel, not the product's).
#[cfg(feature = "lab")]
pub fn rows_cost_defines(k: usize, nv: usize) -> Vec<(String, String)> {
    [("PG_ROWS_K", k.to_string()), ("PG_ROWS_NV", nv.to_string()), ("PG_UNROLL", UNROLL.to_string())]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b))
        .collect()
}

/// Every `-D` define the kernel needs, as `(name, value)` (one GPU); `shared_per_block`
/// is the device's opt-in shared memory per block (or the target's, without a device:
/// `nvrtc::shared_per_block_of`).
pub fn defines(config: &ModelConfig, options: &KernelOptions, shared_per_block: usize) -> Vec<(String, String)> {
    defines_tp(config, options, 1, config.vocab_size, None, shared_per_block)
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
    shared_per_block: usize,
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
    let lanes = &config.lanes;
    put("HEAD_OWN", u8::from(lanes.head == crate::config::LaneHead::VocabParallel).to_string());
    put("HEAD_LANE", u8::from(lanes.concat_head()).to_string());
    put("SUM_BEFORE_NORM", u8::from(lanes.sum_before_norm).to_string());
    let w = &config.sliding_window;
    put("WINDOW", w.size.to_string());
    let windowed: Vec<String> = (0..config.num_layers).map(|l| u8::from(w.of_layer(l).is_some()).to_string()).collect();
    put("WIN_LAYERS", format!("{{{}}}", windowed.join(",")));
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
    put("NR", ROWS_PER_WARP.to_string());
    put("AHEAD_SMEM_BYTES", stage_ahead_budget(shared_per_block).to_string());
    put("UNROLL", UNROLL.to_string());
    put("ATTN_MAX_SPLITS", options.attn_max_splits.to_string());
    put("TRACE", u8::from(options.diagnostics.trace).to_string());
    let one_gpu = tp == 1;
    put("WEIGHT_EVICT_FIRST", u8::from(one_gpu || options.tp_weights_evict_first).to_string());
    put("DOWN_WAVES", u8::from(one_gpu || options.tp_down_waves).to_string());
    let own = one_gpu || config.num_heads <= TP_OWN_MAX_HEADS;
    put("ATTN_OWN", u8::from(own).to_string());
    if options.diagnostics.chaos {
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
    put("QFMTS", options.weight_formats.to_string());
    put("Q_PIPE", u8::from(options.quant_pipeline).to_string());
    put("GRAMMAR_MASK", u8::from(options.grammar_mask && tp == 1).to_string());
    put("VRANKS", launch_ranks(options, tp).to_string());
    put("LM_FMT", options.lm_head_format.to_string());
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
        ("CTL_MASK_SEQ", ctl::MASK_SEQ),
    ] {
        put(k, v.to_string());
    }
    put("END_LENGTH", end::LENGTH.to_string());
    put("END_STOP_TOKEN", end::STOP_TOKEN.to_string());
    put("END_STOPPED", end::STOPPED.to_string());
    // The receive slots' sentinel, the trace record's layout and the phase list: facts the
    // host reads back, stated once (here and in trace.rs).
    put("PEER_SENTINEL", format!("{PEER_SENTINEL:#x}u"));
    put("TRACE_WORDS", trace::WORDS_PER_EVENT.to_string());
    put("TRACE_WAIT_END", (trace::WAIT_END * trace::WORDS_PER_STAMP).to_string());
    put("TRACE_ARRIVE", (trace::ARRIVE * trace::WORDS_PER_STAMP).to_string());
    for (i, name) in trace::LAYER_PHASES.iter().enumerate() {
        put(&format!("PH_{name}"), i.to_string());
    }
    put("PHASES", trace::LAYER_PHASES.len().to_string());
    for (i, name) in trace::TAIL_EVENTS.iter().enumerate() {
        put(&format!("EV_{name}"), i.to_string());
    }
    put("TAIL_EVENTS", trace::TAIL_EVENTS.len().to_string());
    d
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
        (options.ring == 0, "ring must hold at least one record".to_string()),
        (options.attn_max_splits == 0, "attn_max_splits must be at least 1".to_string()),
        (options.prefill_chunk == 0, "prefill_chunk must be at least 1".to_string()),
    ];
    checks.into_iter().find(|(bad, _)| *bad).map(|(_, m)| m)
}

#[cfg(test)]
mod tests;
