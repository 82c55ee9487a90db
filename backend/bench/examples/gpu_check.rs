//! GPU engine check and benchmark in one binary (the GPU host has no Rust: build
//! here, carry it there). `gpu_check all` runs correctness against the CPU float32
//! reference on synthetic random-weight models, then times decode on the benchmark
//! shapes; `gpu_check prefill` compares the batched prefill with the per-token prompt
//! path (first-step logits and greedy tokens); `gpu_check precompile` fills the cubin
//! cache without a GPU.
//!
//! `gpu_check tp --shapes a,b` checks tensor parallelism on GPUs 0 and 1 against
//! one GPU, with the chaos race check on each rank.
//!
//! `--kernel NAME` runs `correctness` (and `kernel-check`) with that build instead of
//! the default; `gpu_check kernel-check --kernel default+threads384 --shapes a,b` scores
//! long prompts with it against the default kernel (every position's logits: the
//! split-attention merge path included) and runs the chaos race check with it;
//! `gpu_check trace --shapes a,b [--variants default,default+threads448]` prints the
//! phase trace. Builds are named as `variant` below says.
//!
//! Usage: gpu_check [all|correctness|bench|sanitize|prefill|precompile|precompile-tp|tp|tp-prefill|trace|kernel-check|defines] [--quick]
//!        [--tp N] [--shapes a,b] [--runs N] [--prompt N] [--gen N] [--variants v1,v2,...] [--kernel NAME] [--no-tiny] [--no-chaos] [--dtp SPEC;SPEC]

#[cfg(feature = "cuda")]
fn main() {
    if let Err(e) = imp::main() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

#[cfg(not(feature = "cuda"))]
fn main() {
    eprintln!("gpu_check needs the `cuda` feature");
    std::process::exit(2);
}

#[cfg(feature = "cuda")]
mod imp {
    use std::time::Instant;

    use peregrine_engine::config::{Architecture, ModelConfig, RopeLayout, RopeScaling};
    use peregrine_engine::cpu::reference::{KvCache, ReferenceModel};
    use peregrine_engine::cpu::reference_runtime::ReferenceRuntime;
    use peregrine_engine::cuda::{self, CudaRuntime, KernelOptions};
    use peregrine_engine::runtime::{Cancel, DecodeJob, Flow, RunEnd, Runtime};
    use peregrine_engine::sampling::{log_softmax, sample, top_k_indices, Sampled, SamplingParams};
    use peregrine_engine::synthetic::{preset, synthetic_weights};
    use peregrine_engine::weights::Weights;
    use peregrine_engine::{CudaOptions, CudaPaths, Result};

    /// The H200's HBM3e bandwidth as specified; rows also give the copy measured in the run.
    const REFERENCE_BANDWIDTH: f64 = 4.8e12;
    /// Relative logit error allowed against the f32 reference (bf16 weights + KV).
    const MAX_REL_ERR: f64 = 3e-2;
    /// Weight seed of every synthetic model here.
    const WEIGHT_SEED: u64 = 1234;

    /// The CUDA options of these checks: library folders and the kernel cache from the
    /// same variables `peregrine` reads, ranks sharing a GPU with PEREGRINE_TP_SHARE_GPU.
    fn cuda_options() -> CudaOptions {
        let var = |v: &str| std::env::var_os(v).filter(|p| !p.is_empty()).map(std::path::PathBuf::from);
        let homes: Vec<_> = ["CUDA_HOME", "CUDA_PATH"].iter().filter_map(|v| var(v)).collect();
        let paths = CudaPaths::standard(var("PEREGRINE_NVRTC_DIR").as_deref(), var("PEREGRINE_CUBLAS_DIR").as_deref(), &homes, var("HOME").as_deref(), cache());
        CudaOptions { share_gpu: var("PEREGRINE_TP_SHARE_GPU").is_some(), paths, ..CudaOptions::default() }
    }

    /// The kernel cache: PEREGRINE_CUBIN_CACHE, else none.
    fn cache() -> Option<std::path::PathBuf> {
        std::env::var_os("PEREGRINE_CUBIN_CACHE").filter(|p| !p.is_empty()).map(std::path::PathBuf::from)
    }

    /// A runtime with `options` on `gpus` (several: tensor parallelism; `dtp`: its schedule).
    fn rt_with(config: &ModelConfig, weights: &Weights, gpus: &[usize], options: KernelOptions, dtp: Option<peregrine_engine::dtp::DtpSchedule>) -> Result<CudaRuntime> {
        CudaRuntime::with_kernel(config, weights, gpus, &cuda_options(), options, dtp)
    }

    struct Args {
        mode: String,
        quick: bool,
        shapes: Vec<String>,
        /// `--shapes` was given (`prefill` then checks only those benchmark shapes).
        shapes_given: bool,
        runs: usize,
        prompt: usize,
        gen: usize,
        variants: Vec<String>,
        /// `tp` mode: tensor-parallel degree (default min(GPUs, 2)).
        tp: Option<usize>,
        /// `--variants` was given (`trace` then traces those instead of the default).
        variants_given: bool,
        /// `--kernel`: the variant `correctness` and `kernel-check` run (default v10, the default kernel).
        kernel: String,
        /// `--no-tiny`: `precompile` and `kernel-check` skip the tiny check shapes.
        no_tiny: bool,
        /// `--no-chaos`: `precompile` / `precompile-tp` skip the chaos-delay kernels.
        no_chaos: bool,
        /// `--dtp SPEC` (`precompile-tp`, `tp`, `bench --tp N`): also the DTP kernels of these
        /// configs (`;`-separated `delay=D[,early=…]` specs, as `peregrine bench --dtp` takes
        /// them); without it `tp` checks the shape's own DTP preset, if it has one, and
        /// `bench --tp N` runs standard TP (with it: DTP of the first config).
        dtp: Vec<String>,
    }

    fn parse() -> Args {
        let mut a = Args {
            mode: "all".into(),
            quick: false,
            shapes: vec!["smollm2-135m".into(), "llama-3.2-1b".into()],
            shapes_given: false,
            runs: 5,
            prompt: 32,
            gen: 256,
            variants: vec!["default".into(), "default+nosplit".into()],
            tp: None,
            variants_given: false,
            kernel: "v10".into(),
            no_tiny: false,
            no_chaos: false,
            dtp: Vec::new(),
        };
        let mut it = std::env::args().skip(1);
        while let Some(x) = it.next() {
            let mut val = || it.next().unwrap_or_default();
            match x.as_str() {
                "--quick" => a.quick = true,
                "--shapes" => {
                    a.shapes = val().split(',').filter(|s| !s.is_empty()).map(String::from).collect();
                    a.shapes_given = true;
                }
                "--variants" => {
                    a.variants = val().split(',').filter(|s| !s.is_empty()).map(String::from).collect();
                    a.variants_given = true;
                }
                "--kernel" => a.kernel = val(),
                "--no-tiny" => a.no_tiny = true,
                "--no-chaos" => a.no_chaos = true,
                "--dtp" => a.dtp = val().split(';').filter(|s| !s.is_empty()).map(String::from).collect(),
                "--runs" => a.runs = val().parse().unwrap_or(5),
                "--prompt" => a.prompt = val().parse().unwrap_or(32),
                "--gen" => a.gen = val().parse().unwrap_or(256),
                "--tp" => a.tp = val().parse().ok(),
                m => a.mode = m.to_string(),
            }
        }
        a
    }

    /// Kernel builds by name: `default` (or `v10`), then `+` modifiers: `threadsN`
    /// (threads per block), `tp-evict` / `tp-waves` (the tensor-parallel switches),
    /// `trace`, `chaos`, `nosplit` (one block per attention head).
    fn variant(name: &str) -> KernelOptions {
        let (first, mods) = name.split_once('+').unwrap_or((name, ""));
        assert!(matches!(first, "default" | "v10"), "unknown kernel {first} (the older ones are gone: docs/history.md)");
        let mut o = KernelOptions::default();
        for m in mods.split('+').filter(|m| !m.is_empty()) {
            match m {
                "tp-evict" => o.tp_weights_evict_first = true,
                "tp-waves" => o.tp_down_waves = true,
                "trace" => o.diagnostics.trace = true,
                "chaos" => o.diagnostics.chaos = true,
                "nosplit" => o.attn_max_splits = 1,
                _ => match m.strip_prefix("threads").and_then(|n| n.parse().ok()) {
                    Some(n) => o.threads = n,
                    None => panic!("unknown variant modifier {m} in {name}"),
                },
            }
        }
        o
    }

    /// The CPU sampler's algorithm (sampling.rs `choose`) with f64 sums: over a whole
    /// flat vocabulary the f32 running sums drift by more than one token's mass, so
    /// the GPU's exact fixed-point sums are compared with this too.
    fn choose_f64(logits: &[f32], p: &SamplingParams, seen: &[u32], step: u64) -> u32 {
        let mut adj = logits.to_vec();
        if p.repetition_penalty != 1.0 {
            let mut done = vec![false; adj.len()];
            for &t in seen {
                let t = t as usize;
                if t < adj.len() && !done[t] {
                    done[t] = true;
                    let l = adj[t];
                    adj[t] = if l > 0.0 { l / p.repetition_penalty } else { l * p.repetition_penalty };
                }
            }
        }
        if p.temperature == 0.0 {
            return top_k_indices(&adj, 1)[0].0;
        }
        let k = if p.top_k == 0 { adj.len() } else { p.top_k.min(adj.len()) };
        let cand = top_k_indices(&adj, k);
        let max = cand[0].1;
        let w: Vec<f64> = cand.iter().map(|&(_, l)| ((l - max) / p.temperature).exp() as f64).collect();
        let total: f64 = w.iter().sum();
        let probs: Vec<f64> = w.iter().map(|x| x / total).collect();
        let floor = p.min_p as f64 * probs[0];
        let mut keep = probs.iter().take_while(|&&x| x >= floor).count().max(1);
        if p.top_p < 1.0 {
            let mut mass = 0.0;
            for (i, &x) in probs[..keep].iter().enumerate() {
                mass += x;
                if mass >= p.top_p as f64 {
                    keep = i + 1;
                    break;
                }
            }
        }
        let kept: f64 = probs[..keep].iter().sum();
        let target = peregrine_engine::sampling::uniform(p.seed, step) as f64 * kept;
        let mut acc = 0.0;
        for (i, &x) in probs[..keep].iter().enumerate() {
            acc += x;
            if target < acc {
                return cand[i].0;
            }
        }
        cand[keep - 1].0
    }

    use peregrine_engine::rng::SplitMix64 as Rng;

    fn rel_err(got: &[f32], want: &[f32]) -> f64 {
        let (mut num, mut den) = (0.0f64, 0.0f64);
        for (g, w) in got.iter().zip(want) {
            let d = (*g as f64) - (*w as f64);
            num += d * d;
            den += (*w as f64) * (*w as f64);
        }
        if got.iter().any(|v| !v.is_finite()) {
            return f64::INFINITY;
        }
        (num / den.max(1e-30)).sqrt()
    }

    fn argmax(v: &[f32]) -> u32 {
        top_k_indices(v, 1)[0].0
    }

    /// Small shapes covering each feature: llama3 scaling + interleaved RoPE + GQA,
    /// q/k/v bias + head_dim 128 + untied head, MHA + head_dim 96 + odd vocab.
    fn tiny_shapes() -> Vec<ModelConfig> {
        let base = preset("smollm2-135m").expect("preset");
        vec![
            ModelConfig {
                name: "tiny-llama3-interleaved".into(),
                vocab_size: 3000,
                hidden_size: 384,
                intermediate_size: 1024,
                num_layers: 3,
                num_heads: 6,
                num_kv_heads: 2,
                head_dim: 64,
                max_context: 4096,
                rope_theta: 500_000.0,
                rope_scaling: RopeScaling::Llama3 { factor: 8.0, low_freq_factor: 1.0, high_freq_factor: 4.0, original_max_position: 256 },
                rope_layout: RopeLayout::Interleaved,
                tie_embeddings: false,
                ..base.clone()
            },
            ModelConfig {
                name: "tiny-qwen-bias-hd128".into(),
                architecture: Architecture::Qwen2,
                vocab_size: 5000,
                hidden_size: 512,
                intermediate_size: 1376,
                num_layers: 4,
                num_heads: 4,
                num_kv_heads: 2,
                head_dim: 128,
                rms_norm_eps: 1e-6,
                rope_theta: 1_000_000.0,
                attention_bias: true,
                tie_embeddings: false,
                ..base.clone()
            },
            ModelConfig {
                name: "tiny-mha-hd96".into(),
                vocab_size: 2503,
                hidden_size: 384,
                intermediate_size: 1000,
                num_layers: 2,
                num_heads: 4,
                num_kv_heads: 4,
                head_dim: 96,
                ..base
            },
        ]
    }

    fn collect(
        rt: &mut CudaRuntime,
        prompt: &[u32],
        max_tokens: usize,
        sampling: &SamplingParams,
        stops: &[u32],
        top: usize,
    ) -> Result<(Vec<Sampled>, RunEnd)> {
        let mut out = Vec::new();
        let job = DecodeJob { prompt, max_tokens, sampling, stop_tokens: stops, top_logprobs: top, cancel: Cancel::NEVER };
        let end = rt.generate(&job, &mut |s: &Sampled| {
            out.push(s.clone());
            Flow::Continue
        })?;
        Ok((out, end))
    }

    fn ids(v: &[Sampled]) -> Vec<u32> {
        v.iter().map(|s| s.id).collect()
    }

    /// Collects failures instead of stopping at the first.
    #[derive(Default)]
    struct Verdict {
        failures: Vec<String>,
        lines: Vec<String>,
    }
    impl Verdict {
        fn check(&mut self, ok: bool, what: String) {
            let line = format!("{} {what}", if ok { "PASS" } else { "FAIL" });
            println!("  {line}");
            if !ok {
                self.failures.push(what.clone());
            }
            self.lines.push(line);
        }

        /// Prints every check's line under a summary header and the failure count; a
        /// failed check ends the process with status 3.
        fn summarise_and_exit(&self) {
            println!("\n==== summary ====");
            for l in &self.lines {
                println!("{l}");
            }
            println!("{} checks failed", self.failures.len());
            if !self.failures.is_empty() {
                std::process::exit(3);
            }
        }
    }

    fn correctness_for(config: &ModelConfig, weights: &Weights, quick: bool, base: &KernelOptions, v: &mut Verdict) -> Result<()> {
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
            };
            cpu_rt.generate(&job, &mut |s: &Sampled| {
                cpu_ids.push(s.id);
                Flow::Continue
            })?;
            let same = g_ids.iter().zip(&cpu_ids).take_while(|(a, b)| a == b).count();
            println!("  info {name}: free-running greedy: GPU and CPU agree on the first {same}/{n_gen} tokens");
        }

        // 3. Sampling: CPU sampler on the GPU's logits, reruns, seeds.
        let sp = SamplingParams { temperature: 0.8, top_k: 40, top_p: 0.9, min_p: 0.05, repetition_penalty: 1.1, seed: 7 };
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
            let (mut agree, mut agree64) = (0, 0);
            for (t, s) in a.iter().enumerate() {
                let cpu = sample(&dbg[t], &p, &seen, t as u64, 2);
                agree += usize::from(cpu.id == s.id);
                agree64 += usize::from(choose_f64(&dbg[t], &p, &seen, t as u64) == s.id);
                seen.push(s.id);
            }
            let (b, _) = collect(&mut rt, &prompt, n_s, &p, &[], 2)?;
            let (c, _) = collect(&mut rt, &prompt, n_s, &SamplingParams { seed: p.seed + 1, ..p.clone() }, &[], 2)?;
            let det = ids(&a) == ids(&b);
            let differs = p.temperature == 0.0 || ids(&a) != ids(&c);
            v.check(
                agree64 + 1 >= a.len() && det && differs && a.len() == n_s,
                format!(
                    "{name}: sampling [{label}]: on the GPU's logits the CPU sampler agrees {agree}/{n}, its f64 form {agree64}/{n}; same seed same tokens {det}, other seed differs {differs}",
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
            DecodeJob { prompt: &prompt, max_tokens: n_gen, sampling: &greedy, stop_tokens: &[], top_logprobs: 0, cancel: Cancel::NEVER };
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
    fn prefill_case(rt: &mut CudaRuntime, label: &str, prompt: &[u32], v: &mut Verdict) -> Result<()> {
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
    fn prefill_check(quick: bool, presets: &[String]) -> Result<Verdict> {
        let mut v = Verdict::default();
        let mut configs = tiny_shapes();
        for s in presets {
            configs.push(preset(s).unwrap_or_else(|| panic!("unknown shape {s}")));
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
    fn chaos_of(base: &KernelOptions, split: bool) -> KernelOptions {
        let splits = if split { base.attn_max_splits } else { 1 };
        let mut o = KernelOptions { attn_max_splits: splits, ..base.clone() };
        o.diagnostics.chaos = true;
        o
    }

    fn race_check(config: &ModelConfig, weights: &Weights, n: usize, base: &KernelOptions, v: &mut Verdict) -> Result<()> {
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

    fn correctness(quick: bool, base: &KernelOptions) -> Result<Verdict> {
        let mut v = Verdict::default();
        for config in tiny_shapes() {
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
    const MAX_VARIANT_REL_ERR: f64 = 1e-2;

    /// `kernel-check`: the `base` variant against the default kernel on scored prompts
    /// long enough for split attention (the merging block then runs fuse_o's tail), then
    /// the chaos race check with `base` over `n` greedy tokens.
    fn kernel_check(config: &ModelConfig, base: &KernelOptions, n: usize, v: &mut Verdict) -> Result<()> {
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

    /// `trace`: per shape and variant, the phase trace of the step TRACE_AFTER_PROMPT
    /// after the prompt, `runs` runs pooled (medians over layers × runs), and a check that
    /// tracing leaves the tokens as they are.
    fn trace_mode(args: &Args, v: &mut Verdict) -> Result<()> {
        use peregrine_engine::cuda::layout::TRACE_AFTER_PROMPT;
        use peregrine_engine::cuda::trace;
        let names: Vec<String> = if args.variants_given { args.variants.clone() } else { vec!["default".into()] };
        let gen = TRACE_AFTER_PROMPT + 8;
        let greedy = SamplingParams::default();
        for shape in &args.shapes {
            let config = preset(shape).unwrap_or_else(|| panic!("unknown shape {shape}"));
            let w = synthetic_weights(&config, WEIGHT_SEED);
            let prompt = Rng(7).tokens(args.prompt, config.vocab_size);
            // --tp N: rank 0's blocks of a tensor-parallel run over GPUs 0..N, standard TP, and
            // for a shape with a DTP preset (dtp-2b) also as DTP; one runtime at a time.
            let tp = args.tp.unwrap_or(1);
            let mut kinds: Vec<(String, Option<peregrine_engine::dtp::DtpSchedule>)> = vec![(String::new(), None)];
            if tp > 1 {
                kinds = vec![(format!(" tp {tp}"), None)];
                if let Some(d) = peregrine_engine::synthetic::dtp_preset(shape) {
                    kinds.push((format!(" dtp {tp}"), Some(peregrine_engine::dtp::DtpSchedule::new(&d, &config, tp)?)));
                }
            }
            for (label, sched) in kinds {
                let mut rt = if tp > 1 {
                    rt_with(&config, &w, &(0..tp).collect::<Vec<_>>(), variant(&names[0]), sched)?
                } else {
                    rt_with(&config, &w, &[0], variant(&names[0]), None)?
                };
                let shape = format!("{shape}{label}");
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
                        let raw = rt.last_trace().ok_or_else(|| peregrine_engine::Error::Cuda("no trace after a traced run".into()))?;
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

    /// The devices of a `tp`-rank run: 0..tp, or the list in PEREGRINE_TP_GPUS
    /// (`0,0` with PEREGRINE_TP_SHARE_GPU=1 runs both ranks on one GPU, a share of its SMs
    /// each: the exchange logic and the race checks on a one-GPU machine, not speed).
    fn tp_gpus(tp: usize) -> Vec<usize> {
        match std::env::var("PEREGRINE_TP_GPUS") {
            Ok(list) => list.split(',').filter_map(|t| t.trim().parse().ok()).collect(),
            Err(_) => (0..tp).collect(),
        }
    }

    /// A runtime for `opts`: one GPU, or with `tp` > 1 a tensor-parallel run over tp_gpus(tp)
    /// (DTP with `sched`).
    fn runtime_for(
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
    fn tp_check(config: &ModelConfig, weights: &Weights, tp: usize, n: usize, opts: &KernelOptions, v: &mut Verdict) -> Result<()> {
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
            DecodeJob { prompt: &prompt, max_tokens: 200, sampling: &greedy, stop_tokens: &[], top_logprobs: 0, cancel: Cancel::NEVER };
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
    fn race_each_rank(
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
    fn dtp_reference_logits(
        config: &ModelConfig,
        weights: &Weights,
        sched: &peregrine_engine::dtp::DtpSchedule,
        toks: &[u32],
    ) -> Result<Vec<Vec<f32>>> {
        use peregrine_engine::dtp::reference::{Execution, ShardedModel};
        ShardedModel::new(config, weights, sched.lanes)?.session(Execution::Delayed(sched.clone()))?.forward(toks)
    }

    /// Positions of the DTP kernel's scored logits checked against the CPU float32 DTP reference.
    const DTP_REFERENCE_POSITIONS: usize = 8;

    /// The DTP kernel of `sched` over `tp` ranks: scored logits against the CPU float32
    /// DTP reference of the same lanes, greedy tokens reproducible, then the race check
    /// with chaos delays on one rank at a time (`n` greedy + 64 sampled tokens identical).
    fn dtp_check(
        config: &ModelConfig,
        weights: &Weights,
        tp: usize,
        n: usize,
        opts: &KernelOptions,
        sched: &peregrine_engine::dtp::DtpSchedule,
        v: &mut Verdict,
    ) -> Result<()> {
        let name = format!("{} DTP d={} early={}", config.name, sched.delay, sched.early_layers.name());
        let gpus = tp_gpus(tp);
        println!("== {name}: tp {} vs the CPU DTP reference ({n} tokens for the race check)", gpus.len());
        let t0 = Instant::now();
        let seq = Rng(77).tokens(DTP_REFERENCE_POSITIONS, config.vocab_size);
        let prompt = Rng(99).tokens(16, config.vocab_size);
        let sp = SamplingParams { temperature: 0.8, top_k: 40, top_p: 0.95, repetition_penalty: 1.1, seed: 5, ..Default::default() };
        let mut rt = rt_with(config, weights, &gpus, opts.clone(), Some(sched.clone()))?;
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
        race_each_rank(&mut rt, gpus.len(), &prompt, n, &sp, &s1, opts, &name, v)?;
        println!("  DTP check done in {:.1}s", t0.elapsed().as_secs_f64());
        Ok(())
    }

    struct BenchRow {
        shape: String,
        variant: String,
        tok_s: f64,
        spread: (f64, f64),
        us_token: f64,
        mb_token: f64,
        pct_bound: f64,
        pct_measured: f64,
        ttft_ms: f64,
        check: bool,
    }

    fn bench(args: &Args, bw: f64, v: &mut Verdict) -> Result<Vec<BenchRow>> {
        let mut rows = Vec::new();
        for shape in &args.shapes {
            let config = preset(shape).unwrap_or_else(|| panic!("unknown shape {shape}"));
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
                    check &= end == RunEnd::Length
                        && out.len() == args.gen
                        && ids(&out)[..16.min(out.len())] == ids(&verified)[..16.min(out.len())];
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
    fn precompile(args: &Args) -> Result<()> {
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
        let mut configs: Vec<ModelConfig> = if args.no_tiny { Vec::new() } else { tiny_shapes() };
        let all = ["smollm2-135m", "llama-3.2-1b", "qwen2.5-coder-1.5b", "smollm2-1.7b"].map(String::from);
        for s in if args.shapes_given { &args.shapes[..] } else { &all[..] } {
            configs.push(preset(s).unwrap_or_else(|| panic!("unknown shape {s}")));
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

    pub fn main() -> Result<()> {
        let args = parse();
        if args.mode == "precompile" {
            return precompile(&args);
        }
        if args.mode == "defines" {
            // The -D options NVRTC gets for the first --shapes shape, --kernel and --tp (to compile
            // kernels/decode.cu by hand, e.g. nvcc -ptx, when comparing variants).
            let c = preset(&args.shapes[0]).unwrap_or_else(|| panic!("unknown shape {}", args.shapes[0]));
            let tp = args.tp.unwrap_or(1);
            let shard = cuda::layout::shard(&c, tp).map_err(peregrine_engine::Error::Cuda)?;
            for (k, v) in cuda::layout::defines_tp(&shard, &variant(&args.kernel), tp, c.vocab_size, None) {
                println!("-D{k}={v}");
            }
            return Ok(());
        }
        if args.mode == "precompile-tp" {
            // The kernels `tp` and `bench --tp 1,2` load for --shapes: one GPU, TP 2 with
            // and without chaos delays (`--no-chaos`: without only), and DTP for shapes with a DTP preset.
            for shape in &args.shapes {
                let c = preset(shape).unwrap_or_else(|| panic!("unknown shape {shape}"));
                let t = Instant::now();
                cuda::compile_only(&c, &KernelOptions::default(), 1, None, "sm_90a", cache().as_deref())?;
                cuda::compile_only(&c, &KernelOptions::default(), 2, None, "sm_90a", cache().as_deref())?;
                if !args.no_chaos {
                    cuda::compile_only(&c, &variant("default+chaos"), 2, None, "sm_90a", cache().as_deref())?;
                }
                // DTP: the shape's preset and the --dtp configs (those a `peregrine bench --dtp SPEC`
                // or `gpu_check tp --dtp SPEC` run on this shape loads), with chaos too.
                let mut dtps: Vec<peregrine_engine::dtp::DtpConfig> = peregrine_engine::synthetic::dtp_preset(shape).into_iter().collect();
                for spec in &args.dtp {
                    dtps.push(spec.parse()?);
                }
                for d in &dtps {
                    let sched = peregrine_engine::dtp::DtpSchedule::new(d, &c, 2)?;
                    cuda::compile_only(&c, &KernelOptions::default(), 2, Some(&sched), "sm_90a", cache().as_deref())?;
                    if !args.no_chaos {
                        cuda::compile_only(&c, &variant("default+chaos"), 2, Some(&sched), "sm_90a", cache().as_deref())?;
                    }
                }
                // --variants: those too, standard TP and DTP (e.g. the traced kernels of `trace --tp 2`).
                for name in args.variants.iter().filter(|_| args.variants_given) {
                    cuda::compile_only(&c, &variant(name), 2, None, "sm_90a", cache().as_deref())?;
                    for d in &dtps {
                        let sched = peregrine_engine::dtp::DtpSchedule::new(d, &c, 2)?;
                        cuda::compile_only(&c, &variant(name), 2, Some(&sched), "sm_90a", cache().as_deref())?;
                    }
                }
                println!("{shape}: TP kernels compiled in {:.1}s", t.elapsed().as_secs_f64());
            }
            return Ok(());
        }
        match cuda::devices() {
            Ok(d) => println!("CUDA devices: {d:?}"),
            Err(e) => {
                println!("skipped: {e}");
                return Ok(());
            }
        }
        let mut v = Verdict::default();
        if args.mode == "sanitize" {
            // Small and short: compute-sanitizer slows every access down. The prompt spans
            // three 16-row prefill chunks and two CUDA-core attention key tiles (32); it
            // runs with the tensor-core attention first (one partial 64-key tile).
            let c = &tiny_shapes()[0];
            let w = synthetic_weights(c, WEIGHT_SEED);
            let mut rt = rt_with(c, &w, &[0], KernelOptions { prefill_chunk: 16, ..KernelOptions::default() }, None)?;
            println!("{}", rt.describe());
            let prompt = Rng(5).tokens(40, c.vocab_size);
            let sp = SamplingParams { temperature: 0.8, top_k: 20, top_p: 0.9, min_p: 0.02, repetition_penalty: 1.1, seed: 1 };
            let (out, end) = collect(&mut rt, &prompt, 8, &sp, &[], 4)?;
            // The same prompt through the CUDA-core prefill attention.
            rt.set_options(KernelOptions { prefill_chunk: 16, prefill_mma_attention: false, ..KernelOptions::default() })?;
            collect(&mut rt, &prompt, 2, &sp, &[], 0)?;
            let scores = rt.score(&prompt)?;
            println!("sanitize run: {} tokens, end {end:?}, {} scored positions", out.len(), scores.len());
            // The tensor-core attention past one key tile: 149 prefill rows in 64-row
            // chunks span three PREFILL_MMA_KEY_TILE (64) key tiles, the last chunk starts
            // mid-block, on head_dim 64 (GQA) and 128 (q/k/v bias).
            for c in &tiny_shapes()[..2] {
                let w = synthetic_weights(c, WEIGHT_SEED);
                let opts = KernelOptions { prefill_chunk: 64, prefill_mma_attention: true, ..KernelOptions::default() };
                let mut rt = rt_with(c, &w, &[0], opts, None)?;
                println!("{}", rt.describe());
                let prompt = Rng(6).tokens(150, c.vocab_size);
                let (out, end) = collect(&mut rt, &prompt, 2, &sp, &[], 0)?;
                println!(
                    "sanitize mma run {}: {} batched prefill positions, {} tokens, end {end:?}",
                    c.name,
                    rt.last_run().prefill_positions,
                    out.len()
                );
            }
            return Ok(());
        }
        if args.mode == "prefill" {
            let all = ["smollm2-135m", "llama-3.2-1b", "qwen2.5-coder-1.5b", "smollm2-1.7b"].map(String::from);
            let p = prefill_check(args.quick, if args.shapes_given { &args.shapes } else { &all })?;
            p.summarise_and_exit();
            return Ok(());
        }
        if args.mode == "trace" || args.mode == "kernel-check" {
            if args.mode == "trace" {
                trace_mode(&args, &mut v)?;
            } else {
                let base = variant(&args.kernel);
                let mut configs = if args.no_tiny { Vec::new() } else { tiny_shapes() };
                configs.extend(args.shapes.iter().map(|s| preset(s).unwrap_or_else(|| panic!("unknown shape {s}"))));
                for c in &configs {
                    kernel_check(c, &base, args.gen, &mut v)?;
                }
            }
            v.summarise_and_exit();
            return Ok(());
        }
        if args.mode == "tune" {
            // The load-time threads-per-block measurement (cuda/tune.rs) on --shapes (--tp N:
            // tensor parallel), twice: the second load must find the first one's choice.
            for shape in &args.shapes {
                let c = preset(shape).unwrap_or_else(|| panic!("unknown shape {shape}"));
                let w = synthetic_weights(&c, WEIGHT_SEED);
                let mut choices = Vec::new();
                for _ in 0..2 {
                    let mut rt = runtime_for(&c, &w, args.tp, KernelOptions::default(), None)?;
                    let t = Instant::now();
                    let choice = cuda::tune::choose_threads(&mut rt, &mut |l| println!("  {l}"))?;
                    println!("{shape}: {} in {:.1}s; runtime: {}", choice.describe(), t.elapsed().as_secs_f64(), rt.describe());
                    v.check(
                        rt.options().threads == choice.threads,
                        format!("{shape}: the runtime runs the chosen {} threads", choice.threads),
                    );
                    choices.push(choice);
                }
                v.check(
                    matches!(choices[0].source, cuda::tune::ThreadsSource::Measured(_))
                        && choices[1].source == cuda::tune::ThreadsSource::Cached
                        && choices[0].threads == choices[1].threads,
                    format!("{shape}: measured on the first load, the same choice from the cache on the second"),
                );
            }
            v.summarise_and_exit();
            return Ok(());
        }
        if args.mode == "tp-prefill" {
            // Which path of a tensor-parallel kernel variant (--kernel) goes wrong on long prompts:
            // the first generated step's logits at TP --tp (batched prefill, then token by token)
            // against one GPU's default kernel (batched), for prompts of 200, 300 and 600 tokens.
            let tp = args.tp.unwrap_or(2);
            for shape in &args.shapes {
                let config = preset(shape).unwrap_or_else(|| panic!("unknown shape {shape}"));
                let w = synthetic_weights(&config, WEIGHT_SEED);
                let greedy = SamplingParams::default();
                let first_logits = |rt: &mut CudaRuntime, prompt: &[u32]| -> Result<Vec<f32>> {
                    rt.set_debug_logits(true);
                    collect(rt, prompt, 1, &greedy, &[], 0)?;
                    rt.set_debug_logits(false);
                    Ok(rt.debug_logits().first().cloned().unwrap_or_default())
                };
                let prompts: Vec<Vec<u32>> = [200, 300, 600].iter().map(|&n| Rng(0x5EED ^ n as u64).tokens(n, config.vocab_size)).collect();
                let mut one = rt_with(&config, &w, &[0], KernelOptions::default(), None)?;
                let refs = prompts.iter().map(|p| first_logits(&mut one, p)).collect::<Result<Vec<_>>>()?;
                drop(one);
                let opts = variant(&args.kernel);
                let mut rt = rt_with(&config, &w, &tp_gpus(tp), opts.clone(), None)?;
                println!("  {}", rt.describe());
                for batched in [true, false] {
                    rt.set_options(KernelOptions { batched_prefill: batched, ..opts.clone() })?;
                    for (p, r) in prompts.iter().zip(&refs) {
                        let got = first_logits(&mut rt, p)?;
                        let e = rel_err(&got, r);
                        v.check(
                            e < 3e-2,
                            format!(
                                "{shape} tp {tp} {}: {}-token prompt, {}: first-step logits vs one GPU rel err {e:.2e}",
                                args.kernel,
                                p.len(),
                                if batched { "batched prefill" } else { "token by token" }
                            ),
                        );
                    }
                }
            }
            v.summarise_and_exit();
            return Ok(());
        }
        if args.mode == "tp" {
            let tp = args.tp.unwrap_or_else(|| cuda::devices().map_or(1, |d| d.len().clamp(1, 2)));
            for shape in &args.shapes {
                let config = preset(shape).unwrap_or_else(|| panic!("unknown shape {shape}"));
                let w = synthetic_weights(&config, WEIGHT_SEED);
                let n = if args.quick { 256 } else { 2000 };
                tp_check(&config, &w, tp, n, &variant(&args.kernel), &mut v)?;
                // DTP too: the --dtp configs, or the shape's own preset (dtp-2b).
                let specs: Vec<peregrine_engine::dtp::DtpConfig> = if args.dtp.is_empty() {
                    peregrine_engine::synthetic::dtp_preset(shape).into_iter().collect()
                } else {
                    args.dtp.iter().map(|s| s.parse()).collect::<Result<_>>()?
                };
                for d in specs {
                    let sched = peregrine_engine::dtp::DtpSchedule::new(&d, &config, tp_gpus(tp).len())?;
                    dtp_check(&config, &w, tp, n, &variant(&args.kernel), &sched, &mut v)?;
                }
            }
            v.summarise_and_exit();
            return Ok(());
        }
        let bw = cuda::measure_copy_bandwidth(0, 1 << 30, 10)?;
        println!("device-to-device copy, 1 GiB: {:.2} TB/s (read + write)", bw / 1e12);
        if args.mode == "all" || args.mode == "correctness" {
            let c = correctness(args.quick, &variant(&args.kernel))?;
            v.failures.extend(c.failures);
            v.lines.extend(c.lines);
        }
        let mut rows = Vec::new();
        if args.mode == "all" || args.mode == "bench" {
            rows = bench(&args, bw, &mut v)?;
        }
        println!("\n==== summary ====");
        println!("copy bandwidth measured: {:.2} TB/s", bw / 1e12);
        for l in &v.lines {
            println!("{l}");
        }
        if !rows.is_empty() {
            println!("| shape | variant | tok/s (median, min–max) | µs/token | MB/token | % of 4.8 TB/s | % of measured copy | TTFT {}-token prompt | tokens = verified |", args.prompt);
            println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
            for r in &rows {
                println!(
                    "| {} | {} | {:.0} ({:.0}–{:.0}) | {:.1} | {:.1} | {:.1}% | {:.1}% | {:.2} ms | {} |",
                    r.shape,
                    r.variant,
                    r.tok_s,
                    r.spread.0,
                    r.spread.1,
                    r.us_token,
                    r.mb_token,
                    r.pct_bound,
                    r.pct_measured,
                    r.ttft_ms,
                    r.check
                );
            }
        }
        println!("{} checks failed", v.failures.len());
        if !v.failures.is_empty() {
            std::process::exit(3);
        }
        Ok(())
    }
}
