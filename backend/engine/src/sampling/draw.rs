//! A temperature draw: softmax over the candidates at the temperature, min-p relative
//! to the best, the top-p nucleus, then the candidate whose running mass (best first)
//! passes `uniform(seed, step)` of the kept mass.
//!
//! Over the whole vocabulary the weights and their total come from one vectorised
//! pass; only the head of the ranking is sorted, and it is widened when the cuts or the
//! draw reach past it. A trained model's draws almost always end within the best 64
//! candidates, so a sampled token costs about as much as a greedy one instead of a
//! sort of 50k–150k logits.

use crate::cpu::isa::Isa;
use crate::cpu::vecops;
use crate::sampling::{top_k_indices, uniform, SamplingParams};

/// Candidates ranked first; each widening ranks this many times more.
const FIRST_HEAD: usize = 64;
const WIDEN: usize = 16;

/// The token a draw at `params.temperature` (> 0) picks from the adjusted `logits`,
/// whose maximum is `best`.
pub(super) fn draw(logits: &[f32], best: f32, params: &SamplingParams, step: u64) -> u32 {
    let u = f64::from(uniform(params.seed, step));
    let n = logits.len();
    if params.top_k > 0 && params.top_k < n {
        let ranked = top_k_indices(logits, params.top_k);
        let weights: Vec<f32> = ranked.iter().map(|&(_, l)| vecops::exp_fast((l - best) / params.temperature)).collect();
        let total = weights.iter().map(|&w| f64::from(w)).sum();
        return decide(&ranked, |i| f64::from(weights[i]), total, true, params, u).expect("a complete ranking decides");
    }
    let mut weights = vec![0.0f32; n];
    let total = vecops::exp_weights(Isa::detect(None), logits, best, params.temperature, &mut weights);
    let mut head = FIRST_HEAD.min(n);
    loop {
        let ranked = top_k_indices(logits, head);
        let complete = head == n;
        if let Some(id) = decide(&ranked, |i| f64::from(weights[ranked[i].0 as usize]), total, complete, params, u) {
            return id;
        }
        head = if head * WIDEN >= n / 2 { n } else { head * WIDEN };
    }
}

/// What the best candidates `ranked` (best first, `weight(i)` = e^((l_i − best)/T),
/// `total` over all candidates) decide of the draw: the token, or `None` when the cuts
/// or the draw reach past them (`complete`: they are all the candidates).
fn decide(
    ranked: &[(u32, f32)],
    weight: impl Fn(usize) -> f64,
    total: f64,
    complete: bool,
    params: &SamplingParams,
    u: f64,
) -> Option<u32> {
    // p ≥ min_p · p_best ⇔ weight ≥ min_p, since the best candidate's weight is 1.
    let floor = f64::from(params.min_p);
    let nucleus = if params.top_p < 1.0 { f64::from(params.top_p) * total } else { f64::INFINITY };
    let mut mass = 0.0;
    let mut kept = None;
    for i in 0..ranked.len() {
        let w = weight(i);
        if w < floor {
            kept = Some(i.max(1));
            break;
        }
        mass += w;
        if mass >= nucleus {
            kept = Some(i + 1);
            break;
        }
    }
    // `decided`: the kept set ends within `ranked`, so a draw past its mass (by
    // rounding only) takes its last candidate.
    let (kept, kept_mass, decided) = match kept {
        Some(k) => (k, (0..k).map(&weight).sum(), true),
        None if complete => (ranked.len(), mass, true),
        // No cut applies: every candidate is kept and the draw may still end in the head.
        None if floor <= 0.0 && nucleus.is_infinite() => (ranked.len(), total, false),
        None => return None,
    };
    let target = u * kept_mass;
    let mut acc = 0.0;
    for (i, &(id, _)) in ranked[..kept].iter().enumerate() {
        acc += weight(i);
        if target < acc {
            return Some(id);
        }
    }
    decided.then(|| ranked[kept - 1].0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The draw by definition: every candidate ranked, f64 probabilities.
    fn by_full_sort(logits: &[f32], params: &SamplingParams, step: u64) -> u32 {
        let k = if params.top_k == 0 { logits.len() } else { params.top_k.min(logits.len()) };
        let candidates = top_k_indices(logits, k);
        let max = candidates[0].1;
        let mut probs: Vec<f64> = candidates.iter().map(|&(_, l)| (((l - max) / params.temperature) as f64).exp()).collect();
        let total: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|p| *p /= total);
        let floor = params.min_p as f64 * probs[0];
        let mut keep = probs.iter().take_while(|&&p| p >= floor).count().max(1);
        if params.top_p < 1.0 {
            let mut mass = 0.0;
            for (i, &p) in probs[..keep].iter().enumerate() {
                mass += p;
                if mass >= params.top_p as f64 {
                    keep = i + 1;
                    break;
                }
            }
        }
        let kept_mass: f64 = probs[..keep].iter().sum();
        let target = uniform(params.seed, step) as f64 * kept_mass;
        let mut acc = 0.0;
        for (i, &p) in probs[..keep].iter().enumerate() {
            acc += p;
            if target < acc {
                return candidates[i].0;
            }
        }
        candidates[keep - 1].0
    }

    /// Logits shaped like a language model's: a few strong candidates over a long
    /// tail spread across ~20 units, from a small deterministic generator.
    fn lm_like(n: usize, seed: u64) -> Vec<f32> {
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|i| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let r = (state >> 40) as f32 / (1u64 << 24) as f32;
                let strong = if i % 997 == 3 { 8.0 } else { 0.0 };
                r * 20.0 - 10.0 + strong
            })
            .collect()
    }

    /// [`draw`] given the logits' maximum.
    fn draw(logits: &[f32], params: &SamplingParams, step: u64) -> u32 {
        super::draw(logits, vecops::max_value(Isa::detect(None), logits), params, step)
    }

    #[test]
    fn partial_ranking_draws_what_a_full_sort_draws() {
        let settings = [
            SamplingParams { temperature: 1.0, ..Default::default() },
            SamplingParams { temperature: 3.0, ..Default::default() },
            SamplingParams { temperature: 0.7, top_p: 0.95, ..Default::default() },
            SamplingParams { temperature: 1.0, top_p: 0.5, ..Default::default() },
            SamplingParams { temperature: 1.0, min_p: 0.05, ..Default::default() },
            SamplingParams { temperature: 2.0, min_p: 0.001, top_p: 0.9, ..Default::default() },
            SamplingParams { temperature: 0.8, top_k: 40, top_p: 0.95, ..Default::default() },
            SamplingParams { temperature: 1.0, top_k: 500, ..Default::default() },
        ];
        let mut past_head = 0;
        for (s, params) in settings.iter().enumerate() {
            let logits = lm_like(20_000, s as u64);
            let head = top_k_indices(&logits, FIRST_HEAD);
            for step in 0..300 {
                let params = SamplingParams { seed: 11 + s as u64, ..params.clone() };
                let id = draw(&logits, &params, step);
                assert_eq!(id, by_full_sort(&logits, &params, step), "setting {s}, step {step}");
                past_head += usize::from(!head.iter().any(|&(h, _)| h == id));
            }
        }
        // The flat settings must have exercised the widening.
        assert!(past_head > 100, "only {past_head} draws ended past the first head");
    }

    #[test]
    fn a_peaked_distribution_draws_within_the_head() {
        let mut logits = vec![-5.0f32; 50_000];
        logits[123] = 10.0;
        logits[77] = 9.5;
        let params = SamplingParams { temperature: 1.0, seed: 3, ..Default::default() };
        for step in 0..200 {
            let id = draw(&logits, &params, step);
            assert_eq!(id, by_full_sort(&logits, &params, step));
            assert!(id == 123 || id == 77 || logits[id as usize] == -5.0);
        }
    }
}
