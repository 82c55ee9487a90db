//! Throughput of a [`Runtime`] as `peregrine bench` reports it (llama-bench's
//! pp/tg split): prefill = a long prompt through to its first sampled token;
//! decode = tokens generated after a short prompt, each a forward pass plus
//! `sample()`. Wall-clock, end to end; written against the trait so any device's
//! runtime can be measured the same way.

use std::time::{Duration, Instant};

use peregrine_engine::runtime::{Cancel, DecodeJob, Flow, Runtime};
use peregrine_engine::sampling::SamplingParams;
use peregrine_engine::tokenizer::Tokenizer;
use peregrine_engine::{Error, Result};

/// Prompt length of the prefill measurement.
pub const DEFAULT_PROMPT_TOKENS: usize = 256;
/// Tokens generated in the decode measurement.
pub const DEFAULT_GEN_TOKENS: usize = 128;
/// Prompt length before the decode measurement ("a short prompt").
pub const DEFAULT_SHORT_PROMPT_TOKENS: usize = 8;
/// Measurements per side; medians are reported.
pub const DEFAULT_RUNS: usize = 5;
/// Source text of the benchmark prompt (code, like the product's traffic); repeated
/// until it has enough tokens.
const BENCH_TEXT: &str = "def quicksort(items):\n    \"\"\"Sort a list with the quicksort algorithm.\"\"\"\n    if len(items) <= 1:\n        return items\n    pivot = items[len(items) // 2]\n    left = [x for x in items if x < pivot]\n    middle = [x for x in items if x == pivot]\n    right = [x for x in items if x > pivot]\n    return quicksort(left) + middle + quicksort(right)\n\n\nclass Stack:\n    def __init__(self):\n        self._items = []\n\n    def push(self, item):\n        self._items.append(item)\n\n    def pop(self):\n        return self._items.pop()\n\n";

/// The token ids both sides of a comparison run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BenchPlan {
    /// The prefill prompt.
    pub prompt: Vec<u32>,
    /// The prompt before decoding.
    pub short_prompt: Vec<u32>,
    /// Tokens to generate after the short prompt.
    pub gen_tokens: usize,
}

impl BenchPlan {
    /// Deterministic prompts from the benchmark text (or a fixed id pattern when
    /// the model has no tokenizer).
    pub fn new(
        tokenizer: Option<&Tokenizer>,
        vocab_size: usize,
        prompt_tokens: usize,
        short_tokens: usize,
        gen_tokens: usize,
    ) -> Result<BenchPlan> {
        if prompt_tokens == 0 || short_tokens == 0 || gen_tokens == 0 {
            return Err(Error::InvalidRequest("benchmark prompt and generation lengths must be at least 1".into()));
        }
        let ids = match tokenizer {
            Some(t) => {
                let unit = t.encode(BENCH_TEXT, false)?;
                unit.iter().copied().cycle().take(prompt_tokens.max(short_tokens)).collect()
            }
            // Spread over the vocabulary by a prime stride.
            None => (0..prompt_tokens.max(short_tokens)).map(|i| ((i * 7919 + 11) % vocab_size) as u32).collect::<Vec<_>>(),
        };
        Ok(BenchPlan { prompt: ids[..prompt_tokens].to_vec(), short_prompt: ids[..short_tokens].to_vec(), gen_tokens })
    }
}

/// One measurement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Figures {
    /// Prompt tokens per second (prompt forward + first sample).
    pub prefill_tok_s: f64,
    /// Generated tokens per second after the first.
    pub decode_tok_s: f64,
}

/// Runs the plan once on `rt`: no stop tokens, greedy.
pub fn measure(rt: &mut dyn Runtime, plan: &BenchPlan) -> Result<Figures> {
    let sampling = SamplingParams::default();
    let start = Instant::now();
    let mut first = None;
    let job = DecodeJob {
        prompt: &plan.prompt,
        max_tokens: 1,
        sampling: &sampling,
        stop_tokens: &[],
        top_logprobs: 0,
        cancel: Cancel::NEVER,
        reuse_prefix: false,
        draft: peregrine_engine::speculative::DraftPlan::OFF,
        constraint: None,
    };
    rt.generate(&job, &mut |_| {
        first = Some(start.elapsed());
        Flow::Continue
    })?;
    let prefill = first.ok_or_else(|| Error::Unavailable("the runtime produced no token".into()))?;

    // gen_tokens + 1 tokens: the first comes from the prompt, the rest are decode steps.
    let mut stamps: Vec<Instant> = Vec::with_capacity(plan.gen_tokens + 1);
    let job = DecodeJob {
        prompt: &plan.short_prompt,
        max_tokens: plan.gen_tokens + 1,
        sampling: &sampling,
        stop_tokens: &[],
        top_logprobs: 0,
        cancel: Cancel::NEVER,
        reuse_prefix: false,
        draft: peregrine_engine::speculative::DraftPlan::OFF,
        constraint: None,
    };
    rt.generate(&job, &mut |_| {
        stamps.push(Instant::now());
        Flow::Continue
    })?;
    let decode = match (stamps.first(), stamps.last()) {
        (Some(a), Some(b)) if stamps.len() == plan.gen_tokens + 1 => b.duration_since(*a),
        _ => return Err(Error::Unavailable(format!("the runtime stopped after {} of {} tokens", stamps.len(), plan.gen_tokens + 1))),
    };
    Ok(Figures { prefill_tok_s: rate(plan.prompt.len(), prefill), decode_tok_s: rate(plan.gen_tokens, decode) })
}

fn rate(tokens: usize, d: Duration) -> f64 {
    tokens as f64 / d.as_secs_f64().max(1e-9)
}

/// Median (mean of the middle two for an even count); NaN when empty.
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn plans_without_tokenizer_are_deterministic() {
        let a = BenchPlan::new(None, 1000, 16, 4, 8).unwrap();
        assert_eq!(a, BenchPlan::new(None, 1000, 16, 4, 8).unwrap());
        assert_eq!((a.prompt.len(), a.short_prompt.len()), (16, 4));
        assert!(a.prompt.iter().all(|&t| t < 1000));
        assert!(BenchPlan::new(None, 1000, 0, 4, 8).is_err());
    }
}
