//! The GPU check of prompt reuse: a request that shares a prefix with what the runtime
//! last ran keeps those KV rows (the batched prefill and the token path both start past
//! them) and generates what a run from an empty cache generates.

use libtest_mimic::{Failed, Trial};
use peregrine_engine::config::ModelConfig;
use peregrine_engine::cuda::{CudaRuntime, KernelOptions};
use peregrine_engine::lab::logits::top1_or_near_tie;
use peregrine_engine::lab::rng::SplitMix64;
use peregrine_engine::lab::synthetic::{check_shapes, synthetic_weights};
use peregrine_engine::runtime::{Cancel, DecodeJob, Runtime};
use peregrine_engine::sampling::SamplingParams;

use super::{ensure, ids, runtime, Check, WEIGHT_SEED};

pub fn trials() -> Vec<Trial> {
    check_shapes()
        .into_iter()
        .map(|c| Trial::test(format!("{}: a reused prompt prefix changes no token", c.name), move || reuse_check(&c)))
        .collect()
}

/// Greedy tokens and each step's raw logits of `prompt`, and the prompt tokens reused.
fn greedy(rt: &mut CudaRuntime, prompt: &[u32], reuse: bool) -> Result<(Vec<u32>, Vec<Vec<f32>>, usize), Failed> {
    let sampling = SamplingParams::default();
    let job = DecodeJob {
        prompt,
        max_tokens: 10,
        sampling: &sampling,
        stop_tokens: &[],
        top_logprobs: 0,
        cancel: Cancel::NEVER,
        reuse_prefix: reuse,
        draft: peregrine_engine::speculative::DraftPlan::OFF,
        constraint: None,
    };
    let (out, _) = rt.generate_all(&job).map_err(|e| e.to_string())?;
    Ok((ids(&out), rt.debug_logits().to_vec(), rt.reused_prefix()))
}

/// With the batched prefill and without it: a prompt sharing 20 tokens with the last one
/// reuses 20; a second turn (last prompt + its answer + more) reuses all but the answer's
/// last token; a prompt sharing nothing reuses none; each run's tokens equal those of
/// the same prompt from an empty cache (or first differ at a near-tie).
fn reuse_check(config: &ModelConfig) -> Check {
    let weights = synthetic_weights(config, WEIGHT_SEED);
    let base = KernelOptions { prefill_chunk: 16, ..KernelOptions::default() };
    let mut rt = runtime(config, &weights, &[0], base.clone(), None)?;
    rt.set_debug_logits(true);
    let mut rng = SplitMix64(77);
    let first = rng.tokens(36, config.vocab_size);
    for batched in [true, false] {
        rt.set_options(KernelOptions { batched_prefill: batched, ..base.clone() }).map_err(|e| e.to_string())?;
        let (answer, _, _) = greedy(&mut rt, &first, true)?;
        let mut shared = first[..20].to_vec();
        shared.extend(rng.tokens(12, config.vocab_size));
        let mut turn = first.clone();
        turn.extend(&answer);
        turn.extend(rng.tokens(7, config.vocab_size));
        let unrelated = rng.tokens(30, config.vocab_size);
        let cases = [
            ("shared prefix", first.clone(), shared.clone(), 20 + usize::from(shared[20] == first[20])),
            ("second turn", first.clone(), turn.clone(), first.len() + answer.len() - 1),
            ("nothing shared", turn.clone(), unrelated.clone(), usize::from(unrelated[0] == turn[0])),
        ];
        for (what, before, prompt, want) in cases {
            greedy(&mut rt, &before, false)?;
            let (got, lg_r, reused) = greedy(&mut rt, &prompt, true)?;
            let (fresh, lg_f, none) = greedy(&mut rt, &prompt, false)?;
            let label = format!("batched prefill {batched}, {what}");
            ensure(reused == want && none == 0, || format!("{label}: reused {reused} tokens (want {want}), without reuse {none}"))?;
            let same = got.iter().zip(&fresh).take_while(|(a, b)| a == b).count();
            if same < got.len() {
                ensure(top1_or_near_tie(&lg_f[same], &lg_r[same], got[same]), || {
                    format!("{label}: tokens differ from an empty cache's at step {same}, not a near-tie")
                })?;
            }
        }
    }
    Ok(())
}
