//! Runs for checks that compare whole outputs: a job's sampled tokens and how the run
//! ended, the ids alone, and a run its token callback stops.

use crate::error::Result;
use crate::runtime::{Cancel, DecodeJob, Flow, RunEnd, Runtime};
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
    let job = DecodeJob { prompt, max_tokens, sampling, stop_tokens: stops, top_logprobs: top, cancel: Cancel::NEVER, reuse_prefix: false, draft: crate::speculative::DraftPlan::OFF, constraint: None };
    rt.generate_all(&job)
}

/// Generates up to `max_tokens` after `prompt` and stops the run from its token
/// callback at the `n`-th token: the ids the callback saw and how the run ended.
pub fn stopped_after<R: Runtime + ?Sized>(
    rt: &mut R,
    prompt: &[u32],
    max_tokens: usize,
    sampling: &SamplingParams,
    n: usize,
) -> Result<(Vec<u32>, RunEnd)> {
    let job = DecodeJob { prompt, max_tokens, sampling, stop_tokens: &[], top_logprobs: 0, cancel: Cancel::NEVER, reuse_prefix: false, draft: crate::speculative::DraftPlan::OFF, constraint: None };
    let mut seen = Vec::new();
    let end = rt.generate(&job, &mut |s: &Sampled| {
        seen.push(s.id);
        if seen.len() == n {
            Flow::Stop
        } else {
            Flow::Continue
        }
    })?;
    Ok((seen, end))
}

/// [`collect`] with drafting as `draft` allows: the sampled tokens, how the run ended
/// and the runtime's draft counts.
pub fn collect_drafting<R: Runtime + ?Sized>(
    rt: &mut R,
    prompt: &[u32],
    max_tokens: usize,
    sampling: &SamplingParams,
    draft: crate::speculative::DraftPlan,
) -> Result<(Vec<Sampled>, RunEnd, crate::speculative::DraftCounts)> {
    let job = DecodeJob { prompt, max_tokens, sampling, stop_tokens: &[], top_logprobs: 0, cancel: Cancel::NEVER, reuse_prefix: false, draft, constraint: None };
    let (out, end) = rt.generate_all(&job)?;
    Ok((out, end, rt.draft_counts()))
}

/// Runs `job`: the token ids and the decode seconds, from the first token to the last
/// (the benchmarks' decode rate is the tokens after the first over them).
pub fn timed<R: Runtime + ?Sized>(rt: &mut R, job: &DecodeJob<'_>) -> Result<(Vec<u32>, f64)> {
    let mut ids = Vec::new();
    let (mut first, mut last) = (None, std::time::Instant::now());
    rt.generate(job, &mut |s: &Sampled| {
        last = std::time::Instant::now();
        first.get_or_insert(last);
        ids.push(s.id);
        Flow::Continue
    })?;
    Ok((ids, first.map_or(0.0, |f| last.duration_since(f).as_secs_f64())))
}

/// The token ids of a run.
pub fn ids(sampled: &[Sampled]) -> Vec<u32> {
    sampled.iter().map(|s| s.id).collect()
}
