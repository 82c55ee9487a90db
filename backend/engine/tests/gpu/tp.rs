//! Tensor parallelism and DTP: two ranks (two GPUs, or both on GPU 0) against one GPU
//! and against the CPU float32 DTP reference, with chaos delays on one rank at a time;
//! on tiny shapes and on the benchmark presets, where greedy and seeded sampling,
//! top log-probabilities (the all-vocabulary gather), stop tokens, cancellation and
//! long prompts through both prompt paths are compared too.

use libtest_mimic::{Failed, Trial};
use peregrine_engine::config::ModelConfig;
use peregrine_engine::cuda::{CudaRuntime, KernelOptions};
use peregrine_engine::dtp::reference::{Execution, ShardedModel};
use peregrine_engine::dtp::{DtpConfig, DtpSchedule, EarlyLayers, Lanes};
use peregrine_engine::lab::logits::{argmax, rel_err, rel_err_max};
use peregrine_engine::lab::rng::SplitMix64;
use peregrine_engine::lab::runs::stopped_after;
use peregrine_engine::lab::synthetic::{check_shapes, preset, synthetic_weights};
use peregrine_engine::runtime::{RunEnd, Runtime};
use peregrine_engine::sampling::{Sampled, SamplingParams};
use peregrine_engine::weights::Weights;
use peregrine_engine::Diagnostics;

use super::{ensure, ids, kernel_trial, preset_shape, race, run, run_top, runtime, tp_gpus, Check, MAX_REL_ERR, WEIGHT_SEED};

/// The preset the full TP checks run on.
const TP_SHAPE: &str = "qwen2.5-coder-1.5b";
/// Greedy tokens of the race checks on the presets, per chaos rank.
const RACE_TOKENS: usize = 2000;
/// Positions of the DTP kernel's scored logits checked against the CPU float32 DTP
/// reference (one float32 position of a 2B model takes seconds on one core).
const DTP_REFERENCE_POSITIONS: usize = 8;

pub fn trials() -> Vec<Trial> {
    let mut t = vec![
        Trial::test("tp 2: scored logits match one GPU, chaos on each rank changes no token", tp_check),
        Trial::test("dtp 2: scored logits match the CPU DTP reference", dtp_check),
    ];
    let config = preset_shape(TP_SHAPE);
    let c = config.clone();
    t.push(Trial::test(
        format!("tp 2 {TP_SHAPE}: scores, greedy, sampling, stops and cancellation match one GPU; chaos on each rank changes no token"),
        move || tp_full(&c, RACE_TOKENS, &KernelOptions::default()),
    ));
    t.push(Trial::test(
        "laneformer-2b lanes on tp 2: scored logits match the CPU DTP reference, chaos on each rank changes no token",
        || {
            let lanes = preset("laneformer-2b").expect("preset");
            let sched = DtpSchedule::of_laneformer(&lanes).map_err(|e| e.to_string())?;
            // Its lanes add no tensor: the weights are those of its matrices as an ordinary model.
            let weights = synthetic_weights(&preset_shape("laneformer-2b"), WEIGHT_SEED);
            dtp_race(&lanes, &weights, RACE_TOKENS, &KernelOptions::default(), &sched)
        },
    ));
    let c = config.clone();
    t.push(Trial::test(format!("tp 2 {TP_SHAPE}: first-step logits after 200, 300 and 600-token prompts match one GPU"), move || {
        tp_prefill(&c, &KernelOptions::default())
    }));
    for (variant, base) in race::variants() {
        let name = format!("kernel {variant}: tp 2 {TP_SHAPE}: first-step logits after long prompts match one GPU's default kernel");
        let (c, b) = (config.clone(), base.clone());
        t.push(kernel_trial(name, &config, &base, move || tp_prefill(&c, &b)));
    }
    t
}

/// Qwen2.5-like tiny shape at TP 2 on [`tp_gpus`]:
/// scored logits against one GPU, then chaos delays on each rank change no token.
fn tp_check() -> Check {
    let config = check_shapes()[1].clone();
    let weights = synthetic_weights(&config, WEIGHT_SEED);
    let tokens = SplitMix64(44).tokens(20, config.vocab_size);
    let one = runtime(&config, &weights, &[0], KernelOptions::default(), None)?.score(&tokens).map_err(|e| e.to_string())?;
    let rt = runtime(&config, &weights, &tp_gpus(), KernelOptions::default(), None)?;
    tp_agrees(rt, &one, &tokens, 200)
}

/// A TP 2 runtime against one GPU's scored logits `one` of `tokens` (within
/// MAX_REL_ERR), then `gen` greedy tokens unchanged by chaos delays on either rank.
pub fn tp_agrees(mut rt: CudaRuntime, one: &[Vec<f32>], tokens: &[u32], gen: usize) -> Check {
    let two = rt.score(tokens).map_err(|e| e.to_string())?;
    let worst = one.iter().zip(&two).map(|(a, b)| rel_err_max(b, a)).fold(0.0, f64::max);
    println!("  TP 2 vs one GPU: logits rel err max {worst:.2e}");
    ensure(two.len() == tokens.len() && worst < MAX_REL_ERR, || format!("TP 2 vs one GPU: rel err max {worst:.2e}"))?;
    let prompt = &tokens[..8];
    let (want, _) = run(&mut rt, prompt, gen, &SamplingParams::default(), &[])?;
    for rank in 0..2 {
        let chaos = KernelOptions { diagnostics: Diagnostics { chaos: true, chaos_rank: rank, trace: false }, ..KernelOptions::default() };
        rt.set_options(chaos).map_err(|e| e.to_string())?;
        let (got, _) = run(&mut rt, prompt, gen, &SamplingParams::default(), &[])?;
        ensure(ids(&got) == ids(&want), || format!("chaos on rank {rank} changed the TP tokens"))?;
    }
    Ok(())
}

/// laneformer-2b's delay on a tiny shape, 2 lanes on [`tp_gpus`], with early layers all-reduced
/// and lane-local (both sent again `delay` layers later, as published): the kernel's
/// scored logits against the CPU float32 lane reference, and its greedy tokens
/// against the reference's.
fn dtp_check() -> Check {
    let config = ModelConfig { name: "tiny-dtp".into(), num_layers: 6, ..check_shapes()[0].clone() };
    let weights = synthetic_weights(&config, WEIGHT_SEED);
    let tokens = SplitMix64(55).tokens(8, config.vocab_size);
    let lanes = ShardedModel::new(&config, &weights, 2).map_err(|e| e.to_string())?;
    let delay = preset("laneformer-2b").expect("preset").lanes.delay;
    for early in [EarlyLayers::Present, EarlyLayers::None] {
        let dtp = DtpConfig { lanes: Lanes::RunTime, delay, early_layers: early };
        let sched = DtpSchedule::new(&dtp, &config, 2).map_err(|e| e.to_string())?;
        let mut rt = runtime(&config, &weights, &tp_gpus(), KernelOptions::default(), Some(sched.clone()))?;
        let gpu = rt.score(&tokens).map_err(|e| e.to_string())?;
        let mut session = lanes.session(Execution::Delayed(sched.clone())).map_err(|e| e.to_string())?;
        let cpu = session.forward(&tokens).map_err(|e| e.to_string())?;
        let worst = gpu.iter().zip(&cpu).map(|(g, c)| rel_err_max(g, c)).fold(0.0, f64::max);
        println!("  DTP early {}: logits rel err max {worst:.2e}", early.name());
        ensure(gpu.len() == tokens.len() && worst < MAX_REL_ERR, || format!("DTP early {}: rel err max {worst:.2e}", early.name()))?;
        let (got, _) = run(&mut rt, &tokens[..4], 24, &SamplingParams::default(), &[])?;
        let mut session = lanes.session(Execution::Delayed(sched)).map_err(|e| e.to_string())?;
        let mut last = session.forward(&tokens[..4]).map_err(|e| e.to_string())?.pop().unwrap_or_default();
        let mut want = Vec::new();
        for _ in 0..24 {
            let t = argmax(&last);
            want.push(t);
            last = session.step(t).map_err(|e| e.to_string())?;
        }
        ensure(ids(&got) == want, || format!("DTP early {}: greedy tokens differ from the CPU reference", early.name()))?;
    }
    Ok(())
}

/// gpu_check's TP pass: `opts` at TP 2 against one GPU's default kernel on the same
/// weights: 128 scored positions within MAX_REL_ERR (‖Δ‖/‖ref‖ per row); 256 greedy
/// tokens, the first 16 equal to one GPU's; 64 tokens sampled with 5 top
/// log-probabilities reproducible and consistent; a stop token and a cancellation end
/// the run; then [`race_each_rank`] over `n` greedy tokens.
fn tp_full(config: &ModelConfig, n: usize, opts: &KernelOptions) -> Check {
    let name = &config.name;
    let weights = synthetic_weights(config, WEIGHT_SEED);
    let seq = SplitMix64(77).tokens(128, config.vocab_size);
    let prompt = SplitMix64(99).tokens(16, config.vocab_size);
    let greedy = SamplingParams::default();
    let sp = SamplingParams { temperature: 0.8, top_k: 40, top_p: 0.95, repetition_penalty: 1.1, seed: 5, ..Default::default() };
    let (one_scores, one_greedy) = {
        let mut rt = runtime(config, &weights, &[0], KernelOptions::default(), None)?;
        let s = rt.score(&seq).map_err(|e| e.to_string())?;
        let (g, _) = run(&mut rt, &prompt, 256, &greedy, &[])?;
        (s, g)
    };
    let mut rt = runtime(config, &weights, &tp_gpus(), opts.clone(), None)?;
    println!("  {}", rt.describe());
    let scores = rt.score(&seq).map_err(|e| e.to_string())?;
    let worst = scores.iter().zip(&one_scores).map(|(a, b)| rel_err(a, b)).fold(0.0, f64::max);
    let top1 = scores.iter().zip(&one_scores).filter(|(a, b)| argmax(a) == argmax(b)).count();
    println!("  scored logits vs one GPU over {} positions: worst rel err {worst:.2e}, top-1 {top1}/{}", seq.len(), seq.len());
    ensure(scores.len() == seq.len() && worst < MAX_REL_ERR, || format!("{name}: scored logits vs one GPU: worst rel err {worst:.2e}"))?;
    let (g, end) = run(&mut rt, &prompt, 256, &greedy, &[])?;
    let common = ids(&g).iter().zip(&ids(&one_greedy)).take_while(|(a, b)| a == b).count();
    ensure(g.len() == 256 && end == RunEnd::Length && common >= 16, || {
        format!("{name}: greedy 256 tokens, first {common} equal to one GPU's")
    })?;
    let (s1, _) = run_top(&mut rt, &prompt, 64, &sp, &[], 5)?;
    let (s2, _) = run_top(&mut rt, &prompt, 64, &sp, &[], 5)?;
    let lp_ok = s1.iter().all(|t| t.top.len() == 5 && t.logprob <= 0.0 && t.top[0].logprob >= t.logprob - 1e-4);
    ensure(ids(&s1) == ids(&s2) && s1.len() == 64 && lp_ok, || {
        format!("{name}: seeded sampling with 5 top log-probs: reproducible {}, log-probs consistent {lp_ok}", ids(&s1) == ids(&s2))
    })?;
    let stop = g[5].id;
    let first = ids(&g).iter().position(|&t| t == stop).unwrap_or(5);
    let (st, st_end) = run(&mut rt, &prompt, 64, &greedy, &[stop])?;
    ensure(st_end == RunEnd::StopToken && st.len() == first, || {
        format!("{name}: stop token ended the run after {} tokens, end {st_end:?}", st.len())
    })?;
    let (seen, c_end) = stopped_after(&mut rt, &prompt, 200, &greedy, 3).map_err(|e| e.to_string())?;
    let count = seen.len();
    ensure(c_end == RunEnd::Stopped && count <= 4, || format!("{name}: cancellation after 3 tokens: {count} seen, end {c_end:?}"))?;
    race_each_rank(&mut rt, 2, &prompt, n, &sp, &s1, opts)
}

/// The race check of a multi-rank runtime: `n` greedy tokens and 64 tokens sampled with
/// `sp` (`sampled`: those without chaos) identical with chaos delays on each rank in
/// turn, then again without. Leaves `rt` on `opts`.
fn race_each_rank(
    rt: &mut CudaRuntime,
    ranks: usize,
    prompt: &[u32],
    n: usize,
    sp: &SamplingParams,
    sampled: &[Sampled],
    opts: &KernelOptions,
) -> Check {
    let greedy = SamplingParams::default();
    let (base, _) = run(rt, prompt, n, &greedy, &[])?;
    for rank in 0..ranks as u32 {
        let chaos = KernelOptions { diagnostics: Diagnostics { chaos: true, chaos_rank: rank, trace: false }, ..opts.clone() };
        rt.set_options(chaos).map_err(|e| e.to_string())?;
        let (c, _) = run(rt, prompt, n, &greedy, &[])?;
        let (cs, _) = run_top(rt, prompt, 64, sp, &[], 5)?;
        ensure(ids(&c) == ids(&base) && c.len() == n && ids(&cs) == ids(sampled), || {
            format!("{n} greedy tokens or 64 sampled differ with chaos delays on rank {rank}")
        })?;
    }
    rt.set_options(opts.clone()).map_err(|e| e.to_string())?;
    let (again, _) = run(rt, prompt, n, &greedy, &[])?;
    ensure(ids(&again) == ids(&base), || format!("{n} tokens differ after the chaos runs"))
}

/// The DTP kernel of `sched` with its ranks folded onto [`tp_gpus`]: DTP_REFERENCE_POSITIONS
/// scored positions against the CPU float32 DTP reference of the same lanes within
/// MAX_REL_ERR (‖Δ‖/‖ref‖), then [`race_each_rank`] over every rank.
fn dtp_race(config: &ModelConfig, weights: &Weights, n: usize, opts: &KernelOptions, sched: &DtpSchedule) -> Check {
    let ranks = peregrine_engine::model::rank_devices(config, &tp_gpus()).map_err(|e| e.to_string())?;
    let seq = SplitMix64(77).tokens(DTP_REFERENCE_POSITIONS, config.vocab_size);
    let prompt = SplitMix64(99).tokens(16, config.vocab_size);
    let sp = SamplingParams { temperature: 0.8, top_k: 40, top_p: 0.95, repetition_penalty: 1.1, seed: 5, ..Default::default() };
    let mut rt = runtime(config, weights, &ranks, opts.clone(), Some(sched.clone()))?;
    println!("  {}", rt.describe());
    let gpu = rt.score(&seq).map_err(|e| e.to_string())?;
    let model = ShardedModel::new(config, weights, sched.lanes).map_err(|e| e.to_string())?;
    let cpu = model.session(Execution::Delayed(sched.clone())).and_then(|mut s| s.forward(&seq)).map_err(|e| e.to_string())?;
    let worst = gpu.iter().zip(&cpu).map(|(a, b)| rel_err(a, b)).fold(0.0, f64::max);
    let top1 = gpu.iter().zip(&cpu).filter(|(a, b)| argmax(a) == argmax(b)).count();
    println!("  scored logits vs the CPU f32 DTP reference: worst rel err {worst:.2e}, top-1 {top1}/{}", seq.len());
    ensure(gpu.len() == seq.len() && cpu.len() == seq.len() && worst < MAX_REL_ERR, || {
        format!("{}: DTP scored logits vs the CPU f32 reference: worst rel err {worst:.2e}", config.name)
    })?;
    let (s1, _) = run_top(&mut rt, &prompt, 64, &sp, &[], 5)?;
    race_each_rank(&mut rt, ranks.len(), &prompt, n, &sp, &s1, opts)
}

/// A TP 2 kernel `opts` on long prompts: the first generated step's logits after 200,
/// 300 and 600-token prompts, through the batched prefill and token by token, within
/// MAX_REL_ERR (‖Δ‖/‖ref‖) of one GPU's default kernel (batched).
fn tp_prefill(config: &ModelConfig, opts: &KernelOptions) -> Check {
    let w = synthetic_weights(config, WEIGHT_SEED);
    let greedy = SamplingParams::default();
    let first_logits = |rt: &mut CudaRuntime, prompt: &[u32]| -> Result<Vec<f32>, Failed> {
        rt.set_debug_logits(true);
        run(rt, prompt, 1, &greedy, &[])?;
        rt.set_debug_logits(false);
        Ok(rt.debug_logits().first().cloned().unwrap_or_default())
    };
    let prompts: Vec<Vec<u32>> = [200, 300, 600].iter().map(|&n| SplitMix64(0x5EED ^ n as u64).tokens(n, config.vocab_size)).collect();
    let mut one = runtime(config, &w, &[0], KernelOptions::default(), None)?;
    let refs = prompts.iter().map(|p| first_logits(&mut one, p)).collect::<Result<Vec<_>, _>>()?;
    drop(one);
    let mut rt = runtime(config, &w, &tp_gpus(), opts.clone(), None)?;
    println!("  {}", rt.describe());
    for batched in [true, false] {
        rt.set_options(KernelOptions { batched_prefill: batched, ..opts.clone() }).map_err(|e| e.to_string())?;
        for (p, r) in prompts.iter().zip(&refs) {
            let e = rel_err(&first_logits(&mut rt, p)?, r);
            let path = if batched { "batched prefill" } else { "token by token" };
            println!("  {}-token prompt, {path}: first-step logits vs one GPU rel err {e:.2e}", p.len());
            ensure(e < MAX_REL_ERR, || {
                format!("{}: {}-token prompt, {path}: first-step logits vs one GPU rel err {e:.2e}", config.name, p.len())
            })?;
        }
    }
    Ok(())
}
