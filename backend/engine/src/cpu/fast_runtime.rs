//! [`Runtime`] over the fast forward pass: packed quantized weights, SIMD kernels,
//! a thread team that lives as long as the runtime, the prompt in batches. Sampling
//! is the shared `sample()`, called exactly as the reference runtime calls it, so a
//! seed gives the same tokens whenever the logits agree. A Laneformer of several lanes
//! runs the lane pass (`cpu::lanes`); everything else the ordinary one.

use crate::admission::check_fits;
use crate::config::ModelConfig;
use crate::cpu::act_quant::ActPrecision;
use crate::cpu::fast_model::FastModel;
use crate::cpu::forward::{forward, forward_seqs, LogitsFor, SeqChunk};
use crate::cpu::isa::Isa;
use crate::cpu::kv_cache::KvCache;
use crate::cpu::lanes::{LaneModel, LaneWorkspace};
use crate::cpu::pool::Pool;
use crate::cpu::workspace::Workspace;
use crate::error::{Error, Result};
use crate::runtime::{
    cpu_name, reusable_prefix, BackendInfo, BatchDecode, Cancel, DecodeJob, Flow, RunEnd, Runtime, SlotTokens,
};
use crate::sampling::Sampled;
use crate::speculative::verify::decode_speculative;
use crate::speculative::{DraftCounts, VerifyCapacity};
use crate::weights::Weights;

/// Prompt tokens per forward call: large enough that each unpacked weight tile
/// feeds many tokens, small enough that activations stay in L2.
pub const DEFAULT_PREFILL_BATCH: usize = 256;
/// Most sequences the batch side holds.
pub const MAX_SLOTS: usize = 8;
/// Sequences decoded together when the operator does not say: where the aggregate
/// rate still grows while each stream keeps most of its solo speed (docs/benchmarks.md).
pub const DEFAULT_BATCH: usize = 4;
/// Rows of one sequence a step verifies (its token plus drafts): two of the kernels'
/// four-token tiles. Longer drafts are rarely all accepted, and every row adds its
/// share of multiplies.
pub const VERIFY_ROWS: usize = 8;
/// What one more row of a sequence adds to a one-token step, as a share of it, at
/// 16-bit activations: a row's multiplies add to the weight stream rather than
/// hiding behind it (docs/cpu-runtime.md, "Where time goes"). Chosen on the dear
/// side of what rows cost on the machines measured (docs/benchmarks.md), so drafts
/// run only where acceptance pays for them even on a slower core.
pub const ROW_COST_INT16: f32 = 0.38;
/// [`ROW_COST_INT16`] at 8-bit activations, which take half the multiplies.
pub const ROW_COST_INT8: f32 = 0.2;

/// How to build a [`FastRuntime`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FastOptions {
    /// Threads in the team (the caller's thread included).
    pub threads: usize,
    pub isa: Isa,
    /// Prompt tokens per forward call.
    pub prefill_batch: usize,
    /// Activation precision of the integer kernels.
    pub act_precision: ActPrecision,
}

impl FastOptions {
    /// The engine's CPU options made concrete: every core unless capped, the best
    /// instruction set up to the cap, the default batch.
    pub fn from_options(cpu: &crate::options::CpuOptions) -> FastOptions {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let threads = cpu.threads.filter(|&n| n > 0).unwrap_or(cores);
        FastOptions { threads, isa: Isa::detect(cpu.isa_cap), prefill_batch: DEFAULT_PREFILL_BATCH, act_precision: cpu.act_precision }
    }

    /// [`Self::from_options`] of the default CPU options.
    #[cfg(feature = "lab")]
    pub fn defaults() -> FastOptions {
        Self::from_options(&crate::options::CpuOptions::default())
    }
}

/// The model and its scratch buffers: one residual stream, or a Laneformer's lanes.
enum Pass {
    Ordinary { model: FastModel, ws: Workspace },
    Lanes { model: LaneModel, ws: LaneWorkspace },
}

impl Pass {
    fn config(&self) -> &ModelConfig {
        match self {
            Pass::Ordinary { model, .. } => &model.config,
            Pass::Lanes { model, .. } => &model.config,
        }
    }

    fn batch(&self) -> usize {
        match self {
            Pass::Ordinary { ws, .. } => ws.batch(),
            Pass::Lanes { ws, .. } => ws.batch(),
        }
    }

    /// One forward call; returns the number of logit rows left in the workspace.
    fn forward(&mut self, pool: &Pool, cache: &mut KvCache, tokens: &[u32], want: LogitsFor) -> Result<usize> {
        match self {
            Pass::Ordinary { model, ws } => forward(model, pool, ws, cache, tokens, want),
            Pass::Lanes { model, ws } => crate::cpu::lanes::forward(model, pool, ws, cache, tokens, want),
        }
    }

    fn logits(&self, row: usize) -> &[f32] {
        let vocab = self.config().vocab_size;
        match self {
            Pass::Ordinary { ws, .. } => ws.logits(row, vocab),
            Pass::Lanes { ws, .. } => ws.logits(row, vocab),
        }
    }
}

/// A KV cache and the token ids whose keys and values it holds (for prompt reuse).
struct Sequence {
    cache: KvCache,
    ids: Vec<u32>,
}

impl Sequence {
    fn new(config: &ModelConfig) -> Sequence {
        Sequence { cache: KvCache::new(config), ids: Vec::new() }
    }

    /// Keeps the first `n` positions (all of them when fewer are cached).
    fn truncate(&mut self, n: usize) {
        self.cache.truncate(n);
        self.ids.truncate(n);
    }
}

/// The fast CPU runtime.
pub struct FastRuntime {
    pass: Pass,
    isa: Isa,
    pool: Pool,
    act_precision: ActPrecision,
    /// The last `generate`'s draft counts.
    drafts: DraftCounts,
    /// The one-at-a-time path's sequence (kept between runs for prompt reuse).
    seq: Sequence,
    /// Prompt tokens the last `generate` reused.
    reused: usize,
    /// The batch side's sequences (grown to [`MAX_SLOTS`] on demand).
    slots: Vec<Sequence>,
}

impl FastRuntime {
    /// Repacks the weights and starts the thread team.
    pub fn new(config: &ModelConfig, weights: &Weights, options: FastOptions) -> Result<FastRuntime> {
        if !options.isa.is_supported() {
            return Err(Error::InvalidRequest(format!("this CPU lacks the {} instruction set", options.isa.name())));
        }
        let threads = options.threads.max(1);
        let batch = options.prefill_batch.max(1);
        // One lane is the ordinary model whatever its lane settings say (√1 = 1, no other lanes).
        let pass = if config.lanes.count > 1 {
            let model = LaneModel::new(config, weights, options.isa, threads)?;
            let ws = LaneWorkspace::new(&model, batch, threads);
            Pass::Lanes { model, ws }
        } else {
            let model = FastModel::new(config, weights, options.isa, threads)?;
            let ws = Workspace::new(&model, batch, threads, options.act_precision);
            Pass::Ordinary { model, ws }
        };
        let pool = Pool::new(threads).map_err(|e| Error::Unavailable(format!("cannot start CPU worker threads: {e}")))?;
        Ok(FastRuntime { pass, isa: options.isa, pool, act_precision: options.act_precision, drafts: DraftCounts::default(), seq: Sequence::new(config), reused: 0, slots: Vec::new() })
    }

    /// Threads in the team.
    pub fn threads(&self) -> usize {
        self.pool.threads()
    }

    /// The instruction set in use.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// Bytes of repacked weights.
    #[cfg(feature = "lab")]
    pub fn packed_bytes(&self) -> usize {
        match &self.pass {
            Pass::Ordinary { model, .. } => model.packed_bytes(),
            Pass::Lanes { model, .. } => model.packed_bytes(),
        }
    }

    /// Runs `tokens` after what is cached, in batches; returns the logits of every
    /// position (`all`) or of the last only, one row per position.
    #[cfg(feature = "lab")]
    pub fn forward(&mut self, tokens: &[u32], all: bool) -> Result<Vec<Vec<f32>>> {
        Ok(self.forward_unless(tokens, all, Cancel::NEVER)?.unwrap_or_default())
    }

    /// [`FastRuntime::forward`], asking `cancel` before each batch (`None`: it fired).
    fn forward_unless(&mut self, tokens: &[u32], all: bool, cancel: Cancel<'_>) -> Result<Option<Vec<Vec<f32>>>> {
        let want = if all { LogitsFor::All } else { LogitsFor::Last };
        let mut out = Vec::new();
        let chunks: Vec<&[u32]> = tokens.chunks(self.pass.batch()).collect();
        for (i, chunk) in chunks.iter().enumerate() {
            if cancel.requested() {
                return Ok(None);
            }
            let last_chunk = i + 1 == chunks.len();
            let want = if all || last_chunk { want } else { LogitsFor::Last };
            let rows = self.pass.forward(&self.pool, &mut self.seq.cache, chunk, want)?;
            self.seq.ids.extend_from_slice(chunk);
            if all || last_chunk {
                out.extend((0..rows).map(|r| self.pass.logits(r).to_vec()));
            }
        }
        Ok(Some(out))
    }

    /// Forgets the cached sequence.
    #[cfg(feature = "lab")]
    pub fn reset(&mut self) {
        self.seq.truncate(0);
    }

    /// Runs the prompt (chunked) and leaves the last position's logits in the workspace;
    /// false when `cancel` fired first (asked before each chunk, so a cancelled run
    /// ends within one chunk instead of after the whole prompt).
    fn prefill(&mut self, prompt: &[u32], cancel: Cancel<'_>) -> Result<bool> {
        for chunk in prompt.chunks(self.pass.batch()) {
            if cancel.requested() {
                return Ok(false);
            }
            self.pass.forward(&self.pool, &mut self.seq.cache, chunk, LogitsFor::Last)?;
            self.seq.ids.extend_from_slice(chunk);
        }
        Ok(true)
    }
}

impl Runtime for FastRuntime {
    fn config(&self) -> &ModelConfig {
        self.pass.config()
    }

    fn backend(&self) -> BackendInfo {
        let detail = format!("{} · {} threads · {}", cpu_name(), self.threads(), self.isa().name());
        BackendInfo { kind: "cpu".into(), devices: vec![detail] }
    }

    fn generate(&mut self, job: &DecodeJob<'_>, on_token: &mut dyn FnMut(&Sampled) -> Flow) -> Result<RunEnd> {
        check_fits(self.pass.config(), job.prompt.len(), job.max_tokens)?;
        let keep = if job.reuse_prefix { reusable_prefix(&self.seq.ids, job.prompt) } else { 0 };
        self.seq.truncate(keep);
        self.reused = keep;
        self.seq.cache.reserve(job.prompt.len() + job.max_tokens);
        self.drafts = DraftCounts::default();
        if !self.prefill(&job.prompt[keep..], job.cancel)? {
            return Ok(RunEnd::Stopped);
        }
        let job = &DecodeJob { draft: job.draft.within(self.verify_capacity()), ..job.clone() };
        let (end, counts) = decode_speculative(
            self,
            job,
            on_token,
            |rt, row| rt.pass.logits(row),
            |rt, tokens| {
                rt.pass.forward(&rt.pool, &mut rt.seq.cache, tokens, LogitsFor::All)?;
                rt.seq.ids.extend_from_slice(tokens);
                Ok(())
            },
            |rt, n| rt.seq.truncate(rt.seq.ids.len() - n),
        )?;
        self.drafts = counts;
        Ok(end)
    }

    fn verify_capacity(&self) -> VerifyCapacity {
        // A step's rows must fit the workspace, which a small prefill batch keeps small.
        let rows = VERIFY_ROWS.min(self.pass.batch());
        match (&self.pass, self.act_precision) {
            // The lane pass runs its own schedule per token.
            (Pass::Lanes { .. }, _) => VerifyCapacity::SINGLE,
            (Pass::Ordinary { .. }, ActPrecision::Int16) => VerifyCapacity { rows, row_cost: ROW_COST_INT16 },
            (Pass::Ordinary { .. }, ActPrecision::Int8) => VerifyCapacity { rows, row_cost: ROW_COST_INT8 },
        }
    }

    fn follows_grammars(&self) -> bool {
        // Every token goes through `decode_speculative`, which masks with the job's grammar.
        true
    }

    fn draft_counts(&self) -> DraftCounts {
        self.drafts
    }

    fn reused_prefix(&self) -> usize {
        self.reused
    }

    fn batch(&mut self) -> Option<&mut dyn BatchDecode> {
        // The lane pass runs one sequence per call.
        matches!(self.pass, Pass::Ordinary { .. }).then_some(self as &mut dyn BatchDecode)
    }

    fn score(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        Ok(self.score_unless(tokens, Cancel::NEVER)?.unwrap_or_default())
    }

    fn score_unless(&mut self, tokens: &[u32], cancel: Cancel<'_>) -> Result<Option<Vec<Vec<f32>>>> {
        check_fits(self.pass.config(), tokens.len(), 0)?;
        self.seq.truncate(0);
        self.seq.cache.reserve(tokens.len());
        let scored = self.forward_unless(tokens, true, cancel)?;
        if scored.is_none() {
            // The cache holds part of the prompt only.
            self.seq.truncate(0);
        }
        Ok(scored)
    }
}

impl BatchDecode for FastRuntime {
    fn capacity(&self) -> usize {
        MAX_SLOTS
    }

    fn default_batch(&self) -> usize {
        DEFAULT_BATCH
    }

    fn step_tokens(&self) -> usize {
        self.pass.batch()
    }

    fn open(&mut self, slot: usize, positions: usize, prompt: &[u32], reuse: bool) -> Result<usize> {
        if slot >= MAX_SLOTS {
            return Err(Error::InvalidRequest(format!("slot {slot} is outside the {MAX_SLOTS} this runtime holds")));
        }
        check_fits(self.pass.config(), positions.max(1), 0)?;
        let config = self.pass.config().clone();
        while self.slots.len() <= slot {
            self.slots.push(Sequence::new(&config));
        }
        let seq = &mut self.slots[slot];
        let keep = if reuse { reusable_prefix(&seq.ids, prompt) } else { 0 };
        seq.truncate(keep);
        seq.cache.reserve(positions);
        Ok(keep)
    }

    fn cached_prefix(&self, slot: usize, prompt: &[u32]) -> usize {
        self.slots.get(slot).map_or(0, |s| reusable_prefix(&s.ids, prompt))
    }

    fn step(&mut self, work: &[SlotTokens<'_>]) -> Result<()> {
        let Pass::Ordinary { model, ws } = &mut self.pass else {
            return Err(Error::Unavailable("the lane pass decodes one sequence at a time".into()));
        };
        let mut caches: Vec<Option<&mut KvCache>> = self.slots.iter_mut().map(|s| Some(&mut s.cache)).collect();
        let mut seqs = Vec::with_capacity(work.len());
        for w in work {
            let cache = caches.get_mut(w.slot).and_then(Option::take);
            let cache = cache.ok_or_else(|| Error::InvalidRequest(format!("slot {} is not open or appears twice in one step", w.slot)))?;
            if w.tokens.is_empty() {
                return Err(Error::InvalidRequest(format!("slot {} has no tokens in this step", w.slot)));
            }
            // Tokens is non-empty (checked above), so the bound is at least 1.
            if w.logit_rows > w.tokens.len().min(VERIFY_ROWS) {
                return Err(Error::InvalidRequest(format!("slot {} asks for {} logit rows of {} tokens", w.slot, w.logit_rows, w.tokens.len())));
            }
            seqs.push(SeqChunk { cache, tokens: w.tokens, logit_rows: w.logit_rows.max(1) });
        }
        let total: usize = work.iter().map(|w| w.tokens.len()).sum();
        if total > ws.batch() {
            return Err(Error::InvalidRequest(format!("a step of {total} tokens is more than the {} one pass takes", ws.batch())));
        }
        if seqs.is_empty() {
            return Ok(());
        }
        forward_seqs(model, &self.pool, ws, &mut seqs, LogitsFor::Last)?;
        for w in work {
            self.slots[w.slot].ids.extend_from_slice(w.tokens);
        }
        Ok(())
    }

    fn logits(&self, i: usize) -> &[f32] {
        self.pass.logits(i)
    }

    fn rollback(&mut self, slot: usize, n: usize) {
        if let Some(seq) = self.slots.get_mut(slot) {
            seq.truncate(seq.ids.len().saturating_sub(n));
        }
    }

    fn close(&mut self, _slot: usize) {
        // The slot keeps its sequence: the next request may share its prefix (a
        // conversation's next turn). Its memory is bounded by the context.
    }
}
