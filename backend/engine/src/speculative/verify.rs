//! The token loop of a host-stepped runtime with drafts: each step runs the pending
//! token and its draft as rows of one sequence, then walks the rows in order, sampling
//! each exactly as plain decoding would at that position and index; a drafted token
//! is accepted while it equals the sampled one. The first sampled token that differs
//! (or the one after a fully accepted draft) is the next step's pending token, and the
//! rejected rows leave the KV cache.
//!
//! This is the speculative-sampling rule for a point-mass draft: the draft `d` is
//! accepted with the probability `p(d)` the target gives it, and on a miss the emitted
//! token is a draw from `p` conditioned on not being `d`, which is `p` with `d` removed
//! and renormalised. Drawing with the same counter-based uniform that plain decoding
//! uses at that index couples the two, so a seeded run emits the very tokens it would
//! without speculation, not only tokens of the same distribution.
//!
//! A grammar keeps it exact: row `j` is masked by the grammar after the first `j`
//! emitted tokens, which are the accepted drafts, so the guide only ever takes emitted
//! tokens and a rejected row needs nothing undone in it.

use crate::constraint::Guide;
use crate::error::Result;
use crate::runtime::{next_token, DecodeJob, Flow, RunEnd};
use crate::sampling::{Sampled, SamplingParams};
use crate::speculative::{Draft, DraftCounts, Drafter};

/// Runs `job`'s decoding after its prompt ran: `logits(state, j)` are the logits of
/// row `j` of the last step (row 0 after the prefill), `step(state, tokens)` runs
/// tokens after what the cache holds and leaves logits for every one of them,
/// `rollback(state, n)` drops the last `n` positions. Returns how the run ended and
/// its draft counts.
pub(crate) fn decode_speculative<S>(
    state: &mut S,
    job: &DecodeJob<'_>,
    on_token: &mut dyn FnMut(&Sampled) -> Flow,
    logits: impl Fn(&S, usize) -> &[f32],
    mut step: impl FnMut(&mut S, &[u32]) -> Result<()>,
    mut rollback: impl FnMut(&mut S, usize),
) -> Result<(RunEnd, DraftCounts)> {
    let mut drafter = Drafter::new(job.draft);
    let mut seen = job.prompt.to_vec();
    let mut generated = 0usize;
    let mut draft = Draft::default();
    let mut rows = Vec::with_capacity(job.draft.max + 1);
    let target = Target::of(job);
    let mut guide = job.constraint.map(|c| c.guide());
    loop {
        let verdict = verify(&target, guide.as_mut(), on_token, &|j| logits(state, j), &draft, &mut seen, &mut generated)?;
        drafter.record(&draft, verdict.accepted, verdict.next);
        let Some(token) = verdict.next else {
            return Ok((verdict.end.expect("a run without a next token has ended"), drafter.counts));
        };
        let rejected = draft.tokens.len() - verdict.accepted;
        if rejected > 0 {
            rollback(state, rejected);
        }
        // Drafts beyond what the run may still emit would be verified for nothing.
        draft = drafter.draft(&seen, job.max_tokens - generated - 1);
        rows.clear();
        rows.push(token);
        rows.extend_from_slice(&draft.tokens);
        step(state, &rows)?;
    }
}

/// What verifying one step's rows gave.
pub(crate) struct Verdict {
    /// Drafted tokens accepted.
    pub accepted: usize,
    /// The token the next step runs first; `None` when the run ended.
    pub next: Option<u32>,
    /// How the run ended, when it did.
    pub end: Option<RunEnd>,
}

/// How a request's tokens are chosen and when its run ends.
pub(crate) struct Target<'a> {
    pub sampling: &'a SamplingParams,
    pub stop_tokens: &'a [u32],
    pub top_logprobs: usize,
    pub max_tokens: usize,
}

impl<'a> Target<'a> {
    pub fn of(job: &DecodeJob<'a>) -> Target<'a> {
        Target { sampling: job.sampling, stop_tokens: job.stop_tokens, top_logprobs: job.top_logprobs, max_tokens: job.max_tokens }
    }
}

/// Samples the rows of the last step in order (row `j` follows the step's token and
/// the first `j` drafted tokens), within `guide`'s grammar when there is one, handing
/// each token to `on_token`, until a sampled token differs from the draft, the draft
/// is used up, or the run ends (a complete grammar ends it as a stop token does). An
/// error: the grammar can no longer be followed.
pub(crate) fn verify<'l>(
    job: &Target<'_>,
    mut guide: Option<&mut Guide>,
    on_token: &mut dyn FnMut(&Sampled) -> Flow,
    logits: &dyn Fn(usize) -> &'l [f32],
    draft: &Draft,
    seen: &mut Vec<u32>,
    generated: &mut usize,
) -> Result<Verdict> {
    let ended = |accepted, end| Ok(Verdict { accepted, next: None, end: Some(end) });
    for j in 0..=draft.tokens.len() {
        let sampled = next_token(logits(j), job.sampling, seen, *generated, job.top_logprobs, job.stop_tokens, guide.as_deref_mut())?;
        let Some(mut s) = sampled else { return ended(j, RunEnd::StopToken) };
        let hit = draft.tokens.get(j) == Some(&s.id);
        s.accepted_draft = hit;
        if on_token(&s) == Flow::Stop {
            return ended(j, RunEnd::Stopped);
        }
        seen.push(s.id);
        *generated += 1;
        if guide.as_deref().is_some_and(Guide::complete) {
            return ended(j + usize::from(hit), RunEnd::StopToken);
        }
        if *generated == job.max_tokens {
            return ended(j + usize::from(hit), RunEnd::Length);
        }
        if !hit {
            return Ok(Verdict { accepted: j, next: Some(s.id), end: None });
        }
    }
    unreachable!("the last row has no draft to match, so the loop returns by it")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Logits of a five-token vocabulary at temperature 1: p = [0.1, 0.2, 0.3, 0.15, 0.25].
    const P: [f64; 5] = [0.1, 0.2, 0.3, 0.15, 0.25];

    fn logits() -> Vec<f32> {
        P.iter().map(|p| p.ln() as f32).collect()
    }

    /// One verification of `draft` (a point mass on one token) at row 0, seed `seed`:
    /// the token emitted first, and whether the draft was accepted.
    fn verify_once(draft: u32, seed: u64) -> (u32, bool) {
        let rows = [logits(), logits()];
        let sampling = SamplingParams { temperature: 1.0, seed, ..SamplingParams::default() };
        let target = Target { sampling: &sampling, stop_tokens: &[], top_logprobs: 0, max_tokens: 8 };
        let mut emitted = Vec::new();
        let mut on_token = |s: &Sampled| {
            emitted.push(s.id);
            Flow::Continue
        };
        let draft = Draft { tokens: vec![draft], guess: Some(draft) };
        let (mut seen, mut generated) = (vec![0u32], 0);
        let v = verify(&target, None, &mut on_token, &|j| rows[j].as_slice(), &draft, &mut seen, &mut generated).unwrap();
        (emitted[0], v.accepted == 1)
    }

    #[test]
    fn a_point_mass_draft_is_accepted_with_its_probability_and_the_output_keeps_the_distribution() {
        // Enough draws that a rule off by a few points fails: the standard error of a
        // frequency near 0.3 over 40k draws is about 0.0023, and the bounds are 5 of it.
        let n = 40_000u64;
        for draft in [0u32, 2, 4] {
            let mut accepted = 0u64;
            let mut counts = [0u64; 5];
            for seed in 0..n {
                let (first, hit) = verify_once(draft, seed.wrapping_mul(0x9E37_79B9) ^ u64::from(draft));
                accepted += u64::from(hit);
                counts[first as usize] += 1;
                assert_eq!(hit, first == draft, "accepted exactly when the emitted token is the draft");
            }
            let p_d = P[draft as usize];
            let rate = accepted as f64 / n as f64;
            let sd = (p_d * (1.0 - p_d) / n as f64).sqrt();
            assert!((rate - p_d).abs() < 5.0 * sd, "draft {draft}: accepted {rate}, p = {p_d}");
            // Emitted tokens follow p: a rejection draws from p without the draft,
            // renormalised, so the mixture is p itself (Pearson's χ², 4 degrees of
            // freedom; 20 is beyond the 0.999 quantile).
            let chi2: f64 = counts.iter().zip(P).map(|(&c, p)| (c as f64 - p * n as f64).powi(2) / (p * n as f64)).sum();
            assert!(chi2 < 20.0, "draft {draft}: χ² = {chi2:.1} for counts {counts:?}");
        }
    }
}
