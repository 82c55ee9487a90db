//! Every GPU correctness check, one libtest-mimic trial each: the GPU engine against
//! the CPU float32 reference (reference.rs), the batched prefill against the token
//! path (prefill.rs), chaos delays and kernel variants (race.rs), prompt reuse
//! (reuse.rs), tensor parallelism and DTP against one GPU and the CPU DTP reference
//! (tp.rs), Laneformer lanes (laneformer.rs), quantized weights (quant.rs), the 3–8B
//! widths (big.rs) and the device's grammar mask (grammar.rs), on synthetic
//! random-weight models of the shapes the kernels special-case and of the benchmark
//! presets. The measuring tools (trace, precompile) are `gpu_check`'s.
//!
//! Runs wherever a CUDA device is present. Elsewhere every check is reported as
//! ignored with the reason (libtest-mimic), never as passed. scripts/gpu/ builds this
//! binary here and runs it on the GPU host; a name filter picks trials, e.g. `sanitize`
//! under compute-sanitizer.

#[path = "gpu/big.rs"]
mod big;
#[path = "gpu/grammar.rs"]
mod grammar;
#[path = "gpu/laneformer.rs"]
mod laneformer;
#[path = "gpu/prefill.rs"]
mod prefill;
#[path = "gpu/quant.rs"]
mod quant;
#[path = "gpu/race.rs"]
mod race;
#[path = "gpu/reference.rs"]
mod reference;
#[path = "gpu/reuse.rs"]
mod reuse;
#[path = "gpu/tp.rs"]
mod tp;

use std::path::PathBuf;

use libtest_mimic::{Arguments, Failed, Trial};
use peregrine_engine::config::ModelConfig;
use peregrine_engine::cuda::{self, CudaRuntime, KernelOptions};
use peregrine_engine::dtp::DtpSchedule;
use peregrine_engine::lab::runs::collect;
use peregrine_engine::lab::synthetic::{check_shapes, ordinary, preset, synthetic_weights};
use peregrine_engine::runtime::RunEnd;
use peregrine_engine::sampling::{Sampled, SamplingParams};
use peregrine_engine::weights::Weights;
use peregrine_engine::{CudaOptions, CudaPaths};

use peregrine_engine::lab::runs::ids;

/// Relative logit error allowed against the f32 reference (bf16 weights and KV cache).
const MAX_REL_ERR: f64 = 3e-2;
/// Weight seed of every synthetic model here.
const WEIGHT_SEED: u64 = 1234;
/// The benchmark presets the long-prompt checks run on (synthetic weights).
const BENCH_SHAPES: [&str; 4] = ["smollm2-135m", "llama-3.2-1b", "qwen2.5-coder-1.5b", "smollm2-1.7b"];

type Check = Result<(), Failed>;

fn main() {
    let mut args = Arguments::from_args();
    // One check at a time: each holds whole-GPU persistent kernels.
    args.test_threads = Some(1);
    let absent = cuda::devices().err().map(|e| e.to_string());
    let mut trials = Vec::new();
    trials.extend(reference::trials());
    trials.extend(prefill::trials());
    trials.extend(race::trials());
    trials.extend(reuse::trials());
    trials.push(Trial::test("threads per block: measured at the first load, read before building at the next", || tuning_check(&[0])));
    trials.push(Trial::test("threads per block at tp 2: measured at the first load, read before building at the next", || {
        tuning_check(&tp_gpus())
    }));
    trials.extend(tp::trials());
    trials.extend(laneformer::trials());
    trials.extend(quant::trials());
    trials.extend(big::trials());
    trials.extend(grammar::trials());
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

/// A benchmark preset by name, as an ordinary model (a Laneformer preset's matrices).
fn preset_shape(name: &str) -> ModelConfig {
    ordinary(&preset(name).unwrap_or_else(|| panic!("unknown preset {name}")))
}

/// A trial of the kernel `base` on `config`, ignored (with the reason printed) where
/// that build does not support the shape.
fn kernel_trial(name: String, config: &ModelConfig, base: &KernelOptions, check: impl FnOnce() -> Check + Send + 'static) -> Trial {
    let trial = Trial::test(name.clone(), check);
    match cuda::layout::unsupported(config, base) {
        Some(why) => {
            println!("{name}: not run ({why})");
            trial.with_ignored_flag(true)
        }
        None => trial,
    }
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
    Ok(collect(rt, prompt, max_tokens, sampling, stops, top).map_err(|e| e.to_string())?)
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

/// The load path's thread tuning on `gpus` with an empty kernel cache: the first build
/// measures (or keeps the default) and records the choice, the second reads it before
/// building.
fn tuning_check(gpus: &[usize]) -> Check {
    use peregrine_engine::cuda::tune::{build_tuned, ThreadsSource};
    let config = check_shapes()[0].clone();
    let weights = synthetic_weights(&config, WEIGHT_SEED);
    let dir = std::env::temp_dir().join(format!("pg-gpu-tune-{}-{}", std::process::id(), gpus.len()));
    let mut cuda = cuda_options();
    cuda.paths.cubin_cache = Some(dir.clone());
    let mut log = |line: &str| println!("  {line}");
    let (_, first) = build_tuned(&config, &weights, gpus, &cuda, None, &mut log).map_err(|e| e.to_string())?;
    let (rt, second) = build_tuned(&config, &weights, gpus, &cuda, None, &mut log).map_err(|e| e.to_string())?;
    std::fs::remove_dir_all(&dir).ok();
    ensure(matches!(first.source, ThreadsSource::Measured(_) | ThreadsSource::Default), || format!("first load: {}", first.describe()))?;
    ensure(second.source == ThreadsSource::Cached && second.threads == first.threads && rt.options().threads == first.threads, || {
        format!("second load: {} (first: {})", second.describe(), first.describe())
    })
}
