//! The one-GPU engine against the CPU: teacher-forced scores and greedy steps against
//! the float32 reference, seeded sampling against the CPU sampler on the kernel's own
//! logits, stop tokens and cancellation through the host ring; on the check shapes and,
//! scored by ‖Δ‖/‖ref‖ over every logit, on the SmolLM2-135M preset and the kernel
//! variants.

use libtest_mimic::Trial;
use peregrine_engine::config::ModelConfig;
use peregrine_engine::cpu::reference::{KvCache, ReferenceModel};
use peregrine_engine::cpu::reference_runtime::ReferenceRuntime;
use peregrine_engine::cuda::KernelOptions;
use peregrine_engine::lab::logits::{argmax, rel_err, rel_err_max, top1_or_near_tie};
use peregrine_engine::lab::rng::SplitMix64;
use peregrine_engine::lab::runs::stopped_after;
use peregrine_engine::lab::synthetic::{check_shapes, synthetic_weights};
use peregrine_engine::runtime::{RunEnd, Runtime};
use peregrine_engine::sampling::{log_softmax, sample, top_k_indices, SamplingParams};

use super::{ensure, ids, kernel_trial, preset_shape, race, run, run_top, runtime, Check, MAX_REL_ERR, WEIGHT_SEED};

pub fn trials() -> Vec<Trial> {
    let mut t = Vec::new();
    for config in check_shapes() {
        let name = config.name.clone();
        let c = config.clone();
        t.push(Trial::test(format!("{name}: scored logits and greedy tokens match the CPU reference"), move || reference_check(&c)));
        let c = config.clone();
        t.push(Trial::test(format!("{name}: seeded sampling matches the CPU sampler"), move || sampling_check(&c)));
        t.push(Trial::test(format!("{name}: stop tokens and cancellation end runs"), move || stop_check(&config)));
    }
    let smol = preset_shape("smollm2-135m");
    t.push(Trial::test("smollm2-135m: scores, greedy steps, sampling and stops match the CPU reference (‖Δ‖/‖ref‖)", move || {
        correctness(&smol, &KernelOptions::default())
    }));
    for (variant, base) in race::variants() {
        for config in check_shapes() {
            let name = format!("kernel {variant}: {}: scores, greedy steps, sampling and stops match the CPU reference", config.name);
            let (c, b) = (config.clone(), base.clone());
            t.push(kernel_trial(name, &config, &base, move || correctness(&c, &b)));
        }
    }
    t
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
    let worst = gpu.iter().zip(&cpu).map(|(g, c)| rel_err_max(g, c)).fold(0.0, f64::max);
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
        let err = rel_err_max(&steps[t], want);
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
    let (got, end) = stopped_after(&mut rt, &prompt, 12, &greedy, 3).map_err(|e| e.to_string())?;
    ensure(end == RunEnd::Stopped && got == g[..3], || format!("cancel after 3 tokens: {} tokens, end {end:?}", got.len()))?;
    let (again, _) = run(&mut rt, &prompt, 12, &greedy, &[])?;
    ensure(ids(&again) == g, || "a run after a cancelled one repeats the greedy tokens".into())
}

/// gpu_check's correctness pass on `config` with the kernel `base`, each logit row
/// scored by ‖Δ‖/‖ref‖: 40 teacher-forced positions (6 above 500M parameters, where
/// the single-threaded reference is slow) within MAX_REL_ERR; 24 greedy steps (4)
/// teacher-forced on the CPU along the GPU's tokens, within MAX_REL_ERR, the CPU's
/// top-1 at half the steps or more (random-weight logits are flat: near-ties flip
/// under bf16, only a gross disagreement fails); log-probabilities of the kernel's own
/// logits; four sampling modes (repetition penalty under greedy among them) against
/// the CPU sampler with one disagreement allowed; stop tokens, cancellation, and a
/// 1-token prompt.
pub fn correctness(config: &ModelConfig, base: &KernelOptions) -> Check {
    let name = &config.name;
    let weights = synthetic_weights(config, WEIGHT_SEED);
    let mut rt = runtime(config, &weights, &[0], base.clone(), None)?;
    println!("  {}", rt.describe());
    let reference = ReferenceModel::new(config, &weights).map_err(|e| e.to_string())?;
    let big = config.parameter_count() > 500_000_000;
    let mut rng = SplitMix64(0xC0FFEE ^ config.hidden_size as u64);

    let n_score = if big { 6 } else { 40 };
    let tokens = rng.tokens(n_score, config.vocab_size);
    let gpu = rt.score(&tokens).map_err(|e| e.to_string())?;
    let cpu = reference.forward(&mut KvCache::new(config, n_score), &tokens, true).map_err(|e| e.to_string())?;
    let errs: Vec<f64> = gpu.iter().zip(&cpu).map(|(g, c)| rel_err(g, c)).collect();
    let top1 = gpu.iter().zip(&cpu).filter(|(g, c)| argmax(g) == argmax(c)).count();
    let max_err = errs.iter().cloned().fold(0.0, f64::max);
    println!("  score {n_score} positions: rel err max {max_err:.2e}, top-1 {top1}/{n_score}");
    ensure(gpu.len() == n_score && max_err < MAX_REL_ERR, || format!("{name}: score {n_score} positions: rel err max {max_err:.2e}"))?;

    let prompt = rng.tokens(8, config.vocab_size);
    let n_gen = if big { 4 } else { 24 };
    let greedy = SamplingParams::default();
    rt.set_debug_logits(true);
    let (out, end) = run_top(&mut rt, &prompt, n_gen, &greedy, &[], 3)?;
    let g_ids = ids(&out);
    let dbg = rt.debug_logits().to_vec();
    let mut seq = prompt.clone();
    seq.extend(&g_ids);
    let cpu_all = reference.forward(&mut KvCache::new(config, seq.len()), &seq[..seq.len() - 1], true).map_err(|e| e.to_string())?;
    ensure(out.len() == n_gen && dbg.len() == n_gen && end == RunEnd::Length, || {
        format!("{name}: greedy run: {} tokens, end {end:?}", out.len())
    })?;
    let steps: Vec<(f64, bool)> = (0..n_gen)
        .map(|t| {
            let c = &cpu_all[prompt.len() - 1 + t];
            (rel_err(&dbg[t], c), argmax(c) == g_ids[t])
        })
        .collect();
    let gmax = steps.iter().map(|s| s.0).fold(0.0, f64::max);
    let agree = steps.iter().filter(|s| s.1).count();
    println!("  greedy {n_gen} steps: rel err max {gmax:.2e}, CPU top-1 = GPU token {agree}/{n_gen}");
    ensure(gmax < MAX_REL_ERR && 2 * agree >= n_gen, || {
        format!("{name}: greedy {n_gen} steps: rel err max {gmax:.2e}, CPU top-1 = GPU token {agree}/{n_gen}")
    })?;
    let lp_ok = out.iter().zip(&dbg).all(|(s, l)| {
        let lsm = log_softmax(l);
        let top = top_k_indices(&lsm, 3);
        (s.logprob - lsm[s.id as usize]).abs() < 1e-3
            && s.top.len() == 3
            && s.top.iter().zip(&top).all(|(a, b)| a.id == b.0 && (a.logprob - b.1).abs() < 1e-3)
    });
    ensure(lp_ok, || format!("{name}: logprob and top-3 logprobs are not log_softmax of the GPU logits"))?;
    if !big {
        let mut cpu_rt = ReferenceRuntime::new(config, &weights).map_err(|e| e.to_string())?;
        let (cpu_out, _) = peregrine_engine::lab::runs::collect(&mut cpu_rt, &prompt, n_gen, &greedy, &[], 0).map_err(|e| e.to_string())?;
        let same = g_ids.iter().zip(&ids(&cpu_out)).take_while(|(a, b)| a == b).count();
        println!("  info: free-running greedy: GPU and CPU agree on the first {same}/{n_gen} tokens");
    }

    let modes = [
        (
            "t0.8 k40 p0.9 minp0.05 rep1.1",
            SamplingParams { temperature: 0.8, top_k: 40, top_p: 0.9, min_p: 0.05, repetition_penalty: 1.1, seed: 7, ..Default::default() },
        ),
        ("t1.0 full vocab", SamplingParams { temperature: 1.0, seed: 11, ..Default::default() }),
        ("t0.7 p0.95", SamplingParams { temperature: 0.7, top_p: 0.95, seed: 5, ..Default::default() }),
        ("greedy rep1.3", SamplingParams { repetition_penalty: 1.3, ..Default::default() }),
    ];
    let n_s = if big { 4 } else { 16 };
    for (label, p) in modes {
        let (a, _) = run_top(&mut rt, &prompt, n_s, &p, &[], 2)?;
        let dbg = rt.debug_logits().to_vec();
        let mut seen = prompt.clone();
        let mut agree = 0;
        for (t, s) in a.iter().enumerate() {
            agree += usize::from(sample(&dbg[t], &p, &seen, t as u64, 2).id == s.id);
            seen.push(s.id);
        }
        let (b, _) = run_top(&mut rt, &prompt, n_s, &p, &[], 2)?;
        let (c, _) = run_top(&mut rt, &prompt, n_s, &SamplingParams { seed: p.seed + 1, ..p.clone() }, &[], 2)?;
        let det = ids(&a) == ids(&b);
        let differs = p.temperature == 0.0 || ids(&a) != ids(&c);
        ensure(agree + 1 >= a.len() && det && differs && a.len() == n_s, || {
            format!(
                "{name}: sampling [{label}]: CPU sampler agrees {agree}/{}; same seed same tokens {det}, other seed differs {differs}",
                a.len()
            )
        })?;
    }
    rt.set_debug_logits(false);

    if g_ids.len() > 3 {
        let k = g_ids.iter().position(|&t| t == g_ids[3]).unwrap_or(3);
        let (s_out, s_end) = run(&mut rt, &prompt, n_gen, &greedy, &[g_ids[k]])?;
        ensure(s_end == RunEnd::StopToken && ids(&s_out) == g_ids[..k], || {
            format!("{name}: stop token at step {k}: {} tokens, end {s_end:?}", s_out.len())
        })?;
        // 20 ids the run never produces, then the real stop: the kernel checks 16, the host the rest.
        let many: Vec<u32> =
            (0..config.vocab_size as u32).filter(|t| !g_ids.contains(t) && !prompt.contains(t)).take(20).chain([g_ids[k]]).collect();
        let (s2, e2) = run(&mut rt, &prompt, n_gen, &greedy, &many)?;
        ensure(e2 == RunEnd::StopToken && ids(&s2) == g_ids[..k], || format!("{name}: 21 stop tokens: {} tokens, end {e2:?}", s2.len()))?;
    }
    let (got, c_end) = stopped_after(&mut rt, &prompt, n_gen, &greedy, 3).map_err(|e| e.to_string())?;
    ensure(c_end == RunEnd::Stopped && got == g_ids[..3.min(g_ids.len())], || {
        format!("{name}: cancel after 3 tokens: {} tokens, end {c_end:?}", got.len())
    })?;
    let (again, _) = run(&mut rt, &prompt, n_gen, &greedy, &[])?;
    ensure(ids(&again) == g_ids, || format!("{name}: a run after a cancelled one does not repeat the greedy tokens"))?;
    let (one, one_end) = run(&mut rt, &prompt[..1], 1, &greedy, &[])?;
    ensure(one.len() == 1 && one_end == RunEnd::Length, || {
        format!("{name}: 1-token prompt, max_tokens 1: {} tokens, end {one_end:?}", one.len())
    })
}
