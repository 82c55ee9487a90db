//! Runs to completion, for checks that compare whole outputs: a job's sampled tokens
//! and how the run ended, and the ids alone.

use crate::error::Result;
use crate::runtime::{Cancel, DecodeJob, RunEnd, Runtime};
use crate::sampling::{Sampled, SamplingParams};

/// Generates up to `max_tokens` after `prompt` (no prompt reuse, never cancelled),
/// with `top` log-probabilities per token.
pub fn collect<R: Runtime + ?Sized>(
    rt: &mut R,
    prompt: &[u32],
    max_tokens: usize,
    sampling: &SamplingParams,
    stops: &[u32],
    top: usize,
) -> Result<(Vec<Sampled>, RunEnd)> {
    let job = DecodeJob { prompt, max_tokens, sampling, stop_tokens: stops, top_logprobs: top, cancel: Cancel::NEVER, reuse_prefix: false };
    rt.generate_all(&job)
}

/// The token ids of a run.
pub fn ids(sampled: &[Sampled]) -> Vec<u32> {
    sampled.iter().map(|s| s.id).collect()
}
