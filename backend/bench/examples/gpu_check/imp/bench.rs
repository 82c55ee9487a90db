//! Timing: kernel builds side by side on the benchmark shapes, the phase trace, and precompiling the cubin cache.

use super::*;

/// `trace`: per shape and variant, the phase trace of the step TRACE_AFTER_PROMPT
/// after the prompt, `runs` runs pooled (medians over layers × runs), and a check that
/// tracing leaves the tokens as they are.
pub(super) fn trace_mode(args: &Args, v: &mut Verdict) -> Result<()> {
    use peregrine_engine::cuda::layout::TRACE_AFTER_PROMPT;
    use peregrine_engine::cuda::trace;
    let names: Vec<String> = if args.variants_given { args.variants.clone() } else { vec!["default".into()] };
    let gen = TRACE_AFTER_PROMPT + 8;
    let greedy = SamplingParams::default();
    for shape in &args.shapes {
        let config = shape_config(shape);
        let mix = peregrine_engine::synthetic::QuantMix::from_name(&args.weights)
            .unwrap_or_else(|| panic!("unknown --weights {} (one of {})", args.weights, peregrine_engine::synthetic::MIX_NAMES.join(", ")));
        let w = peregrine_engine::synthetic::synthetic_mix_weights(&config, WEIGHT_SEED, mix);
        let prompt = Rng(7).tokens(args.prompt, config.vocab_size);
        // --tp N: rank 0's blocks of a tensor-parallel run over GPUs 0..N, standard TP, and
        // for a Laneformer preset also its own lanes folded onto them; one runtime at a time.
        let tp = args.tp.unwrap_or(1);
        let mut kinds: Vec<(String, ModelConfig, Option<DtpSchedule>)> = vec![(String::new(), config.clone(), None)];
        if tp > 1 {
            kinds = vec![(format!(" tp {tp}"), config.clone(), None)];
            if let Some((lanes, sched)) = own_lanes(shape)? {
                kinds.push((format!(" {} lanes on {tp}", sched.lanes), lanes, Some(sched)));
            }
        }
        for (label, config, sched) in kinds {
            let gpus = peregrine_engine::model::rank_devices(&config, &(0..tp).collect::<Vec<_>>())?;
            let base = cuda_options();
            let cuda = peregrine_engine::CudaOptions {
                weights: if mix.is_some() { peregrine_engine::GpuWeights::Native } else { peregrine_engine::GpuWeights::Bf16 },
                share_gpu: base.share_gpu || gpus.len() > tp,
                ..base
            };
            let mut rt = CudaRuntime::with_kernel(&config, &w, &gpus, &cuda, variant(&names[0]), sched)?;
            let shape = format!("{shape}{label} {}", args.weights);
            for name in &names {
                rt.set_options(variant(name))?;
                let (plain, _) = collect(&mut rt, &prompt, gen, &greedy, &[], 0)?;
                let mut traced = variant(name);
                traced.diagnostics.trace = true;
                rt.set_options(traced)?;
                println!(
                    "== trace {shape} {name}: step {} (prompt {} + {TRACE_AFTER_PROMPT}), {} runs pooled",
                    args.prompt + TRACE_AFTER_PROMPT,
                    args.prompt,
                    args.runs
                );
                println!("  {}", rt.describe());
                let _ = collect(&mut rt, &prompt, gen, &greedy, &[], 0)?; // warm-up
                let mut figures = Vec::new();
                let mut same = true;
                let mut clock = Vec::new();
                let mut steps = Vec::new();
                for _ in 0..args.runs {
                    let (out, _) = collect(&mut rt, &prompt, gen, &greedy, &[], 0)?;
                    same &= ids(&out) == ids(&plain);
                    let raw = rt.last_trace().ok_or_else(|| peregrine_engine::CudaError::Kernel("no trace after a traced run".into()))?;
                    match trace::event_figures(raw) {
                        Ok(f) => figures.extend(f),
                        Err(e) => println!("  trace unusable: {e}"),
                    }
                    match trace::step_figures(raw) {
                        Ok(f) => steps.push(f),
                        Err(e) => println!("  no step figures: {e}"),
                    }
                    if let Ok(t) = trace::calibrate(raw) {
                        clock.push(1.0 / t.ns_per_cycle);
                    }
                }
                v.check(same, format!("{shape} {name}: traced runs produce the untraced run's {gen} greedy tokens"));
                v.check(!figures.is_empty(), format!("{shape} {name}: the trace holds phase figures"));
                let rows = trace::summarize(&figures);
                println!(
                    "  SM clock fitted from the stamps: {:.3} GHz (per run: {clock:.3?})",
                    clock.iter().sum::<f64>() / clock.len().max(1) as f64
                );
                println!("{}", trace::table(&rows));
                if !steps.is_empty() {
                    println!("  {}", trace::step_line(&steps));
                }
            }
        }
    }
    Ok(())
}

pub(super) struct BenchRow {
    pub(super) shape: String,
    pub(super) variant: String,
    pub(super) tok_s: f64,
    pub(super) spread: (f64, f64),
    pub(super) us_token: f64,
    pub(super) mb_token: f64,
    pub(super) pct_bound: f64,
    pub(super) pct_measured: f64,
    pub(super) ttft_ms: f64,
    pub(super) check: bool,
}

pub(super) fn bench(args: &Args, bw: f64, v: &mut Verdict) -> Result<Vec<BenchRow>> {
    let mut rows = Vec::new();
    for shape in &args.shapes {
        let config = shape_config(shape);
        let t0 = Instant::now();
        let w = synthetic_weights(&config, WEIGHT_SEED);
        println!("== bench {shape}: {} params, weights built in {:.1}s", config.parameter_count(), t0.elapsed().as_secs_f64());
        // --tp N: the variants as tensor-parallel runs over tp_gpus(N): standard TP, or DTP
        // with the first --dtp config.
        let sched = match (args.tp, args.dtp.first()) {
            (Some(tp), Some(spec)) if tp > 1 => {
                let d: peregrine_engine::dtp::DtpConfig = spec.parse()?;
                Some(peregrine_engine::dtp::DtpSchedule::new(&d, &config, tp_gpus(tp).len())?)
            }
            _ => None,
        };
        let mut rt = runtime_for(&config, &w, args.tp, variant(&args.variants[0]), sched.clone())?;
        if let Some(sched) = &sched {
            // DTP is another function: a few positions against the f32 DTP reference.
            let toks = Rng(3).tokens(4, config.vocab_size);
            let gpu = rt.score(&toks)?;
            let cpu = dtp_reference_logits(&config, &w, sched, &toks)?;
            let err = gpu.iter().zip(&cpu).map(|(g, c)| rel_err(g, c)).fold(0.0, f64::max);
            v.check(
                err < MAX_REL_ERR && gpu.len() == 4,
                format!("{shape}: score 4 positions vs the f32 DTP reference: rel err max {err:.2e}"),
            );
        } else {
            // A few teacher-forced positions against the f32 reference at full size.
            let reference = ReferenceModel::new(&config, &w)?;
            let toks = Rng(3).tokens(4, config.vocab_size);
            let gpu = rt.score(&toks)?;
            let mut cache = KvCache::new(&config, toks.len());
            let cpu = reference.forward(&mut cache, &toks, true)?;
            let err = gpu.iter().zip(&cpu).map(|(g, c)| rel_err(g, c)).fold(0.0, f64::max);
            let top1 = gpu.iter().zip(&cpu).filter(|(g, c)| argmax(g) == argmax(c)).count();
            v.check(
                err < MAX_REL_ERR && gpu.len() == 4,
                format!("{shape}: score 4 positions vs f32 reference: rel err max {err:.2e}, top-1 {top1}/4"),
            );
        }
        let bytes = rt.streamed_bytes_per_token() as f64;
        let prompt = Rng(7).tokens(args.prompt, config.vocab_size);
        let greedy = SamplingParams::default();
        // The verified reference tokens: first variant, untimed.
        let (verified, _) = collect(&mut rt, &prompt, args.gen, &greedy, &[], 0)?;
        for name in &args.variants {
            let opts = variant(name);
            // Threads size the runtime's buffers: a variant with other threads gets a runtime of its own.
            if opts.threads != rt.options().threads {
                drop(rt);
                rt = runtime_for(&config, &w, args.tp, opts.clone(), sched.clone())?;
            }
            rt.set_options(opts)?;
            println!("  variant {name}: {}", rt.describe());
            let _ = collect(&mut rt, &prompt, args.gen, &greedy, &[], 0)?; // warm-up
            let mut rates = Vec::new();
            let mut ttfts = Vec::new();
            let mut check = true;
            for _ in 0..args.runs {
                let (out, end) = collect(&mut rt, &prompt, args.gen, &greedy, &[], 0)?;
                check &=
                    end == RunEnd::Length && out.len() == args.gen && ids(&out)[..16.min(out.len())] == ids(&verified)[..16.min(out.len())];
                let st = rt.last_run();
                rates.push(st.decode_tokens_per_s().unwrap_or(0.0));
                ttfts.push(st.first_token.map_or(0.0, |d| d.as_secs_f64() * 1e3));
            }
            rates.sort_by(|a, b| a.total_cmp(b));
            ttfts.sort_by(|a, b| a.total_cmp(b));
            let med = rates[rates.len() / 2];
            let row = BenchRow {
                shape: shape.clone(),
                variant: name.clone(),
                tok_s: med,
                spread: (rates[0], rates[rates.len() - 1]),
                us_token: 1e6 / med,
                mb_token: bytes / 1e6,
                pct_bound: 100.0 * med * bytes / REFERENCE_BANDWIDTH,
                pct_measured: 100.0 * med * bytes / bw,
                ttft_ms: ttfts[ttfts.len() / 2],
                check,
            };
            println!(
                "  {shape} {name}: {:.0} tok/s (min {:.0}, max {:.0}), {:.1} µs/token, {:.1} MB/token, {:.1}% of 4.8 TB/s, TTFT({} prompt) {:.2} ms, first 16 tokens match verified run: {check}",
                row.tok_s, row.spread.0, row.spread.1, row.us_token, row.mb_token, row.pct_bound, args.prompt, row.ttft_ms
            );
            v.check(check, format!("{shape} {name}: timed runs reproduce the verified run's first 16 greedy tokens"));
            rows.push(row);
        }
    }
    Ok(rows)
}

/// Fills the cubin cache for `--variants`, the default kernel, plus the `--kernel` base (v10 by default)
/// with and without its chaos delays (not with `--no-chaos`), on the tiny shapes (unless `--no-tiny`) and the
/// `--shapes` given (default: the four benchmark shapes). `--variants ''` adds none.
pub(super) fn precompile(args: &Args) -> Result<()> {
    let mut options: Vec<(String, KernelOptions)> = args.variants.iter().map(|n| (n.clone(), variant(n))).collect();
    let base = variant(&args.kernel);
    if !args.no_chaos {
        options.push((format!("{} + chaos", args.kernel), chaos_of(&base, true)));
        options.push((format!("{} + chaos unsplit", args.kernel), chaos_of(&base, false)));
    }
    options.push((args.kernel.clone(), base));
    // kernel-check and correctness compare against the default kernel.
    options.push(("default".into(), KernelOptions::default()));
    let mut seen = Vec::new();
    options.retain(|(_, o)| {
        if seen.contains(o) {
            false
        } else {
            seen.push(o.clone());
            true
        }
    });
    let mut configs: Vec<ModelConfig> = if args.no_tiny { Vec::new() } else { check_shapes() };
    let all = ["smollm2-135m", "llama-3.2-1b", "qwen2.5-coder-1.5b", "smollm2-1.7b"].map(String::from);
    for s in if args.shapes_given { &args.shapes[..] } else { &all[..] } {
        configs.push(shape_config(s));
    }
    for c in &configs {
        for (n, o) in &options {
            if let Some(why) = cuda::layout::unsupported(c, o) {
                println!("{} {n}: skipped ({why})", c.name);
                continue;
            }
            let t = Instant::now();
            let bytes = cuda::compile_only(c, o, 1, None, "sm_90a", cache().as_deref())?;
            println!("{} {n}: {bytes} B cubin in {:.1}s", c.name, t.elapsed().as_secs_f64());
        }
    }
    Ok(())
}
