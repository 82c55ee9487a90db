//! The checks and benchmarks (built with the `cuda` feature): arguments, kernel builds by name, shared helpers, dispatch.

use std::time::Instant;

use peregrine_engine::config::ModelConfig;
use peregrine_engine::cpu::reference::{KvCache, ReferenceModel};
use peregrine_engine::cpu::reference_runtime::ReferenceRuntime;
use peregrine_engine::cuda::{self, CudaRuntime, KernelOptions};
use peregrine_engine::dtp::{DtpConfig, DtpSchedule};
use peregrine_engine::runtime::{Cancel, DecodeJob, Flow, RunEnd, Runtime};
use peregrine_engine::sampling::{log_softmax, sample, top_k_indices, Sampled, SamplingParams};
use peregrine_engine::synthetic::{check_shapes, ordinary, preset, synthetic_weights};
use peregrine_engine::weights::Weights;
use peregrine_engine::{CudaOptions, CudaPaths, Result};

mod bench;
mod checks;
mod tp;

use bench::*;
use checks::*;
use tp::*;

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
    CudaOptions { share_gpu: var("PEREGRINE_TP_SHARE_GPU").is_some(), paths: CudaPaths::from_vars(&var), ..CudaOptions::default() }
}

/// The kernel cache of these checks (`cuda_options`).
fn cache() -> Option<std::path::PathBuf> {
    cuda_options().paths.cubin_cache
}

/// A runtime with `options` on `gpus` (several: tensor parallelism; `dtp`: its schedule).
/// A Laneformer's ranks are its lanes, folded onto the GPUs, so they may share one.
fn rt_with(
    config: &ModelConfig,
    weights: &Weights,
    gpus: &[usize],
    options: KernelOptions,
    dtp: Option<DtpSchedule>,
) -> Result<CudaRuntime> {
    let base = cuda_options();
    let cuda = CudaOptions { share_gpu: base.share_gpu || config.lanes.count > 1, ..base };
    CudaRuntime::with_kernel(config, weights, gpus, &cuda, options, dtp)
}

/// A `--shapes` name as every mode's standard kernels run it: the preset, a Laneformer
/// preset's matrices as an ordinary model ([`own_lanes`] is the Laneformer itself).
fn shape_config(name: &str) -> ModelConfig {
    ordinary(&preset(name).unwrap_or_else(|| panic!("unknown shape {name}")))
}

/// A Laneformer preset and its own schedule (None for an ordinary preset): what `tp`,
/// `trace --tp N` and `precompile-tp` run besides standard TP of its matrices.
fn own_lanes(name: &str) -> Result<Option<(ModelConfig, DtpSchedule)>> {
    match preset(name) {
        Some(c) if c.lanes.count > 1 => {
            let sched = DtpSchedule::of_laneformer(&c)?;
            Ok(Some((c, sched)))
        }
        _ => Ok(None),
    }
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
    /// them); without it `tp` checks a Laneformer preset's own lanes, and `bench --tp N`
    /// runs standard TP (with it: DTP of the first config).
    dtp: Vec<String>,
    /// `--weights MIX` (`trace`): random quantized blocks of this mix streamed natively
    /// (peregrine_engine::synthetic::MIX_NAMES), default bf16.
    weights: String,
}

/// The command line (clap): the mode, then its options.
#[derive(clap::Parser)]
#[command(name = "gpu_check", about = "GPU checks, traces and kernel builds of the persistent kernel")]
struct Cli {
    /// all, precompile, precompile-tp, defines, sanitize, prefill, trace, kernel-check, tune, tp-prefill, tp, bench, …
    #[arg(default_value = "all")]
    mode: String,
    #[arg(long)]
    quick: bool,
    /// Benchmark shapes, comma-separated (default smollm2-135m,llama-3.2-1b).
    #[arg(long, value_delimiter = ',')]
    shapes: Option<Vec<String>>,
    #[arg(long, default_value_t = 5)]
    runs: usize,
    #[arg(long, default_value_t = 32)]
    prompt: usize,
    #[arg(long, default_value_t = 256)]
    gen: usize,
    /// Kernel builds (`variant` names), comma-separated (default default,default+nosplit).
    #[arg(long, value_delimiter = ',')]
    variants: Option<Vec<String>>,
    #[arg(long)]
    tp: Option<usize>,
    #[arg(long, default_value = "v10")]
    kernel: String,
    #[arg(long)]
    no_tiny: bool,
    #[arg(long)]
    no_chaos: bool,
    /// DTP configs, `;`-separated.
    #[arg(long, value_delimiter = ';')]
    dtp: Vec<String>,
    #[arg(long, default_value = "bf16")]
    weights: String,
}

fn parse() -> Args {
    let c = <Cli as clap::Parser>::parse();
    let list = |v: Option<Vec<String>>| v.map(|v| v.into_iter().filter(|s| !s.is_empty()).collect::<Vec<_>>());
    let shapes = list(c.shapes);
    let variants = list(c.variants);
    Args {
        mode: c.mode,
        quick: c.quick,
        shapes_given: shapes.is_some(),
        shapes: shapes.unwrap_or_else(|| vec!["smollm2-135m".into(), "llama-3.2-1b".into()]),
        runs: c.runs,
        prompt: c.prompt,
        gen: c.gen,
        variants_given: variants.is_some(),
        variants: variants.unwrap_or_else(|| vec!["default".into(), "default+nosplit".into()]),
        tp: c.tp,
        kernel: c.kernel,
        no_tiny: c.no_tiny,
        no_chaos: c.no_chaos,
        dtp: c.dtp.into_iter().filter(|s| !s.is_empty()).collect(),
        weights: c.weights,
    }
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

fn collect(
    rt: &mut CudaRuntime,
    prompt: &[u32],
    max_tokens: usize,
    sampling: &SamplingParams,
    stops: &[u32],
    top: usize,
) -> Result<(Vec<Sampled>, RunEnd)> {
    let job = DecodeJob { prompt, max_tokens, sampling, stop_tokens: stops, top_logprobs: top, cancel: Cancel::NEVER, reuse_prefix: false };
    rt.generate_all(&job)
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

pub fn main() -> Result<()> {
    let args = parse();
    // The compile-only modes load NVRTC before any runtime would, so the folder
    // PEREGRINE_NVRTC_DIR names must be searched here too (the runtimes search it when they build).
    if let Some(dir) = std::env::var_os("PEREGRINE_NVRTC_DIR").filter(|d| !d.is_empty()) {
        cuda::nvrtc::preload(&[std::path::PathBuf::from(dir)])?;
    }
    if args.mode == "precompile" {
        return precompile(&args);
    }
    if args.mode == "defines" {
        // The -D options NVRTC gets for the first --shapes shape, --kernel and --tp (to compile
        // kernels/decode.cu by hand, e.g. nvcc -ptx, when comparing variants).
        let c = shape_config(&args.shapes[0]);
        let tp = args.tp.unwrap_or(1);
        let shard = cuda::layout::shard(&c, tp).map_err(peregrine_engine::CudaError::Unsupported)?;
        for (k, v) in
            cuda::layout::defines_tp(&shard, &variant(&args.kernel), tp, c.vocab_size, None, cuda::nvrtc::shared_per_block_of("sm_90a"))
        {
            println!("-D{k}={v}");
        }
        return Ok(());
    }
    if args.mode == "precompile-tp" {
        // The kernels `tp` and `bench --tp 1,2` load for --shapes: one GPU, TP 2 with
        // and without chaos delays (`--no-chaos`: without only), and DTP.
        for shape in &args.shapes {
            let c = shape_config(shape);
            let t = Instant::now();
            cuda::compile_only(&c, &KernelOptions::default(), 1, None, "sm_90a", cache().as_deref())?;
            cuda::compile_only(&c, &KernelOptions::default(), 2, None, "sm_90a", cache().as_deref())?;
            if !args.no_chaos {
                cuda::compile_only(&c, &variant("default+chaos"), 2, None, "sm_90a", cache().as_deref())?;
            }
            // DTP: the --dtp configs at 2 lanes (those a `peregrine-bench --dtp SPEC` or
            // `gpu_check tp --dtp SPEC` run on this shape loads) and a Laneformer preset's
            // own lanes, with chaos too.
            let mut dtps = Vec::new();
            for spec in &args.dtp {
                let d: DtpConfig = spec.parse()?;
                dtps.push((c.clone(), DtpSchedule::new(&d, &c, 2)?));
            }
            dtps.extend(own_lanes(shape)?);
            for (model, sched) in &dtps {
                cuda::compile_only(model, &KernelOptions::default(), sched.lanes, Some(sched), "sm_90a", cache().as_deref())?;
                if !args.no_chaos {
                    cuda::compile_only(model, &variant("default+chaos"), sched.lanes, Some(sched), "sm_90a", cache().as_deref())?;
                }
            }
            // --variants: those too, standard TP and DTP (e.g. the traced kernels of `trace --tp 2`).
            for name in args.variants.iter().filter(|_| args.variants_given) {
                cuda::compile_only(&c, &variant(name), 2, None, "sm_90a", cache().as_deref())?;
                for (model, sched) in &dtps {
                    cuda::compile_only(model, &variant(name), sched.lanes, Some(sched), "sm_90a", cache().as_deref())?;
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
        let c = &check_shapes()[0];
        let w = synthetic_weights(c, WEIGHT_SEED);
        let mut rt = rt_with(c, &w, &[0], KernelOptions { prefill_chunk: 16, ..KernelOptions::default() }, None)?;
        println!("{}", rt.describe());
        let prompt = Rng(5).tokens(40, c.vocab_size);
        let sp =
            SamplingParams { temperature: 0.8, top_k: 20, top_p: 0.9, min_p: 0.02, repetition_penalty: 1.1, seed: 1, ..Default::default() };
        let (out, end) = collect(&mut rt, &prompt, 8, &sp, &[], 4)?;
        // The same prompt through the CUDA-core prefill attention.
        rt.set_options(KernelOptions { prefill_chunk: 16, prefill_mma_attention: false, ..KernelOptions::default() })?;
        collect(&mut rt, &prompt, 2, &sp, &[], 0)?;
        let scores = rt.score(&prompt)?;
        println!("sanitize run: {} tokens, end {end:?}, {} scored positions", out.len(), scores.len());
        // The tensor-core attention past one key tile: 149 prefill rows in 64-row
        // chunks span three PREFILL_MMA_KEY_TILE (64) key tiles, the last chunk starts
        // mid-block, on head_dim 64 (GQA) and 128 (q/k/v bias).
        for c in &check_shapes()[..2] {
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
            let mut configs = if args.no_tiny { Vec::new() } else { check_shapes() };
            configs.extend(args.shapes.iter().map(|s| shape_config(s)));
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
            let c = shape_config(shape);
            let w = synthetic_weights(&c, WEIGHT_SEED);
            let mut choices = Vec::new();
            for _ in 0..2 {
                let mut rt = runtime_for(&c, &w, args.tp, KernelOptions::default(), None)?;
                let t = Instant::now();
                let choice = cuda::tune::choose_threads(&mut rt, &mut |l| println!("  {l}"))?;
                println!("{shape}: {} in {:.1}s; runtime: {}", choice.describe(), t.elapsed().as_secs_f64(), rt.describe());
                v.check(rt.options().threads == choice.threads, format!("{shape}: the runtime runs the chosen {} threads", choice.threads));
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
            let config = shape_config(shape);
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
            let config = shape_config(shape);
            let w = synthetic_weights(&config, WEIGHT_SEED);
            let n = if args.quick { 256 } else { 2000 };
            tp_check(&config, &w, tp, n, &variant(&args.kernel), &mut v)?;
            // DTP too: the --dtp configs on these matrices, or a Laneformer preset's own
            // lanes (whose weights are these: its lanes add no tensor).
            if args.dtp.is_empty() {
                if let Some((lanes, sched)) = own_lanes(shape)? {
                    dtp_check(&lanes, &w, tp, n, &variant(&args.kernel), &sched, &mut v)?;
                }
            }
            for spec in &args.dtp {
                let d: DtpConfig = spec.parse()?;
                let sched = DtpSchedule::new(&d, &config, tp_gpus(tp).len())?;
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
