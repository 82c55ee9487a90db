//! Correctness checks of one-GPU kernels: the CPU reference, the batched prefill, race checks with chaos delays, a build against the default.

use super::*;

pub(super) fn correctness_for(config: &ModelConfig, weights: &Weights, quick: bool, base: &KernelOptions, v: &mut Verdict) -> Result<()> {
    if let Some(why) = cuda::layout::unsupported(config, base) {
        println!("== {}: skipped for this variant ({why})", config.name);
        return Ok(());
    }
    let name = &config.name;
    println!("== correctness: {name} ({} params)", config.parameter_count());
    let t0 = Instant::now();
    let mut rt = rt_with(config, weights, &[0], base.clone(), None)?;
    println!("  {} (load {:.1}s)", rt.describe(), t0.elapsed().as_secs_f64());
    let reference = ReferenceModel::new(config, weights)?;
    let big = config.parameter_count() > 500_000_000;
    let mut rng = Rng(0xC0FFEE ^ config.hidden_size as u64);

    // 1. Teacher-forced scoring of fresh random tokens.
    let n_score = if big {
        6
    } else if quick {
        16
    } else {
        40
    };
    let tokens = rng.tokens(n_score, config.vocab_size);
    let gpu = rt.score(&tokens)?;
    let mut cache = KvCache::new(config, n_score);
    let cpu = reference.forward(&mut cache, &tokens, true)?;
    let errs: Vec<f64> = gpu.iter().zip(&cpu).map(|(g, c)| rel_err(g, c)).collect();
    let top1 = gpu.iter().zip(&cpu).filter(|(g, c)| argmax(g) == argmax(c)).count();
    let max_err = errs.iter().cloned().fold(0.0, f64::max);
    let mean_err = errs.iter().sum::<f64>() / errs.len() as f64;
    v.check(
        gpu.len() == n_score && max_err < MAX_REL_ERR,
        format!("{name}: score {n_score} positions: rel err mean {mean_err:.2e} max {max_err:.2e}, top-1 {top1}/{n_score}"),
    );

    // 2. Greedy generation vs the CPU, teacher-forced on the GPU's own tokens.
    let prompt = rng.tokens(8, config.vocab_size);
    let n_gen = if big {
        4
    } else if quick {
        12
    } else {
        24
    };
    let greedy = SamplingParams::default();
    rt.set_debug_logits(true);
    let (out, end) = collect(&mut rt, &prompt, n_gen, &greedy, &[], 3)?;
    let g_ids = ids(&out);
    let dbg = rt.debug_logits().to_vec();
    let mut seq = prompt.clone();
    seq.extend(&g_ids);
    let mut cache = KvCache::new(config, seq.len());
    let cpu_all = reference.forward(&mut cache, &seq[..seq.len() - 1], true)?;
    let steps: Vec<(f64, bool)> = (0..n_gen)
        .map(|t| {
            let c = &cpu_all[prompt.len() - 1 + t];
            (rel_err(&dbg[t], c), argmax(c) == g_ids[t])
        })
        .collect();
    let gmax = steps.iter().map(|s| s.0).fold(0.0, f64::max);
    let agree = steps.iter().filter(|s| s.1).count();
    v.check(
        // Random-weight logits are flat: near-ties flip under bf16, so top-1 is reported,
        // and only a gross disagreement fails.
        out.len() == n_gen && end == RunEnd::Length && gmax < MAX_REL_ERR && 2 * agree >= n_gen,
        format!(
            "{name}: greedy {n_gen} steps: per-step logits rel err max {gmax:.2e}, CPU top-1 = GPU token {agree}/{n_gen}, end {end:?}"
        ),
    );
    let lp_ok = out.iter().zip(&dbg).all(|(s, l)| {
        let lsm = log_softmax(l);
        let top = top_k_indices(&lsm, 3);
        (s.logprob - lsm[s.id as usize]).abs() < 1e-3
            && s.top.len() == 3
            && s.top.iter().zip(&top).all(|(a, b)| a.id == b.0 && (a.logprob - b.1).abs() < 1e-3)
    });
    v.check(lp_ok, format!("{name}: logprob and top-3 logprobs equal log_softmax of the GPU logits"));
    if !big {
        let mut cpu_rt = ReferenceRuntime::new(config, weights)?;
        let mut cpu_ids = Vec::new();
        let job = DecodeJob {
            prompt: &prompt,
            max_tokens: n_gen,
            sampling: &greedy,
            stop_tokens: &[],
            top_logprobs: 0,
            cancel: Cancel::NEVER,
            reuse_prefix: false,
        };
        cpu_rt.generate(&job, &mut |s: &Sampled| {
            cpu_ids.push(s.id);
            Flow::Continue
        })?;
        let same = g_ids.iter().zip(&cpu_ids).take_while(|(a, b)| a == b).count();
        println!("  info {name}: free-running greedy: GPU and CPU agree on the first {same}/{n_gen} tokens");
    }

    // 3. Sampling: CPU sampler on the GPU's logits, reruns, seeds.
    let sp = SamplingParams { temperature: 0.8, top_k: 40, top_p: 0.9, min_p: 0.05, repetition_penalty: 1.1, seed: 7, ..Default::default() };
    let modes = [
        ("t0.8 k40 p0.9 minp0.05 rep1.1", sp.clone()),
        ("t1.0 full vocab", SamplingParams { temperature: 1.0, seed: 11, ..Default::default() }),
        ("t0.7 p0.95", SamplingParams { temperature: 0.7, top_p: 0.95, seed: 5, ..Default::default() }),
        ("greedy rep1.3", SamplingParams { repetition_penalty: 1.3, ..Default::default() }),
    ];
    let n_s = if big { 4 } else { 16 };
    for (label, p) in modes {
        let (a, _) = collect(&mut rt, &prompt, n_s, &p, &[], 2)?;
        let dbg = rt.debug_logits().to_vec();
        let mut seen = prompt.clone();
        let mut agree = 0;
        for (t, s) in a.iter().enumerate() {
            agree += usize::from(sample(&dbg[t], &p, &seen, t as u64, 2).id == s.id);
            seen.push(s.id);
        }
        let (b, _) = collect(&mut rt, &prompt, n_s, &p, &[], 2)?;
        let (c, _) = collect(&mut rt, &prompt, n_s, &SamplingParams { seed: p.seed + 1, ..p.clone() }, &[], 2)?;
        let det = ids(&a) == ids(&b);
        let differs = p.temperature == 0.0 || ids(&a) != ids(&c);
        v.check(
            agree + 1 >= a.len() && det && differs && a.len() == n_s,
            format!(
                "{name}: sampling [{label}]: on the GPU's logits the CPU sampler agrees {agree}/{n}; same seed same tokens {det}, other seed differs {differs}",
                n = a.len()
            ),
        );
    }
    rt.set_debug_logits(false);

    // 4. Stop tokens, cancellation, edge lengths.
    if g_ids.len() > 3 {
        let k = g_ids.iter().position(|&t| t == g_ids[3]).unwrap_or(3);
        let (s_out, s_end) = collect(&mut rt, &prompt, n_gen, &greedy, &[g_ids[k]], 0)?;
        v.check(
            s_end == RunEnd::StopToken && ids(&s_out) == g_ids[..k],
            format!("{name}: stop token at step {k}: {} tokens, end {s_end:?}", s_out.len()),
        );
        // 20 ids the run never produces, then the real stop: the kernel checks 16, the host the rest.
        let many_stops: Vec<u32> =
            (0..config.vocab_size as u32).filter(|t| !g_ids.contains(t) && !prompt.contains(t)).take(20).chain([g_ids[k]]).collect();
        let (s2, e2) = collect(&mut rt, &prompt, n_gen, &greedy, &many_stops, 0)?;
        v.check(
            e2 == RunEnd::StopToken && ids(&s2) == g_ids[..k],
            format!("{name}: 21 stop tokens (host checks those past 16): {} tokens, end {e2:?}", s2.len()),
        );
    }
    let mut got = Vec::new();
    let job =
        DecodeJob { prompt: &prompt, max_tokens: n_gen, sampling: &greedy, stop_tokens: &[], top_logprobs: 0, cancel: Cancel::NEVER, reuse_prefix: false };
    let c_end = rt.generate(&job, &mut |s: &Sampled| {
        got.push(s.id);
        if got.len() == 3 {
            Flow::Stop
        } else {
            Flow::Continue
        }
    })?;
    v.check(
        c_end == RunEnd::Stopped && got == g_ids[..3.min(g_ids.len())],
        format!("{name}: cancel after 3 tokens: {} tokens, end {c_end:?}", got.len()),
    );
    let (again, _) = collect(&mut rt, &prompt, n_gen, &greedy, &[], 0)?;
    v.check(ids(&again) == g_ids, format!("{name}: a run after a cancelled one repeats the greedy tokens"));
    let (one, one_end) = collect(&mut rt, &prompt[..1], 1, &greedy, &[], 0)?;
    v.check(
        one.len() == 1 && one_end == RunEnd::Length,
        format!("{name}: 1-token prompt, max_tokens 1: {} token, end {one_end:?}", one.len()),
    );
    Ok(())
}

/// Batched prefill vs the per-token path on one runtime: the first generated step's
/// logits and `PREFILL_GEN` greedy tokens (with the per-step logits while they agree).
pub(super) fn prefill_case(rt: &mut CudaRuntime, label: &str, prompt: &[u32], v: &mut Verdict) -> Result<()> {
    const PREFILL_GEN: usize = 20;
    let greedy = SamplingParams::default();
    let base = rt.options().clone();
    // Greedy ids, per-step logits, prefill positions and prefill GPU ms of one run.
    type Run = (Vec<u32>, Vec<Vec<f32>>, usize, Option<f64>);
    let run = |rt: &mut CudaRuntime, batched: bool| -> Result<Run> {
        rt.set_options(KernelOptions { batched_prefill: batched, ..base.clone() })?;
        rt.set_debug_logits(true);
        let (out, _) = collect(rt, prompt, PREFILL_GEN, &greedy, &[], 0)?;
        rt.set_debug_logits(false);
        Ok((ids(&out), rt.debug_logits().to_vec(), rt.last_run().prefill_positions, rt.last_run().prefill_gpu_ms))
    };
    let (ids_b, lg_b, pos_b, gpu_ms) = run(rt, true)?;
    let (ids_t, lg_t, pos_t, _) = run(rt, false)?;
    rt.set_options(base)?;
    let same = ids_b.iter().zip(&ids_t).take_while(|(a, b)| a == b).count();
    let first_err = match (lg_b.first(), lg_t.first()) {
        (Some(b), Some(t)) => rel_err(b, t),
        _ => f64::INFINITY,
    };
    // Per-step logits while the two runs feed the same tokens (the first differing
    // step included: both still saw the same inputs there).
    let compared = (same + 1).min(PREFILL_GEN).min(lg_b.len()).min(lg_t.len());
    let step_err = (0..compared).map(|t| rel_err(&lg_b[t], &lg_t[t])).fold(0.0, f64::max);
    // A greedy difference is explained when it is a near-tie the measured logit
    // difference can flip: the token path's margin between the two picks is at most
    // twice the largest |Δ logit| between the paths at that step.
    let flip = (same < PREFILL_GEN).then(|| {
        let (b, t) = (&lg_b[same], &lg_t[same]);
        let margin = t[ids_t[same] as usize] - t[ids_b[same] as usize];
        let max_diff = b.iter().zip(t).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
        (margin, max_diff, margin <= 2.0 * max_diff)
    });
    let tokens_ok = flip.is_none_or(|f| f.2);
    v.check(
        pos_b + 1 == prompt.len() && pos_t == 0 && first_err < MAX_REL_ERR && step_err < MAX_REL_ERR && tokens_ok,
        format!(
            "{label}: {}-token prompt, batched prefill ({pos_b} positions, {:.3} ms GPU, first run) vs token by token: first-step logits rel err {first_err:.2e}, per-step max {step_err:.2e}; greedy tokens agree {same}/{PREFILL_GEN}{}",
            prompt.len(),
            gpu_ms.unwrap_or(f64::NAN),
            flip.map_or(String::new(), |(m, d, ok)| format!(
                ", then a near-tie: token-path margin {m:.2e} vs max |Δ logit| {d:.2e} ({})",
                if ok { "explained" } else { "NOT explained" }
            ))
        ),
    );
    Ok(())
}

/// `gpu_check prefill`: tiny shapes (one chunk and several chunks, both attention
/// kernels) and the benchmark shapes `presets`, synthetic weights.
pub(super) fn prefill_check(quick: bool, presets: &[String]) -> Result<Verdict> {
    let mut v = Verdict::default();
    let mut configs = check_shapes();
    for s in presets {
        configs.push(shape_config(s));
    }
    for config in configs {
        println!("== prefill: {}", config.name);
        let w = synthetic_weights(&config, WEIGHT_SEED);
        let tiny = config.parameter_count() < 100_000_000;
        let mut rng = Rng(0xBA7C4 ^ config.hidden_size as u64);
        let mut rt = rt_with(&config, &w, &[0], KernelOptions::default(), None)?;
        println!("  {}", rt.describe());
        let n = if quick { 64 } else { 300 };
        prefill_case(&mut rt, &config.name, &rng.tokens(n, config.vocab_size), &mut v)?;
        prefill_case(&mut rt, &format!("{} 2-token prompt", config.name), &rng.tokens(2, config.vocab_size), &mut v)?;
        if !tiny {
            // Past attn_own's shared-memory reach (OWN_MAX, 577 positions on SmolLM2-135M):
            // the kernel's first step, and the token path's later ones, attend on every block.
            prefill_case(&mut rt, &format!("{} 700-token prompt", config.name), &rng.tokens(700, config.vocab_size), &mut v)?;
        }
        if tiny {
            drop(rt);
            // Several chunks: later chunks attend to earlier chunks' cache rows.
            let opts = KernelOptions { prefill_chunk: 48, ..KernelOptions::default() };
            let mut rt = rt_with(&config, &w, &[0], opts.clone(), None)?;
            let prompt = rng.tokens(173, config.vocab_size);
            prefill_case(&mut rt, &format!("{} 48-row chunks", config.name), &prompt, &mut v)?;
            rt.set_options(KernelOptions { prefill_mma_attention: false, ..opts })?;
            prefill_case(&mut rt, &format!("{} 48-row chunks, CUDA-core attention", config.name), &prompt, &mut v)?;
        }
    }
    Ok(v)
}

/// `base` with the chaos delays, attention split or not.
pub(super) fn chaos_of(base: &KernelOptions, split: bool) -> KernelOptions {
    let splits = if split { base.attn_max_splits } else { 1 };
    let mut o = KernelOptions { attn_max_splits: splits, ..base.clone() };
    o.diagnostics.chaos = true;
    o
}

pub(super) fn race_check(config: &ModelConfig, weights: &Weights, n: usize, base: &KernelOptions, v: &mut Verdict) -> Result<()> {
    println!("== race check: {} ({n} greedy tokens, chaos delays vs none; {base:?})", config.name);
    let mut rt = rt_with(config, weights, &[0], base.clone(), None)?;
    let prompt = Rng(99).tokens(16, config.vocab_size);
    let greedy = SamplingParams::default();
    let (a, _) = collect(&mut rt, &prompt, n, &greedy, &[], 0)?;
    rt.set_options(chaos_of(base, true))?;
    let (b, _) = collect(&mut rt, &prompt, n, &greedy, &[], 0)?;
    let (c, _) = collect(&mut rt, &prompt, n, &greedy, &[], 0)?;
    let same = ids(&a) == ids(&b) && ids(&b) == ids(&c);
    v.check(same && a.len() == n, format!("{}: {n} tokens identical with and without random wait delays (2 chaos runs)", config.name));
    let sp = SamplingParams { temperature: 0.9, top_p: 0.9, seed: 3, ..Default::default() };
    let (d, _) = collect(&mut rt, &prompt, n / 4, &sp, &[], 0)?;
    rt.set_options(chaos_of(base, false))?;
    let (f, _) = collect(&mut rt, &prompt, n, &greedy, &[], 0)?;
    v.check(ids(&f) == ids(&a), format!("{}: {n} tokens identical with chaos and attention unsplit", config.name));
    rt.set_options(base.clone())?;
    let (e, _) = collect(&mut rt, &prompt, n / 4, &sp, &[], 0)?;
    v.check(ids(&d) == ids(&e), format!("{}: seeded sampling identical with and without chaos", config.name));
    Ok(())
}

pub(super) fn correctness(quick: bool, base: &KernelOptions) -> Result<Verdict> {
    let mut v = Verdict::default();
    for config in check_shapes() {
        let w = synthetic_weights(&config, WEIGHT_SEED);
        correctness_for(&config, &w, quick, base, &mut v)?;
    }
    let smol = preset("smollm2-135m").expect("preset");
    let w = synthetic_weights(&smol, WEIGHT_SEED);
    correctness_for(&smol, &w, quick, base, &mut v)?;
    race_check(&smol, &w, if quick { 64 } else { 1000 }, base, &mut v)?;
    Ok(v)
}

/// Relative logit difference allowed between a variant and the default kernel on the
/// same weights: both read the same bf16 weights and KV cache; only the order of f32
/// sums differs (fuse_o adds per-head partials instead of one dot per row).
pub(super) const MAX_VARIANT_REL_ERR: f64 = 1e-2;

/// `kernel-check`: the `base` variant against the default kernel on scored prompts
/// long enough for split attention (the merging block then runs fuse_o's tail), then
/// the chaos race check with `base` over `n` greedy tokens.
pub(super) fn kernel_check(config: &ModelConfig, base: &KernelOptions, n: usize, v: &mut Verdict) -> Result<()> {
    if let Some(why) = cuda::layout::unsupported(config, base) {
        println!("== {}: skipped for this variant ({why})", config.name);
        return Ok(());
    }
    let name = &config.name;
    let w = synthetic_weights(config, WEIGHT_SEED);
    let positions = if config.parameter_count() < 100_000_000 { 300 } else { 600 }.min(config.max_context);
    println!("== kernel check: {name}, {positions} scored positions vs the default kernel, then {n} tokens of race check");
    let seq = Rng(0x5C0E ^ config.hidden_size as u64).tokens(positions, config.vocab_size);
    let mut rt = rt_with(config, &w, &[0], KernelOptions::default(), None)?;
    let want = rt.score(&seq)?;
    // Threads size the runtime's buffers: a variant with other threads gets a runtime of its own.
    if base.threads != rt.options().threads {
        drop(rt);
        rt = runtime_for(config, &w, None, base.clone(), None)?;
    }
    rt.set_options(base.clone())?;
    println!("  {}", rt.describe());
    let got = rt.score(&seq)?;
    let errs: Vec<f64> = got.iter().zip(&want).map(|(g, c)| rel_err(g, c)).collect();
    let worst = errs.iter().cloned().fold(0.0, f64::max);
    let worst_at = errs.iter().position(|&e| e == worst).unwrap_or(0);
    let top1 = got.iter().zip(&want).filter(|(g, c)| argmax(g) == argmax(c)).count();
    v.check(
        got.len() == positions && worst < MAX_VARIANT_REL_ERR,
        format!(
            "{name}: {positions} scored positions, variant vs default kernel: rel err max {worst:.2e} (position {worst_at}), top-1 {top1}/{positions}"
        ),
    );
    drop(rt);
    race_check(config, &w, n, base, v)
}
