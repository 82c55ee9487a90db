//! Tensor-parallel and DTP checks: ranks against one GPU and against the CPU DTP reference, chaos on each rank.

use super::*;

/// The devices of a `tp`-rank run: 0..tp, or the list in PEREGRINE_TP_GPUS
/// (`0,0` with PEREGRINE_TP_SHARE_GPU=1 runs both ranks on one GPU, a share of its SMs
/// each: the exchange logic and the race checks on a one-GPU machine, not speed).
pub(super) fn tp_gpus(tp: usize) -> Vec<usize> {
    match std::env::var("PEREGRINE_TP_GPUS") {
        Ok(list) => list.split(',').filter_map(|t| t.trim().parse().ok()).collect(),
        Err(_) => (0..tp).collect(),
    }
}

/// A runtime for `opts`: one GPU, or with `tp` > 1 a tensor-parallel run over tp_gpus(tp)
/// (DTP with `sched`).
pub(super) fn runtime_for(
    config: &ModelConfig,
    w: &Weights,
    tp: Option<usize>,
    opts: KernelOptions,
    sched: Option<peregrine_engine::dtp::DtpSchedule>,
) -> Result<CudaRuntime> {
    match tp {
        Some(tp) if tp > 1 => rt_with(config, w, &tp_gpus(tp), opts, sched),
        _ => rt_with(config, w, &[0], opts, None),
    }
}

/// Tensor parallelism over GPUs 0..tp against one GPU on the same weights: scored
/// logits (‖Δ‖/‖one GPU‖, top-1), greedy tokens, seeded sampling with top
/// log-probs (the all-vocabulary gather), stop token and cancellation, then the
/// race check with chaos delays on one rank at a time (`n` greedy tokens each).
/// `opts`: the TP kernel's options (`--kernel`, the default kernel by default).
pub(super) fn tp_check(config: &ModelConfig, weights: &Weights, tp: usize, n: usize, opts: &KernelOptions, v: &mut Verdict) -> Result<()> {
    let name = &config.name;
    let gpus = tp_gpus(tp);
    let tp = gpus.len();
    println!("== tensor parallelism: {name}, tp {tp} vs one GPU ({n} tokens for the race check)");
    let t0 = Instant::now();
    let seq = Rng(77).tokens(128, config.vocab_size);
    let prompt = Rng(99).tokens(16, config.vocab_size);
    let greedy = SamplingParams::default();
    let sp = SamplingParams { temperature: 0.8, top_k: 40, top_p: 0.95, repetition_penalty: 1.1, seed: 5, ..Default::default() };
    let (one_scores, one_greedy, one_sampled) = {
        let mut rt = rt_with(config, weights, &[0], KernelOptions::default(), None)?;
        let s = rt.score(&seq)?;
        let (g, _) = collect(&mut rt, &prompt, 256, &greedy, &[], 0)?;
        let (smp, _) = collect(&mut rt, &prompt, 64, &sp, &[], 5)?;
        (s, g, smp)
    };
    let mut rt = rt_with(config, weights, &gpus, opts.clone(), None)?;
    println!("  {} (loaded in {:.1}s)", rt.describe(), t0.elapsed().as_secs_f64());
    let scores = rt.score(&seq)?;
    let worst = scores.iter().zip(&one_scores).map(|(a, b)| rel_err(a, b)).fold(0.0, f64::max);
    let (num, den) = scores
        .iter()
        .flatten()
        .zip(one_scores.iter().flatten())
        .fold((0.0f64, 0.0f64), |(n, d), (&a, &b)| (n + (a as f64 - b as f64).powi(2), d + (b as f64).powi(2)));
    let top1 = scores.iter().zip(&one_scores).filter(|(a, b)| argmax(a) == argmax(b)).count();
    v.check(
        scores.len() == seq.len() && worst < MAX_REL_ERR,
        format!(
            "{name} tp {tp}: scored logits vs one GPU over {} positions: ‖Δ‖/‖ref‖ {:.2e} (worst position {worst:.2e}), top-1 {top1}/{}",
            seq.len(),
            (num / den.max(1e-30)).sqrt(),
            seq.len()
        ),
    );
    let (g, end) = collect(&mut rt, &prompt, 256, &greedy, &[], 0)?;
    let common = ids(&g).iter().zip(ids(&one_greedy).iter()).take_while(|(a, b)| a == b).count();
    v.check(
        g.len() == 256 && end == RunEnd::Length && common >= 16,
        format!("{name} tp {tp}: greedy 256 tokens, first {common} equal to one GPU's"),
    );
    let (s1, _) = collect(&mut rt, &prompt, 64, &sp, &[], 5)?;
    let (s2, _) = collect(&mut rt, &prompt, 64, &sp, &[], 5)?;
    let same_as_one = ids(&s1).iter().zip(ids(&one_sampled).iter()).take_while(|(a, b)| a == b).count();
    let lp_ok = s1.iter().all(|t| t.top.len() == 5 && t.logprob <= 0.0 && t.top[0].logprob >= t.logprob - 1e-4);
    v.check(
        ids(&s1) == ids(&s2) && s1.len() == 64 && lp_ok,
        format!("{name} tp {tp}: seeded sampling with 5 top log-probs reproducible, log-probs consistent; first {same_as_one} equal to one GPU's"),
    );
    let stop = g[5].id;
    let first = ids(&g).iter().position(|&t| t == stop).unwrap_or(5);
    let (st, st_end) = collect(&mut rt, &prompt, 64, &greedy, &[stop], 0)?;
    v.check(
        st_end == RunEnd::StopToken && st.len() == first,
        format!("{name} tp {tp}: stop token ends the run after {} tokens", st.len()),
    );
    let mut count = 0;
    let job =
        DecodeJob { prompt: &prompt, max_tokens: 200, sampling: &greedy, stop_tokens: &[], top_logprobs: 0, cancel: Cancel::NEVER, reuse_prefix: false };
    let c_end = rt.generate(&job, &mut |_| {
        count += 1;
        if count == 3 {
            Flow::Stop
        } else {
            Flow::Continue
        }
    })?;
    v.check(c_end == RunEnd::Stopped && count <= 4, format!("{name} tp {tp}: cancellation after 3 tokens ({count} seen)"));
    race_each_rank(&mut rt, tp, &prompt, n, &sp, &s1, opts, &format!("{name} tp {tp}"), v)?;
    println!("  tp check done in {:.1}s", t0.elapsed().as_secs_f64());
    Ok(())
}

/// The race check of a multi-rank runtime: `n` greedy tokens and 64 tokens sampled with
/// `sp` (`sampled`: those without chaos) identical with chaos delays on each rank in turn,
/// then again without. Leaves `rt` on `opts`.
#[allow(clippy::too_many_arguments)]
pub(super) fn race_each_rank(
    rt: &mut CudaRuntime,
    ranks: usize,
    prompt: &[u32],
    n: usize,
    sp: &SamplingParams,
    sampled: &[Sampled],
    opts: &KernelOptions,
    name: &str,
    v: &mut Verdict,
) -> Result<()> {
    let greedy = SamplingParams::default();
    let (base, _) = collect(rt, prompt, n, &greedy, &[], 0)?;
    for rank in 0..ranks as u32 {
        let mut o = opts.clone();
        o.diagnostics = peregrine_engine::cuda::layout::Diagnostics { chaos: true, chaos_rank: rank, trace: false };
        rt.set_options(o)?;
        let (c, _) = collect(rt, prompt, n, &greedy, &[], 0)?;
        let (cs, _) = collect(rt, prompt, 64, sp, &[], 5)?;
        v.check(
            ids(&c) == ids(&base) && c.len() == n && ids(&cs) == ids(sampled),
            format!("{name}: {n} greedy tokens and 64 sampled identical with chaos delays on rank {rank}"),
        );
    }
    rt.set_options(opts.clone())?;
    let (again, _) = collect(rt, prompt, n, &greedy, &[], 0)?;
    v.check(ids(&again) == ids(&base), format!("{name}: {n} tokens identical after the chaos runs"));
    Ok(())
}

/// Logits of every position of `toks` from the CPU float32 DTP reference of `sched`'s lanes.
pub(super) fn dtp_reference_logits(
    config: &ModelConfig,
    weights: &Weights,
    sched: &peregrine_engine::dtp::DtpSchedule,
    toks: &[u32],
) -> Result<Vec<Vec<f32>>> {
    use peregrine_engine::dtp::reference::{Execution, ShardedModel};
    ShardedModel::new(config, weights, sched.lanes)?.session(Execution::Delayed(sched.clone()))?.forward(toks)
}

/// Positions of the DTP kernel's scored logits checked against the CPU float32 DTP reference.
pub(super) const DTP_REFERENCE_POSITIONS: usize = 8;

/// The DTP kernel of `sched` over `tp` GPUs (a Laneformer's lanes folded onto them):
/// scored logits against the CPU float32 DTP reference of the same lanes, greedy tokens
/// reproducible, then the race check with chaos delays on one rank at a time (`n`
/// greedy + 64 sampled tokens identical).
pub(super) fn dtp_check(
    config: &ModelConfig,
    weights: &Weights,
    tp: usize,
    n: usize,
    opts: &KernelOptions,
    sched: &peregrine_engine::dtp::DtpSchedule,
    v: &mut Verdict,
) -> Result<()> {
    let name = format!("{} DTP d={} early={}", config.name, sched.delay, sched.early_layers.name());
    let devices = tp_gpus(tp);
    let ranks = peregrine_engine::model::rank_devices(config, &devices)?;
    println!("== {name}: {} ranks on {} GPUs vs the CPU DTP reference ({n} tokens for the race check)", ranks.len(), devices.len());
    let t0 = Instant::now();
    let seq = Rng(77).tokens(DTP_REFERENCE_POSITIONS, config.vocab_size);
    let prompt = Rng(99).tokens(16, config.vocab_size);
    let sp = SamplingParams { temperature: 0.8, top_k: 40, top_p: 0.95, repetition_penalty: 1.1, seed: 5, ..Default::default() };
    let mut rt = rt_with(config, weights, &ranks, opts.clone(), Some(sched.clone()))?;
    println!("  {} (loaded in {:.1}s)", rt.describe(), t0.elapsed().as_secs_f64());
    let gpu = rt.score(&seq)?;
    let cpu = dtp_reference_logits(config, weights, sched, &seq)?;
    let worst = gpu.iter().zip(&cpu).map(|(a, b)| rel_err(a, b)).fold(0.0, f64::max);
    let top1 = gpu.iter().zip(&cpu).filter(|(a, b)| argmax(a) == argmax(b)).count();
    v.check(
        gpu.len() == seq.len() && cpu.len() == seq.len() && worst < MAX_REL_ERR,
        format!(
            "{name}: scored logits vs the CPU f32 DTP reference over {} positions: worst rel err {worst:.2e}, top-1 {top1}/{}",
            seq.len(),
            seq.len()
        ),
    );
    let (s1, _) = collect(&mut rt, &prompt, 64, &sp, &[], 5)?;
    race_each_rank(&mut rt, ranks.len(), &prompt, n, &sp, &s1, opts, &name, v)?;
    println!("  DTP check done in {:.1}s", t0.elapsed().as_secs_f64());
    Ok(())
}
