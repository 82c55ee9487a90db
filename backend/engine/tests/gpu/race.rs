//! Races and kernel builds: random delays in the kernel's dependency waits (chaos)
//! reorder its blocks and must change no token; a kernel variant (threads per block,
//! attention splits, …) scores long prompts like the default kernel and passes the same
//! race check. The variants are those PEREGRINE_GPU_VARIANTS names (comma-separated
//! `lab::variants` names), by default the thread counts the load-time tuning may pick.

use libtest_mimic::Trial;
use peregrine_engine::config::ModelConfig;
use peregrine_engine::cuda::KernelOptions;
use peregrine_engine::lab::logits::{argmax, rel_err};
use peregrine_engine::lab::rng::SplitMix64;
use peregrine_engine::lab::synthetic::{check_shapes, synthetic_weights};
use peregrine_engine::lab::variants::{kernel_variant, with_chaos};
use peregrine_engine::runtime::Runtime;
use peregrine_engine::sampling::SamplingParams;
use peregrine_engine::weights::Weights;
use peregrine_engine::Diagnostics;

use super::{ensure, ids, kernel_trial, preset_shape, run, runtime, Check, WEIGHT_SEED};

/// The kernel variants checked when PEREGRINE_GPU_VARIANTS is unset: the block sizes
/// the load-time tuning chooses between besides the default (cuda::tune::CANDIDATES).
const DEFAULT_VARIANTS: &str = "default+threads448,default+threads384";
/// Relative logit difference (‖Δ‖/‖ref‖) allowed between a variant and the default
/// kernel on the same weights: both read the same bf16 weights and KV cache; only the
/// order of f32 sums differs.
const MAX_VARIANT_REL_ERR: f64 = 1e-2;
/// Greedy tokens of the long race checks (the preset and every variant).
const RACE_TOKENS: usize = 1000;

/// The variants to check, by name (a misspelt name fails loudly here, not as a skip).
pub fn variants() -> Vec<(String, KernelOptions)> {
    let names = std::env::var("PEREGRINE_GPU_VARIANTS").unwrap_or_else(|_| DEFAULT_VARIANTS.to_string());
    names
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|n| (n.to_string(), kernel_variant(n).unwrap_or_else(|e| panic!("PEREGRINE_GPU_VARIANTS: {e}"))))
        .collect()
}

pub fn trials() -> Vec<Trial> {
    let mut t = Vec::new();
    for config in check_shapes() {
        t.push(Trial::test(format!("{}: chaos delays change no token", config.name), move || race_check(&config)));
    }
    let smol = preset_shape("smollm2-135m");
    t.push(Trial::test(format!("smollm2-135m: {RACE_TOKENS} greedy tokens and seeded sampling identical with chaos delays"), move || {
        let w = synthetic_weights(&smol, WEIGHT_SEED);
        long_race_check(&smol, &w, RACE_TOKENS, &KernelOptions::default())
    }));
    // Trials name a preset by its key, as the other trials do.
    let mut shapes: Vec<(String, ModelConfig)> = check_shapes().into_iter().map(|c| (c.name.clone(), c)).collect();
    shapes.extend(["smollm2-135m", "llama-3.2-1b"].map(|p| (p.to_string(), preset_shape(p))));
    for (variant, base) in variants() {
        for (shape, config) in &shapes {
            let name = format!("kernel {variant}: {shape}: long prompts score like the default kernel, chaos delays change no token");
            let (c, b) = (config.clone(), base.clone());
            t.push(kernel_trial(name, config, &base, move || kernel_check(&c, &b)));
        }
    }
    t
}

/// Random delays in the dependency waits (split and unsplit attention) reorder the
/// blocks; the greedy tokens and a seeded sampled run stay identical.
fn race_check(config: &ModelConfig) -> Check {
    let weights = synthetic_weights(config, WEIGHT_SEED);
    let mut rt = runtime(config, &weights, &[0], KernelOptions::default(), None)?;
    let prompt = SplitMix64(33).tokens(8, config.vocab_size);
    let sampled = SamplingParams { temperature: 0.9, seed: 3, ..Default::default() };
    let (greedy, _) = run(&mut rt, &prompt, 200, &SamplingParams::default(), &[])?;
    let (drawn, _) = run(&mut rt, &prompt, 32, &sampled, &[])?;
    for splits in [KernelOptions::default().attn_max_splits, 1] {
        let chaos = KernelOptions {
            attn_max_splits: splits,
            diagnostics: Diagnostics { chaos: true, ..Diagnostics::default() },
            ..KernelOptions::default()
        };
        rt.set_options(chaos).map_err(|e| e.to_string())?;
        let (g, _) = run(&mut rt, &prompt, 200, &SamplingParams::default(), &[])?;
        let (d, _) = run(&mut rt, &prompt, 32, &sampled, &[])?;
        ensure(ids(&g) == ids(&greedy) && ids(&d) == ids(&drawn), || format!("chaos (attention splits {splits}) changed the tokens"))?;
    }
    Ok(())
}

/// The race check of a kernel `base` over `n` greedy tokens: two chaos runs (split
/// attention) and one unsplit produce the tokens of a run without delays, and a seeded
/// sampled run is the same with and without chaos.
pub fn long_race_check(config: &ModelConfig, weights: &Weights, n: usize, base: &KernelOptions) -> Check {
    let name = &config.name;
    let mut rt = runtime(config, weights, &[0], base.clone(), None)?;
    let prompt = SplitMix64(99).tokens(16, config.vocab_size);
    let greedy = SamplingParams::default();
    let (a, _) = run(&mut rt, &prompt, n, &greedy, &[])?;
    rt.set_options(with_chaos(base, true)).map_err(|e| e.to_string())?;
    let (b, _) = run(&mut rt, &prompt, n, &greedy, &[])?;
    let (c, _) = run(&mut rt, &prompt, n, &greedy, &[])?;
    ensure(ids(&a) == ids(&b) && ids(&b) == ids(&c) && a.len() == n, || {
        format!("{name}: {n} tokens differ with random wait delays (2 chaos runs)")
    })?;
    let sp = SamplingParams { temperature: 0.9, top_p: 0.9, seed: 3, ..Default::default() };
    let (d, _) = run(&mut rt, &prompt, n / 4, &sp, &[])?;
    rt.set_options(with_chaos(base, false)).map_err(|e| e.to_string())?;
    let (f, _) = run(&mut rt, &prompt, n, &greedy, &[])?;
    ensure(ids(&f) == ids(&a), || format!("{name}: {n} tokens differ with chaos and attention unsplit"))?;
    rt.set_options(base.clone()).map_err(|e| e.to_string())?;
    let (e, _) = run(&mut rt, &prompt, n / 4, &sp, &[])?;
    ensure(ids(&d) == ids(&e), || format!("{name}: seeded sampling differs with and without chaos"))
}

/// The variant `base` against the default kernel on scored prompts long enough for
/// split attention (300 positions below 100M parameters, else 600: the merging block
/// runs its tail), every row within MAX_VARIANT_REL_ERR; then [`long_race_check`] of
/// `base` over RACE_TOKENS tokens.
fn kernel_check(config: &ModelConfig, base: &KernelOptions) -> Check {
    let name = &config.name;
    let w = synthetic_weights(config, WEIGHT_SEED);
    let positions = if config.parameter_count() < 100_000_000 { 300 } else { 600 }.min(config.max_context);
    let seq = SplitMix64(0x5C0E ^ config.hidden_size as u64).tokens(positions, config.vocab_size);
    let want = runtime(config, &w, &[0], KernelOptions::default(), None)?.score(&seq).map_err(|e| e.to_string())?;
    // Threads size the runtime's buffers: the variant gets a runtime of its own.
    let mut rt = runtime(config, &w, &[0], base.clone(), None)?;
    println!("  {}", rt.describe());
    let got = rt.score(&seq).map_err(|e| e.to_string())?;
    drop(rt);
    let errs: Vec<f64> = got.iter().zip(&want).map(|(g, c)| rel_err(g, c)).collect();
    let worst = errs.iter().cloned().fold(0.0, f64::max);
    let worst_at = errs.iter().position(|&e| e == worst).unwrap_or(0);
    let top1 = got.iter().zip(&want).filter(|(g, c)| argmax(g) == argmax(c)).count();
    println!(
        "  {positions} scored positions vs the default kernel: rel err max {worst:.2e} (position {worst_at}), top-1 {top1}/{positions}"
    );
    ensure(got.len() == positions && worst < MAX_VARIANT_REL_ERR, || {
        format!("{name}: {positions} scored positions, variant vs default kernel: rel err max {worst:.2e} (position {worst_at})")
    })?;
    long_race_check(config, &w, RACE_TOKENS, base)
}
