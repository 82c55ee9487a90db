//! The interface every runtime (CPU reference, fast CPU, CUDA) implements: run a
//! prompt, then decode token by token until a stop token, max tokens or the caller
//! says stop. Sampling and the stop-token check belong to the runtime because the
//! CUDA runtime does both on the device.

use crate::config::ModelConfig;
use crate::constraint::{Constraint, Guide};
use crate::error::Result;
use crate::sampling::{Sampled, SamplingParams};
use crate::speculative::{DraftCounts, DraftPlan, VerifyCapacity};

/// What one generation run needs.
#[derive(Debug, Clone)]
pub struct DecodeJob<'a> {
    /// Prompt token ids (at least one).
    pub prompt: &'a [u32],
    /// Most tokens to generate.
    pub max_tokens: usize,
    pub sampling: &'a SamplingParams,
    /// Token ids that end generation (not emitted); empty with `ignore_eos`.
    pub stop_tokens: &'a [u32],
    /// How many alternatives to report per token (0 = none).
    pub top_logprobs: usize,
    /// Asked between prompt chunks, where `on_token` cannot be: a cancelled long
    /// prompt stops within one chunk instead of after the whole prefill.
    pub cancel: Cancel<'a>,
    /// Keep the cached keys and values of the longest prefix this prompt shares with
    /// what the runtime last ran (llama.cpp's `cache_prompt`); the output is the same.
    pub reuse_prefix: bool,
    /// What the run may draft; never more than the runtime's [`Runtime::verify_capacity`].
    pub draft: DraftPlan,
    /// The grammar the output follows; only runtimes whose
    /// [`Runtime::follows_grammars`] is true are given one.
    pub constraint: Option<&'a Constraint>,
}

/// The caller's "nobody wants this run any more", polled by runtimes during prefill
/// (during decode the answer of `on_token` says the same). A predicate rather than a
/// flag because a dropped receiver has no notification to set a flag from: the
/// engine thread's predicate reads its cancel flag and whether the channel closed.
#[derive(Clone, Copy, Default)]
pub struct Cancel<'a>(Option<&'a dyn Fn() -> bool>);

impl<'a> Cancel<'a> {
    /// Never cancels (benchmarks, tests, scoring).
    pub const NEVER: Cancel<'static> = Cancel(None);

    /// Cancels once `requested` returns true; it must be cheap (an atomic load or two).
    pub fn when(requested: &'a dyn Fn() -> bool) -> Cancel<'a> {
        Cancel(Some(requested))
    }

    /// True once the caller gave the run up.
    pub fn requested(&self) -> bool {
        self.0.is_some_and(|f| f())
    }
}

impl std::fmt::Debug for Cancel<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Cancel(when)" } else { "Cancel(never)" })
    }
}

/// The caller's answer after each token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Stop,
}

/// How a run ended, from the runtime's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// A stop token was sampled.
    StopToken,
    /// `max_tokens` were generated.
    Length,
    /// The callback returned [`Flow::Stop`], or [`DecodeJob::cancel`] fired during prefill.
    Stopped,
}

/// Which hardware a runtime runs on (for `/api/info` and the page's badge).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendInfo {
    /// `cpu` or `cuda`.
    pub kind: String,
    /// One name per device in use.
    pub devices: Vec<String>,
}

/// A model ready to generate.
pub trait Runtime: Send {
    /// The model's shape.
    fn config(&self) -> &ModelConfig;
    /// The hardware in use.
    fn backend(&self) -> BackendInfo;
    /// Runs the prompt, then samples up to `max_tokens`, calling `on_token` for each
    /// generated token (stop tokens excluded). Returns [`RunEnd::Stopped`] without a
    /// token when `job.cancel` fires before the prompt is done.
    fn generate(&mut self, job: &DecodeJob<'_>, on_token: &mut dyn FnMut(&Sampled) -> Flow) -> Result<RunEnd>;
    /// Logits of every position of `tokens` (prompt scoring).
    fn score(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>>;
    /// [`Runtime::score`] that gives up (`None`) once `cancel` fires; runtimes that
    /// score in chunks ask between them, others score to the end.
    fn score_unless(&mut self, tokens: &[u32], cancel: Cancel<'_>) -> Result<Option<Vec<Vec<f32>>>> {
        let _ = cancel;
        self.score(tokens).map(Some)
    }
    /// Prompt tokens the last [`Runtime::generate`] took from its cache instead of
    /// computing them (0 for runtimes that keep nothing).
    fn reused_prefix(&self) -> usize {
        0
    }
    /// How many rows of one sequence a step verifies (its token plus drafts), and what
    /// a row costs; runtimes that step one token at a time verify no drafts.
    fn verify_capacity(&self) -> VerifyCapacity {
        VerifyCapacity::SINGLE
    }
    /// Whether [`Runtime::generate`] masks each step's logits with
    /// [`DecodeJob::constraint`] (the host-sampling runtimes do); the engine refuses a
    /// constrained request on a runtime that does not, rather than ignore its grammar.
    fn follows_grammars(&self) -> bool {
        false
    }
    /// Drafted and accepted tokens of the last [`Runtime::generate`].
    fn draft_counts(&self) -> DraftCounts {
        DraftCounts::default()
    }
    /// The runtime's batch side, when it decodes several sequences per step; `None`
    /// runs one request at a time through [`Runtime::generate`].
    fn batch(&mut self) -> Option<&mut dyn BatchDecode> {
        None
    }
    /// [`Runtime::generate`] to the run's end, every sampled token kept (checks and benchmarks).
    #[cfg(feature = "lab")]
    fn generate_all(&mut self, job: &DecodeJob<'_>) -> Result<(Vec<Sampled>, RunEnd)> {
        let mut out = Vec::new();
        let end = self.generate(job, &mut |s: &Sampled| {
            out.push(s.clone());
            Flow::Continue
        })?;
        Ok((out, end))
    }
}

/// Length of the common prefix of `cached` and `prompt`, leaving at least the last
/// prompt token to run (its logits start the generation).
pub(crate) fn reusable_prefix(cached: &[u32], prompt: &[u32]) -> usize {
    let common = cached.iter().zip(prompt).take_while(|(a, b)| a == b).count();
    common.min(prompt.len().saturating_sub(1))
}

/// One sequence's tokens in a batch step: they follow what its slot holds.
#[derive(Debug, Clone, Copy)]
pub struct SlotTokens<'a> {
    pub slot: usize,
    pub tokens: &'a [u32],
    /// Trailing tokens whose logits the step keeps (1, or the token and its draft).
    pub logit_rows: usize,
}

/// A runtime that keeps several sequences (slots, each with its own KV cache) and runs
/// them in one pass per step, for continuous batching: the scheduler opens a slot per
/// request, feeds prompt chunks and sampled tokens, and closes it when the request ends.
pub trait BatchDecode {
    /// Most slots (sequences) this runtime can hold.
    fn capacity(&self) -> usize;
    /// The batch the engine uses when the operator does not say (measured per device).
    fn default_batch(&self) -> usize;
    /// Most tokens one step may carry, all slots together.
    fn step_tokens(&self) -> usize;
    /// Starts a sequence in `slot` with room for `positions` tokens for a request whose
    /// prompt is `prompt`: with `reuse`, the slot keeps the longest prefix of `prompt` it
    /// already holds (one token short of the whole prompt at most, so the last one still
    /// runs and gives logits) and returns its length; else it starts empty (0).
    fn open(&mut self, slot: usize, positions: usize, prompt: &[u32], reuse: bool) -> Result<usize>;
    /// How many leading tokens of `prompt` `slot` holds from its last sequence.
    fn cached_prefix(&self, slot: usize, prompt: &[u32]) -> usize;
    /// Runs each entry's tokens after what its slot holds (distinct slots, each with at
    /// least one token); afterwards [`Self::logits`] holds each entry's last
    /// `logit_rows` tokens' logits, entry after entry.
    fn step(&mut self, work: &[SlotTokens<'_>]) -> Result<()>;
    /// Logits row `i` of the last step (entries' rows in order).
    fn logits(&self, i: usize) -> &[f32];
    /// Drops the last `n` positions of `slot` (a draft's rejected rows).
    fn rollback(&mut self, slot: usize, n: usize);
    /// Ends `slot`'s sequence; its cache stays for a later request to reuse.
    fn close(&mut self, slot: usize);
}

/// Token `i` of a run, sampled from `logits` given `seen` (the prompt and the tokens
/// generated before it), within what `guide`'s grammar allows (the guide then takes
/// the token); `None` when it is a stop token, or the end the complete grammar allows.
/// The one sampling step of every host-side token loop, so a seed gives the same
/// tokens alone or batched.
pub(crate) fn next_token(
    logits: &[f32],
    sampling: &SamplingParams,
    seen: &[u32],
    i: usize,
    top_logprobs: usize,
    stop_tokens: &[u32],
    guide: Option<&mut Guide>,
) -> Result<Option<Sampled>> {
    let Some(guide) = guide else {
        let s = crate::sampling::sample(logits, sampling, seen, i as u64, top_logprobs);
        return Ok((!stop_tokens.contains(&s.id)).then_some(s));
    };
    let s = crate::sampling::sample(guide.mask(logits)?, sampling, seen, i as u64, top_logprobs);
    if stop_tokens.contains(&s.id) || guide.is_end(s.id) {
        return Ok(None);
    }
    guide.commit(s.id)?;
    Ok(Some(s))
}

/// The architecture this binary was built for (when /proc/cpuinfo names no model).
const TARGET_ARCH: &str = if cfg!(target_arch = "x86_64") {
    "x86_64"
} else if cfg!(target_arch = "aarch64") {
    "aarch64"
} else {
    "unknown architecture"
};

/// Name of this machine's CPU, from /proc/cpuinfo when readable.
pub fn cpu_name() -> String {
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("model name")).and_then(|l| l.split(':').nth(1)).map(|m| m.trim().to_string()))
        .unwrap_or_else(|| TARGET_ARCH.to_string());
    format!("{model} ({threads} threads)")
}
