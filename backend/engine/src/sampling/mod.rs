//! Token sampling on the CPU: logit bias, repetition penalty, OpenAI's presence and
//! frequency penalties, temperature, top-k, top-p, min-p, greedy, and the top-k
//! log-probabilities of the chosen token. The random draw is
//! counter-based (seed, step) so the GPU kernel can reproduce it exactly.

use std::borrow::Cow;

use crate::cpu::isa::Isa;
use crate::cpu::vecops;

mod draw;

/// Default number of candidate tokens kept by top-k (0 = all).
pub const DEFAULT_TOP_K: usize = 0;
/// Largest `top_logprobs` a request may ask for.
pub const MAX_TOP_LOGPROBS: usize = 20;

/// How to pick the next token.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// 0 means greedy (argmax).
    pub temperature: f32,
    /// Keep only the k most likely tokens (0 = no limit).
    pub top_k: usize,
    /// Keep the smallest set whose probability mass reaches p (1.0 = no limit).
    pub top_p: f32,
    /// Drop tokens whose probability is below min_p × the best one's (0 = off).
    pub min_p: f32,
    /// Divide positive logits (multiply negative) of already-seen tokens (1.0 = off).
    pub repetition_penalty: f32,
    /// Same seed ⇒ same tokens.
    pub seed: u64,
    /// OpenAI's: subtracted once from the logit of every token generated so far (0 = off).
    pub presence_penalty: f32,
    /// OpenAI's: subtracted from a token's logit per time it was generated so far (0 = off).
    pub frequency_penalty: f32,
    /// Added to the logits of these tokens (OpenAI's `logit_bias`, −100..100).
    pub logit_bias: Vec<(u32, f32)>,
}

/// Largest penalty magnitude OpenAI accepts.
pub const MAX_PENALTY: f32 = 2.0;
/// Largest logit-bias magnitude OpenAI accepts.
pub const MAX_LOGIT_BIAS: f32 = 100.0;

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_k: DEFAULT_TOP_K,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            seed: 0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            logit_bias: Vec::new(),
        }
    }
}

impl SamplingParams {
    /// Checks ranges; a bad value is a clear error, not a NaN later.
    pub fn validate(&self) -> crate::Result<()> {
        let bad = |what: &str| Err(crate::Error::InvalidRequest(what.to_string()));
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return bad("temperature must be a finite number ≥ 0");
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad("top_p must be in (0, 1]");
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad("min_p must be in [0, 1]");
        }
        if !(self.repetition_penalty.is_finite() && self.repetition_penalty > 0.0) {
            return bad("repetition_penalty must be a finite number > 0");
        }
        for (name, v) in [("presence_penalty", self.presence_penalty), ("frequency_penalty", self.frequency_penalty)] {
            if !(v.is_finite() && v.abs() <= MAX_PENALTY) {
                return Err(crate::Error::InvalidRequest(format!("{name} must be between -{MAX_PENALTY} and {MAX_PENALTY}")));
            }
        }
        if self.logit_bias.iter().any(|&(_, b)| !(b.is_finite() && b.abs() <= MAX_LOGIT_BIAS)) {
            return bad("logit_bias values must be between -100 and 100");
        }
        // One bias per token: the GPU adds a per-token table, so a token listed twice
        // would need the CPU's order of additions to agree.
        let mut ids: Vec<u32> = self.logit_bias.iter().map(|&(id, _)| id).collect();
        ids.sort_unstable();
        if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
            return Err(crate::Error::InvalidRequest(format!("logit_bias names token {} more than once", w[0])));
        }
        Ok(())
    }
}

/// One alternative token with its log-probability.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenLogprob {
    pub id: u32,
    pub logprob: f32,
}

/// The chosen token and what the caller may report about it.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampled {
    pub id: u32,
    /// log-softmax of the raw logits (before penalties and temperature) at `id`.
    pub logprob: f32,
    /// The most likely alternatives by the same measure, best first.
    pub top: Vec<TokenLogprob>,
    /// A drafted token the model accepted: it came out of the same pass over the
    /// weights as the token before it (speculative decoding).
    pub accepted_draft: bool,
}

/// A uniform draw in [0, 1) from (seed, step): splitmix64 finaliser over a combined
/// counter; the CUDA kernel implements the same function.
pub fn uniform(seed: u64, step: u64) -> f32 {
    let mut z = seed ^ step.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(0xD1B5_4A32_D192_ED03);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    // 24 high bits: exactly representable in f32, strictly below 1.
    (z >> 40) as f32 / (1u64 << 24) as f32
}

/// log Σ e^l over the logits (stable: shifted by their maximum), so that a logit's
/// log-softmax value is `l − log_z`. Vectorised: it runs for every sampled token on the
/// engine thread while the CPU runtime's workers wait, over 50k–150k logits.
pub fn log_normalizer(logits: &[f32]) -> f32 {
    let isa = Isa::detect(None);
    log_normalizer_at(isa, logits, vecops::max_value(isa, logits))
}

/// [`log_normalizer`] given the logits' maximum.
fn log_normalizer_at(isa: Isa, logits: &[f32], max: f32) -> f32 {
    max + vecops::sum_exp(isa, logits, max).ln() as f32
}

/// log-softmax value of every entry (stable).
pub fn log_softmax(logits: &[f32]) -> Vec<f32> {
    let log_z = log_normalizer(logits);
    logits.iter().map(|&l| l - log_z).collect()
}

/// Up to this k, top-k is one insertion pass; above it, a selection and a sort.
const SMALL_TOP_K: usize = 64;

/// The `k` best (index, value) pairs, best first; ties go to the lower index.
pub fn top_k_indices(values: &[f32], k: usize) -> Vec<(u32, f32)> {
    if k == 0 {
        return Vec::new();
    }
    let best_first = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    if k > SMALL_TOP_K {
        let mut all: Vec<(u32, f32)> = values.iter().enumerate().map(|(i, &v)| (i as u32, v)).collect();
        if k < all.len() {
            all.select_nth_unstable_by(k - 1, best_first);
            all.truncate(k);
        }
        all.sort_unstable_by(best_first);
        return all;
    }
    let mut best: Vec<(u32, f32)> = Vec::with_capacity(k + 1);
    // Once k are held, most of a vocabulary falls below the k-th: a block whose
    // (vectorised) maximum does is skipped whole.
    const BLOCK: usize = 64;
    for (b, block) in values.chunks(BLOCK).enumerate() {
        if best.len() == k && vecops::max_generic(block) <= best[k - 1].1 {
            continue;
        }
        for (j, &v) in block.iter().enumerate() {
            if best.len() == k && v <= best[k - 1].1 {
                continue;
            }
            let pos = best.partition_point(|&(_, b)| b >= v);
            best.insert(pos, ((b * BLOCK + j) as u32, v));
            if best.len() > k {
                best.pop();
            }
        }
    }
    best
}

/// The index of `values`' largest value `best`, the lowest on ties (as
/// `top_k_indices(values, 1)`).
fn argmax(values: &[f32], best: f32) -> u32 {
    values.iter().position(|&v| v == best).unwrap_or(0) as u32
}

/// Picks the next token from `logits`, given the tokens seen so far (for the
/// repetition penalty) and the index of this draw (for the RNG).
pub fn sample(logits: &[f32], params: &SamplingParams, seen: &[u32], step: u64, top_logprobs: usize) -> Sampled {
    // One vectorised pass for the maximum, which the normaliser and the choice share.
    let isa = Isa::detect(None);
    let max = vecops::max_value(isa, logits);
    let log_z = log_normalizer_at(isa, logits, max);
    // log-softmax is the logits shifted by one constant: the same order.
    let top = top_k_indices(logits, top_logprobs.min(MAX_TOP_LOGPROBS))
        .into_iter()
        .map(|(id, l)| TokenLogprob { id, logprob: l - log_z })
        .collect();
    let id = choose(logits, max, params, seen, step);
    Sampled { id, logprob: logits[id as usize] - log_z, top, accepted_draft: false }
}

/// The logits sampling draws from: `logits` with the logit bias added, then the
/// repetition penalty over every seen token (prompt included, as llama.cpp), then
/// OpenAI's presence and frequency penalties over the `step` tokens generated so far
/// (the last `step` of `seen`): `l − count·frequency − (count > 0)·presence`.
/// Borrowed when no adjustment applies (greedy decoding copies nothing).
pub fn adjusted_logits<'a>(logits: &'a [f32], params: &SamplingParams, seen: &[u32], step: u64) -> Cow<'a, [f32]> {
    let neutral = params.logit_bias.is_empty()
        && params.repetition_penalty == 1.0
        && params.presence_penalty == 0.0
        && params.frequency_penalty == 0.0;
    if neutral {
        return Cow::Borrowed(logits);
    }
    let mut adjusted = logits.to_vec();
    for &(id, bias) in &params.logit_bias {
        if let Some(l) = adjusted.get_mut(id as usize) {
            *l += bias;
        }
    }
    if params.repetition_penalty != 1.0 {
        // Penalise each distinct seen token once (as llama.cpp and transformers do).
        let mut done = vec![false; adjusted.len()];
        for &t in seen {
            let t = t as usize;
            if t < adjusted.len() && !done[t] {
                done[t] = true;
                let l = adjusted[t];
                adjusted[t] = if l > 0.0 { l / params.repetition_penalty } else { l * params.repetition_penalty };
            }
        }
    }
    if params.presence_penalty != 0.0 || params.frequency_penalty != 0.0 {
        let generated = &seen[seen.len().saturating_sub(step as usize)..];
        let mut counts = std::collections::HashMap::<usize, u32>::new();
        for &t in generated {
            *counts.entry(t as usize).or_default() += 1;
        }
        for (t, c) in counts {
            if let Some(l) = adjusted.get_mut(t) {
                *l -= c as f32 * params.frequency_penalty + params.presence_penalty;
            }
        }
    }
    Cow::Owned(adjusted)
}

/// The token `params` pick from `logits` (whose maximum is `max`).
fn choose(logits: &[f32], max: f32, params: &SamplingParams, seen: &[u32], step: u64) -> u32 {
    let adjusted = adjusted_logits(logits, params, seen, step);
    // The raw logits' maximum serves unless an adjustment made a copy.
    let best = match &adjusted {
        Cow::Borrowed(_) => max,
        Cow::Owned(a) => vecops::max_value(Isa::detect(None), a),
    };
    if params.temperature == 0.0 {
        return argmax(&adjusted, best);
    }
    draw::draw(&adjusted, best, params, step)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(temperature: f32) -> SamplingParams {
        SamplingParams { temperature, seed: 7, ..Default::default() }
    }

    #[test]
    fn greedy_picks_the_argmax_and_reports_logprobs() {
        let s = sample(&[0.5, 3.0, -1.0, 2.9], &params(0.0), &[], 0, 2);
        assert_eq!(s.id, 1);
        assert_eq!(s.top.iter().map(|t| t.id).collect::<Vec<_>>(), vec![1, 3]);
        let total: f32 = log_softmax(&[0.5, 3.0, -1.0, 2.9]).iter().map(|l| l.exp()).sum();
        assert!((total - 1.0).abs() < 1e-5);
    }

    #[test]
    fn argmax_takes_the_lowest_index_of_a_tie_as_top_k_does() {
        let mut values: Vec<f32> = (0..1000).map(|i| (i % 17) as f32).collect();
        values[40] = 30.0;
        values[700] = 30.0;
        let argmax = |v: &[f32]| argmax(v, vecops::max_value(Isa::detect(None), v));
        assert_eq!(argmax(&values), 40);
        assert_eq!(argmax(&values), top_k_indices(&values, 1)[0].0);
        assert_eq!(argmax(&values[41..]), 659);
    }

    #[test]
    fn repetition_penalty_moves_greedy_off_a_seen_token() {
        let p = SamplingParams { repetition_penalty: 1.5, ..params(0.0) };
        assert_eq!(sample(&[0.5, 3.0, -1.0, 2.9], &p, &[1, 1], 0, 0).id, 3);
    }

    #[test]
    fn same_seed_same_tokens_and_different_seeds_differ() {
        let logits: Vec<f32> = (0..100).map(|i| ((i * 37) % 11) as f32 * 0.3).collect();
        let run = |seed| (0..64).map(|s| sample(&logits, &SamplingParams { seed, ..params(1.0) }, &[], s, 0).id).collect::<Vec<_>>();
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
    }

    #[test]
    fn top_k_one_is_greedy_and_top_p_tiny_is_greedy() {
        let logits = [0.1, 0.2, 5.0, 0.3];
        for step in 0..32 {
            assert_eq!(sample(&logits, &SamplingParams { top_k: 1, ..params(2.0) }, &[], step, 0).id, 2);
            assert_eq!(sample(&logits, &SamplingParams { top_p: 0.01, ..params(2.0) }, &[], step, 0).id, 2);
        }
    }

    #[test]
    fn min_p_drops_unlikely_tokens() {
        // Token 3 has probability ~e^-6 of the best; min_p 0.01 must never pick it.
        let logits = [6.0, 5.5, 5.8, 0.0];
        for step in 0..500 {
            let id = sample(&logits, &SamplingParams { min_p: 0.01, ..params(1.0) }, &[], step, 0).id;
            assert_ne!(id, 3);
        }
    }

    #[test]
    fn temperature_sampling_follows_the_distribution() {
        let logits = [0.0f32, (3.0f32).ln()]; // p = 0.25, 0.75
        let n = 20_000;
        let ones = (0..n).filter(|&s| sample(&logits, &params(1.0), &[], s, 0).id == 1).count();
        let frac = ones as f64 / n as f64;
        assert!((frac - 0.75).abs() < 0.02, "got {frac}");
    }

    #[test]
    fn large_top_k_agrees_with_a_full_sort() {
        let values: Vec<f32> = (0..5000).map(|i| ((i * 7919) % 1000) as f32 * 0.01).collect();
        let mut sorted: Vec<(u32, f32)> = values.iter().enumerate().map(|(i, &v)| (i as u32, v)).collect();
        sorted.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        for k in [1, 5, 64, 65, 1000, 5000, 9000] {
            assert_eq!(top_k_indices(&values, k), sorted[..k.min(5000)].to_vec(), "k = {k}");
        }
    }

    #[test]
    fn uniform_is_in_range() {
        for s in 0..10_000 {
            let u = uniform(42, s);
            assert!((0.0..1.0).contains(&u));
        }
    }

    #[test]
    fn invalid_params_are_errors() {
        assert!(SamplingParams { temperature: -1.0, ..Default::default() }.validate().is_err());
        assert!(SamplingParams { top_p: 0.0, ..Default::default() }.validate().is_err());
        assert!(SamplingParams { repetition_penalty: f32::NAN, ..Default::default() }.validate().is_err());
        assert!(SamplingParams::default().validate().is_ok());
    }
}
