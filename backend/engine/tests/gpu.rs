//! The GPU engine checked against the CPU: scored logits and greedy tokens against the
//! float32 reference, the batched prefill against the token path, seeded sampling
//! against the CPU sampler, stop tokens and cancellation through the host ring, the
//! race check (chaos delays change no token), prompt reuse (reuse.rs), and tensor
//! parallelism and DTP on two GPUs (or both ranks on one) against one GPU and the CPU
//! DTP reference. Synthetic
//! random-weight models of the shapes the kernels special-case; quantized weights
//! (quant.rs) against float64 and the fast CPU runtime.
//!
//! Runs wherever a CUDA device is present. Elsewhere every check is reported as
//! ignored with the reason (libtest-mimic), never as passed. scripts/gpu/test.sh
//! builds this binary here and runs it on the GPU host.

#[path = "gpu/quant.rs"]
mod quant;
#[path = "gpu/reuse.rs"]
mod reuse;

use std::path::PathBuf;

use libtest_mimic::{Arguments, Failed, Trial};
use peregrine_engine::config::ModelConfig;
use peregrine_engine::cpu::reference::{KvCache, ReferenceModel};
use peregrine_engine::cuda::{self, CudaRuntime, KernelOptions};
use peregrine_engine::dtp::reference::{Execution, ShardedModel};
use peregrine_engine::dtp::{DtpConfig, DtpSchedule, EarlyLayers, Lanes};
use peregrine_engine::rng::SplitMix64;
use peregrine_engine::runtime::{Cancel, DecodeJob, Flow, RunEnd, Runtime};
use peregrine_engine::sampling::{log_softmax, sample, top_k_indices, Sampled, SamplingParams};
use peregrine_engine::synthetic::{check_shapes, preset, synthetic_weights};
use peregrine_engine::weights::Weights;
use peregrine_engine::{CudaOptions, CudaPaths, Diagnostics};

/// Relative logit error allowed against the f32 reference (bf16 weights and KV cache).
const MAX_REL_ERR: f64 = 3e-2;
/// Weight seed of every synthetic model here.
const WEIGHT_SEED: u64 = 1234;

type Check = Result<(), Failed>;

fn main() {
    let mut args = Arguments::from_args();
    // One check at a time: each holds whole-GPU persistent kernels.
    args.test_threads = Some(1);
    let absent = cuda::devices().err().map(|e| e.to_string());
    let mut trials = Vec::new();
    for config in check_shapes() {
        let name = config.name.clone();
        let c = config.clone();
        trials.push(Trial::test(format!("{name}: scored logits and greedy tokens match the CPU reference"), move || reference_check(&c)));
        let c = config.clone();
        trials.push(Trial::test(format!("{name}: seeded sampling matches the CPU sampler"), move || sampling_check(&c)));
        let c = config.clone();
        trials.push(Trial::test(format!("{name}: stop tokens and cancellation end runs"), move || stop_check(&c)));
        let c = config.clone();
        trials.push(Trial::test(format!("{name}: batched prefill matches the token path"), move || prefill_check(&c)));
        let c = config.clone();
        trials.push(Trial::test(format!("{name}: chaos delays change no token"), move || race_check(&c)));
        let c = config.clone();
        trials.push(Trial::test(format!("{name}: a reused prompt prefix changes no token"), move || reuse::reuse_check(&c)));
    }
    trials.push(Trial::test("threads per block: measured at the first load, read before building at the next", tuning_check));
    trials.push(Trial::test("tp 2: scored logits match one GPU, chaos on each rank changes no token", tp_check));
    trials.push(Trial::test("dtp 2: scored logits match the CPU DTP reference", dtp_check));
    for (name, lanes) in laneformer_shapes() {
        trials
            .push(Trial::test(format!("laneformer {name}: lanes on GPU 0 match the CPU lane reference"), move || laneformer_check(&lanes)));
    }
    trials.extend(quant::trials());
    if let Some(why) = &absent {
        println!("GPU checks did not run: {why}");
        trials = trials.into_iter().map(|t| t.with_ignored_flag(true)).collect();
    }
    libtest_mimic::run(&args, trials).exit();
}

/// The CUDA options of these checks: library folders and the kernel cache from the same
/// variables `peregrine` reads (the test binary is the CLI here), ranks may share a GPU.
fn cuda_options() -> CudaOptions {
    let paths = CudaPaths::from_vars(&|v| std::env::var_os(v).filter(|p| !p.is_empty()).map(PathBuf::from));
    CudaOptions { share_gpu: true, paths, ..CudaOptions::default() }
}

fn runtime(
    config: &ModelConfig,
    weights: &Weights,
    gpus: &[usize],
    options: KernelOptions,
    dtp: Option<DtpSchedule>,
) -> Result<CudaRuntime, Failed> {
    Ok(CudaRuntime::with_kernel(config, weights, gpus, &cuda_options(), options, dtp).map_err(|e| e.to_string())?)
}

fn ensure(ok: bool, what: impl FnOnce() -> String) -> Check {
    if ok {
        Ok(())
    } else {
        Err(what().into())
    }
}

fn run(
    rt: &mut CudaRuntime,
    prompt: &[u32],
    max_tokens: usize,
    sampling: &SamplingParams,
    stops: &[u32],
) -> Result<(Vec<Sampled>, RunEnd), Failed> {
    run_top(rt, prompt, max_tokens, sampling, stops, 0)
}

/// [`run`] with `top` log-probabilities per token.
fn run_top(
    rt: &mut CudaRuntime,
    prompt: &[u32],
    max_tokens: usize,
    sampling: &SamplingParams,
    stops: &[u32],
    top: usize,
) -> Result<(Vec<Sampled>, RunEnd), Failed> {
    let job = DecodeJob { prompt, max_tokens, sampling, stop_tokens: stops, top_logprobs: top, cancel: Cancel::NEVER, reuse_prefix: false };
    Ok(rt.generate_all(&job).map_err(|e| e.to_string())?)
}

fn ids(v: &[Sampled]) -> Vec<u32> {
    v.iter().map(|s| s.id).collect()
}

/// max |a − b| / max |b| over one logit row.
fn rel_err(got: &[f32], want: &[f32]) -> f64 {
    let diff = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max) as f64;
    let scale = want.iter().map(|b| b.abs()).fold(0.0f32, f32::max).max(1e-6) as f64;
    if got.len() == want.len() {
        diff / scale
    } else {
        f64::INFINITY
    }
}

fn argmax(v: &[f32]) -> u32 {
    v.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map_or(0, |(i, _)| i as u32)
}

/// Whether token `picked` is the reference's top-1 at this step or a near-tie that the
/// measured logit error can flip (random-weight logits are flat; bf16 flips close calls).
fn top1_or_near_tie(reference: &[f32], gpu: &[f32], picked: u32) -> bool {
    let best = argmax(reference);
    let margin = reference[best as usize] - reference[picked as usize];
    let max_diff = reference.iter().zip(gpu).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    best == picked || margin <= 2.0 * max_diff
}

/// Teacher-forced scoring of random tokens, then greedy generation scored on the CPU
/// along the GPU's own tokens: every step's logits within MAX_REL_ERR and every token
/// the reference's top-1 or a near-tie.
fn reference_check(config: &ModelConfig) -> Check {
    let weights = synthetic_weights(config, WEIGHT_SEED);
    let mut rt = runtime(config, &weights, &[0], KernelOptions::default(), None)?;
    let reference = ReferenceModel::new(config, &weights).map_err(|e| e.to_string())?;
    let mut rng = SplitMix64(0xC0FFEE ^ config.hidden_size as u64);
    let tokens = rng.tokens(24, config.vocab_size);
    let gpu = rt.score(&tokens).map_err(|e| e.to_string())?;
    let cpu = reference.forward(&mut KvCache::new(config, tokens.len()), &tokens, true).map_err(|e| e.to_string())?;
    let worst = gpu.iter().zip(&cpu).map(|(g, c)| rel_err(g, c)).fold(0.0, f64::max);
    ensure(gpu.len() == tokens.len() && worst < MAX_REL_ERR, || format!("scored 24 positions: rel err max {worst:.2e}"))?;

    let prompt = rng.tokens(8, config.vocab_size);
    rt.set_debug_logits(true);
    let (out, end) = run_top(&mut rt, &prompt, 16, &SamplingParams::default(), &[], 3)?;
    let steps = rt.debug_logits().to_vec();
    // Each token's log-probability and top 3 are log_softmax of the kernel's own logits.
    for (t, s) in out.iter().enumerate() {
        let lsm = log_softmax(&steps[t]);
        let top = top_k_indices(&lsm, 3);
        let ok = (s.logprob - lsm[s.id as usize]).abs() < 1e-3
            && s.top.len() == 3
            && s.top.iter().zip(&top).all(|(a, b)| a.id == b.0 && (a.logprob - b.1).abs() < 1e-3);
        ensure(ok, || format!("step {t}: logprob {} and top-3 {:?} are not log_softmax of the logits", s.logprob, s.top))?;
    }
    let mut seq = prompt.clone();
    seq.extend(ids(&out));
    let cpu = reference.forward(&mut KvCache::new(config, seq.len()), &seq[..seq.len() - 1], true).map_err(|e| e.to_string())?;
    ensure(end == RunEnd::Length && out.len() == 16 && steps.len() == 16, || format!("greedy run: {} tokens, end {end:?}", out.len()))?;
    for (t, s) in out.iter().enumerate() {
        let want = &cpu[prompt.len() - 1 + t];
        let err = rel_err(&steps[t], want);
        ensure(err < MAX_REL_ERR && top1_or_near_tie(want, &steps[t], s.id), || {
            format!("greedy step {t}: token {} (reference top-1 {}), logits rel err {err:.2e}", s.id, argmax(want))
        })?;
    }
    Ok(())
}

/// Sampling with several parameter sets (OpenAI's penalties and logit bias among them):
/// the CPU sampler on the GPU's own logits picks the same tokens (one near-tie allowed),
/// the same seed repeats, another seed differs; greedy with the adjustments likewise.
fn sampling_check(config: &ModelConfig) -> Check {
    let weights = synthetic_weights(config, WEIGHT_SEED);
    let mut rt = runtime(config, &weights, &[0], KernelOptions::default(), None)?;
    let prompt = SplitMix64(5).tokens(8, config.vocab_size);
    rt.set_debug_logits(true);
    let modes = [
        SamplingParams { temperature: 0.8, top_k: 40, top_p: 0.9, min_p: 0.05, repetition_penalty: 1.1, seed: 7, ..Default::default() },
        SamplingParams { temperature: 1.0, seed: 11, ..Default::default() },
        SamplingParams { temperature: 0.7, top_p: 0.95, seed: 5, ..Default::default() },
        SamplingParams {
            temperature: 0.9,
            top_k: 50,
            repetition_penalty: 1.05,
            presence_penalty: 0.6,
            frequency_penalty: 0.9,
            logit_bias: vec![(prompt[0], 4.0), (prompt[1], -100.0), (3, 2.5)],
            seed: 13,
            ..Default::default()
        },
    ];
    for p in modes {
        let (a, _) = run(&mut rt, &prompt, 16, &p, &[])?;
        let logits = rt.debug_logits().to_vec();
        let mut seen = prompt.clone();
        let mut agree = 0;
        for (t, s) in a.iter().enumerate() {
            agree += usize::from(sample(&logits[t], &p, &seen, t as u64, 0).id == s.id);
            seen.push(s.id);
        }
        let (b, _) = run(&mut rt, &prompt, 16, &p, &[])?;
        let (c, _) = run(&mut rt, &prompt, 16, &SamplingParams { seed: p.seed + 1, ..p.clone() }, &[])?;
        ensure(a.len() == 16 && agree + 1 >= a.len() && ids(&a) == ids(&b) && ids(&a) != ids(&c), || {
            format!(
                "{p:?}: CPU sampler agrees {agree}/{}, same seed repeats {}, other seed differs {}",
                a.len(),
                ids(&a) == ids(&b),
                ids(&a) != ids(&c)
            )
        })?;
    }
    // Greedy under the OpenAI adjustments: a strong frequency penalty walks the argmax
    // through many tokens, each the CPU's choice on the kernel's raw logits.
    let p = SamplingParams {
        presence_penalty: 0.5,
        frequency_penalty: 2.0,
        logit_bias: vec![(prompt[2], 6.0), (5, -3.5)],
        ..Default::default()
    };
    let (g, _) = run(&mut rt, &prompt, 24, &p, &[])?;
    let logits = rt.debug_logits().to_vec();
    let mut seen = prompt.clone();
    let mut agree = 0;
    for (t, s) in g.iter().enumerate() {
        agree += usize::from(sample(&logits[t], &p, &seen, t as u64, 0).id == s.id);
        seen.push(s.id);
    }
    ensure(g.len() == 24 && agree + 1 >= g.len(), || format!("greedy with penalties and logit_bias: CPU agrees {agree}/{}", g.len()))
}

/// A stop token ends the run before it (checked by the kernel, and by the host past the
/// kernel's 16), a callback's stop cancels through the ring, the next run is unharmed.
fn stop_check(config: &ModelConfig) -> Check {
    let weights = synthetic_weights(config, WEIGHT_SEED);
    let mut rt = runtime(config, &weights, &[0], KernelOptions::default(), None)?;
    let prompt = SplitMix64(9).tokens(8, config.vocab_size);
    let greedy = SamplingParams::default();
    let (out, _) = run(&mut rt, &prompt, 12, &greedy, &[])?;
    let g = ids(&out);
    let k = g.iter().position(|&t| t == g[3]).unwrap_or(3);
    let (s, end) = run(&mut rt, &prompt, 12, &greedy, &[g[k]])?;
    ensure(end == RunEnd::StopToken && ids(&s) == g[..k], || format!("stop token at step {k}: {} tokens, end {end:?}", s.len()))?;
    let many: Vec<u32> = (0..config.vocab_size as u32).filter(|t| !g.contains(t) && !prompt.contains(t)).take(20).chain([g[k]]).collect();
    let (s, end) = run(&mut rt, &prompt, 12, &greedy, &many)?;
    ensure(end == RunEnd::StopToken && ids(&s) == g[..k], || format!("21 stop tokens: {} tokens, end {end:?}", s.len()))?;
    let mut got = Vec::new();
    let job = DecodeJob {
        prompt: &prompt,
        max_tokens: 12,
        sampling: &greedy,
        stop_tokens: &[],
        top_logprobs: 0,
        cancel: Cancel::NEVER,
        reuse_prefix: false,
    };
    let end = rt
        .generate(&job, &mut |s: &Sampled| {
            got.push(s.id);
            if got.len() == 3 {
                Flow::Stop
            } else {
                Flow::Continue
            }
        })
        .map_err(|e| e.to_string())?;
    ensure(end == RunEnd::Stopped && got == g[..3], || format!("cancel after 3 tokens: {} tokens, end {end:?}", got.len()))?;
    let (again, _) = run(&mut rt, &prompt, 12, &greedy, &[])?;
    ensure(ids(&again) == g, || "a run after a cancelled one repeats the greedy tokens".into())
}

/// The batched prefill (cuBLAS + prefill.cu) against every prompt token as a kernel
/// step: first-step logits within MAX_REL_ERR; greedy tokens equal, or the first
/// difference a near-tie the measured logit difference explains.
fn prefill_check(config: &ModelConfig) -> Check {
    let weights = synthetic_weights(config, WEIGHT_SEED);
    let base = KernelOptions { prefill_chunk: 16, ..KernelOptions::default() };
    let mut rt = runtime(config, &weights, &[0], base.clone(), None)?;
    let prompt = SplitMix64(21).tokens(40, config.vocab_size);
    let mut path = |batched: bool| -> Result<(Vec<u32>, Vec<Vec<f32>>, usize), Failed> {
        rt.set_options(KernelOptions { batched_prefill: batched, ..base.clone() }).map_err(|e| e.to_string())?;
        rt.set_debug_logits(true);
        let (out, _) = run(&mut rt, &prompt, 12, &SamplingParams::default(), &[])?;
        Ok((ids(&out), rt.debug_logits().to_vec(), rt.last_run().prefill_positions))
    };
    let (ids_b, lg_b, positions) = path(true)?;
    let (ids_t, lg_t, _) = path(false)?;
    ensure(positions + 1 == prompt.len(), || format!("batched prefill ran {positions} of {} positions", prompt.len() - 1))?;
    let err = rel_err(&lg_b[0], &lg_t[0]);
    ensure(err < MAX_REL_ERR, || format!("first-step logits rel err {err:.2e}"))?;
    let same = ids_b.iter().zip(&ids_t).take_while(|(a, b)| a == b).count();
    if same < ids_b.len() {
        ensure(top1_or_near_tie(&lg_t[same], &lg_b[same], ids_b[same]), || format!("greedy tokens differ at step {same}, not a near-tie"))?;
    }
    Ok(())
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

/// The two ranks' GPUs: 0 and 1 where two are present (the exchange over NVLink), else
/// both on GPU 0 (a share of its SMs each: the exchange logic, not its speed).
fn tp_gpus() -> Vec<usize> {
    if cuda::devices().map_or(0, |d| d.len()) >= 2 {
        vec![0, 1]
    } else {
        vec![0, 0]
    }
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
fn tp_agrees(mut rt: CudaRuntime, one: &[Vec<f32>], tokens: &[u32], gen: usize) -> Check {
    let two = rt.score(tokens).map_err(|e| e.to_string())?;
    let worst = one.iter().zip(&two).map(|(a, b)| rel_err(b, a)).fold(0.0, f64::max);
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
        let worst = gpu.iter().zip(&cpu).map(|(g, c)| rel_err(g, c)).fold(0.0, f64::max);
        println!("  DTP early {}: logits rel err max {worst:.2e}", early.name());
        ensure(gpu.len() == tokens.len() && worst < MAX_REL_ERR, || format!("DTP early {}: rel err max {worst:.2e}", early.name()))?;
        let (got, _) = run(&mut rt, &tokens[..4], 24, &SamplingParams::default(), &[])?;
        let mut session = lanes.session(Execution::Delayed(sched)).map_err(|e| e.to_string())?;
        let mut last = session.forward(&tokens[..4]).map_err(|e| e.to_string())?.pop().unwrap_or_default();
        let mut want = Vec::new();
        for _ in 0..24 {
            let t = last.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map_or(0, |m| m.0 as u32);
            want.push(t);
            last = session.step(t).map_err(|e| e.to_string())?;
        }
        ensure(ids(&got) == want, || format!("DTP early {}: greedy tokens differ from the CPU reference", early.name()))?;
    }
    Ok(())
}

/// Laneformer shapes, all of a tiny model with 8 heads and 8 KV heads of 64: every head
/// kind, windowed early or late layers, per-lane norm scales, both early modes, no
/// communication, pre-norm aggregation; L = 8, 4, 2.
fn laneformer_shapes() -> Vec<(&'static str, ModelConfig)> {
    use peregrine_engine::config::{LaneConfig, LaneHead, RopeLayout, RopeScaling, SlidingWindow};
    let base = ModelConfig {
        name: "tiny-laneformer".into(),
        vocab_size: 4000,
        hidden_size: 512,
        intermediate_size: 1024,
        num_layers: 4,
        num_heads: 8,
        num_kv_heads: 8,
        head_dim: 64,
        max_context: 4096,
        rope_scaling: RopeScaling::None,
        rope_layout: RopeLayout::Interleaved,
        tie_embeddings: false,
        ..check_shapes()[0].clone()
    };
    let lanes = |count, delay| LaneConfig { count, delay, ..LaneConfig::default() };
    let window = |first: bool| SlidingWindow { size: 16, layers: (0..4).map(|l| (l < 2) == first).collect() };
    vec![
        ("8 lanes, replicate, early all-reduce, window", ModelConfig { lanes: lanes(8, 1), sliding_window: window(true), ..base.clone() }),
        (
            "4 lanes, vocab_parallel, early lane-local, lane norms, late window",
            ModelConfig {
                lanes: LaneConfig { early_comm: false, head: LaneHead::VocabParallel, lane_norms: true, ..lanes(4, 2) },
                sliding_window: window(false),
                ..base.clone()
            },
        ),
        (
            "8 lanes, lane head, delay 2, lane norms, late window",
            ModelConfig {
                lanes: LaneConfig { head: LaneHead::Lane, lane_norms: true, ..lanes(8, 2) },
                sliding_window: window(false),
                ..base.clone()
            },
        ),
        (
            "2 lanes, no communication, pre-norm sum, lane norms",
            ModelConfig { lanes: LaneConfig { comm: false, sum_before_norm: true, lane_norms: true, ..lanes(2, 1) }, ..base },
        ),
    ]
}

/// A Laneformer's lanes as ranks sharing GPU 0 (lanes folded onto one GPU): scored logits
/// of 40 positions (past the 16-position window) against the CPU lane reference, and
/// 24 greedy tokens after a prompt run through the batched prefill and through the
/// token path, each the reference's top-1 or a near-tie, unchanged by chaos delays.
fn laneformer_check(config: &ModelConfig) -> Check {
    config.validate().map_err(|e| e.to_string())?;
    let weights = synthetic_weights(config, WEIGHT_SEED);
    let sched = DtpSchedule::of_laneformer(config).map_err(|e| e.to_string())?;
    let tokens = SplitMix64(66).tokens(40, config.vocab_size);
    // Prompt chunks of 16 rows: the batched prefill's windows start inside and across chunks.
    let options = KernelOptions { prefill_chunk: 16, ..KernelOptions::default() };
    let mut rt = runtime(config, &weights, &vec![0; config.lanes.count], options.clone(), Some(sched.clone()))?;
    ensure(rt.batched_prefill(), || "the batched prefill is not available for this shape".into())?;
    let gpu = rt.score(&tokens).map_err(|e| e.to_string())?;
    let lanes = ShardedModel::new(config, &weights, config.lanes.count).map_err(|e| e.to_string())?;
    let mut session = lanes.session(Execution::Delayed(sched.clone())).map_err(|e| e.to_string())?;
    let cpu = session.forward(&tokens).map_err(|e| e.to_string())?;
    let worst = gpu.iter().zip(&cpu).map(|(g, c)| rel_err(g, c)).fold(0.0, f64::max);
    println!("  scored logits rel err max {worst:.2e}");
    ensure(gpu.len() == tokens.len() && worst < MAX_REL_ERR, || format!("rel err max {worst:.2e}"))?;
    // Greedy after a 36-token prompt (batched prefill, then the token path): each of the
    // kernel's tokens is the reference's top-1 (or a near-tie the measured logit error
    // explains) given the same earlier tokens.
    let prompt = &tokens[..36];
    for batched in [true, false] {
        rt.set_options(KernelOptions { batched_prefill: batched, ..options.clone() }).map_err(|e| e.to_string())?;
        rt.set_debug_logits(true);
        let (out, _) = run(&mut rt, prompt, 24, &SamplingParams::default(), &[])?;
        let steps = rt.debug_logits().to_vec();
        let mut seq = prompt.to_vec();
        seq.extend(ids(&out));
        let mut session = lanes.session(Execution::Delayed(sched.clone())).map_err(|e| e.to_string())?;
        let cpu = session.forward(&seq[..seq.len() - 1]).map_err(|e| e.to_string())?;
        ensure(out.len() == 24 && steps.len() == 24, || format!("greedy run: {} tokens", out.len()))?;
        let mut worst = 0.0f64;
        for (t, s) in out.iter().enumerate() {
            let want = &cpu[prompt.len() - 1 + t];
            let err = rel_err(&steps[t], want);
            worst = worst.max(err);
            ensure(err < MAX_REL_ERR && top1_or_near_tie(want, &steps[t], s.id), || {
                format!(
                    "batched prefill {batched}, greedy step {t}: token {} (reference top-1 {}), logits rel err {err:.2e}",
                    s.id,
                    argmax(want)
                )
            })?;
        }
        println!("  greedy steps rel err max {worst:.2e} (batched prefill {batched})");
    }
    // Random delays on the first and the last lane change no token.
    rt.set_options(options.clone()).map_err(|e| e.to_string())?;
    let (want, _) = run(&mut rt, prompt, 24, &SamplingParams::default(), &[])?;
    for rank in [0, config.lanes.count as u32 - 1] {
        let chaos = KernelOptions { diagnostics: Diagnostics { chaos: true, chaos_rank: rank, trace: false }, ..options.clone() };
        rt.set_options(chaos).map_err(|e| e.to_string())?;
        let (got, _) = run(&mut rt, prompt, 24, &SamplingParams::default(), &[])?;
        ensure(ids(&got) == ids(&want), || format!("chaos on lane {rank} changed the tokens"))?;
    }
    Ok(())
}

/// The load path's thread tuning with an empty kernel cache: the first build measures
/// (or keeps the default) and records the choice, the second reads it before building.
fn tuning_check() -> Check {
    use peregrine_engine::cuda::tune::{build_tuned, ThreadsSource};
    let config = check_shapes()[0].clone();
    let weights = synthetic_weights(&config, WEIGHT_SEED);
    let dir = std::env::temp_dir().join(format!("pg-gpu-tune-{}", std::process::id()));
    let mut cuda = cuda_options();
    cuda.paths.cubin_cache = Some(dir.clone());
    let mut log = |line: &str| println!("  {line}");
    let (_, first) = build_tuned(&config, &weights, &[0], &cuda, None, &mut log).map_err(|e| e.to_string())?;
    let (rt, second) = build_tuned(&config, &weights, &[0], &cuda, None, &mut log).map_err(|e| e.to_string())?;
    std::fs::remove_dir_all(&dir).ok();
    ensure(matches!(first.source, ThreadsSource::Measured(_) | ThreadsSource::Default), || format!("first load: {}", first.describe()))?;
    ensure(second.source == ThreadsSource::Cached && second.threads == first.threads && rt.options().threads == first.threads, || {
        format!("second load: {} (first: {})", second.describe(), first.describe())
    })
}
