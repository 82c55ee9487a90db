//! The subcommands (built with the `cuda` feature): the command line, the shapes and
//! runtimes they share, kernel builds into the cubin cache, `defines` and `tune`.

use std::path::PathBuf;
use std::time::Instant;

use peregrine_engine::config::ModelConfig;
use peregrine_engine::cuda::{self, CudaRuntime, KernelOptions};
use peregrine_engine::dtp::{DtpConfig, DtpSchedule};
use peregrine_engine::lab::synthetic::{check_shapes, ordinary, preset, synthetic_weights};
use peregrine_engine::lab::variants::{kernel_variant, with_chaos};
use peregrine_engine::weights::Weights;
use peregrine_engine::{CudaOptions, CudaPaths, Result};

mod trace;

/// Weight seed of every synthetic model here (the GPU tests' and the bench's).
const WEIGHT_SEED: u64 = 1234;
/// The architecture the cubins are built for without a GPU.
const ARCH: &str = "sm_90a";
/// The benchmark presets.
const BENCH_SHAPES: &str = "smollm2-135m,llama-3.2-1b,qwen2.5-coder-1.5b,smollm2-1.7b";
/// The kernel builds the GPU test suite loads besides the default (its
/// PEREGRINE_GPU_VARIANTS default).
const TEST_VARIANTS: &str = "default,default+threads448,default+threads384";

/// The command line (clap).
#[derive(clap::Parser)]
#[command(name = "gpu_check", about = "Traces, kernel builds and tuning of the persistent kernel")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// The phase trace of each kernel build: the step after the prompt, runs pooled.
    Trace {
        /// Shapes (presets), comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "smollm2-135m,llama-3.2-1b")]
        shapes: Vec<String>,
        /// Kernel builds, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "default")]
        variants: Vec<String>,
        /// Prompt tokens before the traced step.
        #[arg(long, default_value_t = 32)]
        prompt: usize,
        /// Traced runs pooled per build.
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// Tensor-parallel degree (rank 0 is traced; a Laneformer preset also runs its own lanes).
        #[arg(long, default_value_t = 1)]
        tp: usize,
        /// Weights: bf16, or random quantized blocks of a mix streamed natively (lab::synthetic::MIX_NAMES).
        #[arg(long, default_value = "bf16")]
        weights: String,
    },
    /// Fills the cubin cache with the one-GPU kernels the GPU tests and the bench load.
    Precompile {
        /// Shapes (presets), comma-separated; the tiny check shapes come too.
        #[arg(long, value_delimiter = ',', default_value = BENCH_SHAPES)]
        shapes: Vec<String>,
        /// Kernel builds, comma-separated (each also with its chaos delays).
        #[arg(long, value_delimiter = ',', default_value = TEST_VARIANTS)]
        variants: Vec<String>,
        /// Without the tiny check shapes.
        #[arg(long)]
        no_tiny: bool,
        /// Without the chaos-delay builds.
        #[arg(long)]
        no_chaos: bool,
    },
    /// Fills the cubin cache with the TP 2 and DTP kernels of the shapes.
    PrecompileTp {
        /// Shapes (presets), comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "qwen2.5-coder-1.5b")]
        shapes: Vec<String>,
        /// More kernel builds, comma-separated (e.g. the traced ones of `trace --tp 2`).
        #[arg(long, value_delimiter = ',')]
        variants: Vec<String>,
        /// Without the chaos-delay builds.
        #[arg(long)]
        no_chaos: bool,
        /// DTP configs at 2 lanes, `;`-separated `delay=D[,early=…]` specs.
        #[arg(long, value_delimiter = ';')]
        dtp: Vec<String>,
    },
    /// The `-D` options NVRTC gets for a shape (to compile kernels/decode.cu by hand).
    Defines {
        #[arg(long, default_value = "smollm2-135m")]
        shape: String,
        #[arg(long, default_value = "default")]
        kernel: String,
        #[arg(long, default_value_t = 1)]
        tp: usize,
    },
    /// Times the load-time choice of threads per block, twice per shape (the second
    /// load reads the first one's choice from the cache).
    Tune {
        #[arg(long, value_delimiter = ',', default_value = "smollm2-135m,llama-3.2-1b")]
        shapes: Vec<String>,
        #[arg(long, default_value_t = 1)]
        tp: usize,
    },
    /// What an extra row of a step costs: one bf16 matrix times 1..=N vectors in one
    /// pass, timed, each vector checked against its single-vector bits.
    Rows {
        /// Matrices as ROWSxK, comma-separated (default: Llama-3.2-1B's gate/up and down
        /// at twice their rows, so the pass streams from HBM rather than L2, and SmolLM2-135M's gate/up).
        #[arg(long, value_delimiter = ',', default_value = "32768x2048,4096x8192,3072x576")]
        shapes: Vec<String>,
        #[arg(long, default_value_t = 8)]
        vectors: usize,
        #[arg(long, default_value_t = 20)]
        repeats: usize,
    },
}

pub fn main() -> Result<()> {
    let cli = <Cli as clap::Parser>::parse();
    // The compile-only subcommands load NVRTC before any runtime would, so the folder
    // PEREGRINE_NVRTC_DIR names must be searched here too.
    if let Some(dir) = std::env::var_os("PEREGRINE_NVRTC_DIR").filter(|d| !d.is_empty()) {
        cuda::nvrtc::preload(&[PathBuf::from(dir)])?;
    }
    match cli.command {
        Command::Trace { shapes, variants, prompt, runs, tp, weights } => {
            trace::run(&trace::Plan { shapes: names(shapes), variants: names(variants), prompt, runs, tp, weights })
        }
        Command::Precompile { shapes, variants, no_tiny, no_chaos } => precompile(&names(shapes), &names(variants), no_tiny, no_chaos),
        Command::PrecompileTp { shapes, variants, no_chaos, dtp } => precompile_tp(&names(shapes), &names(variants), no_chaos, &names(dtp)),
        Command::Defines { shape, kernel, tp } => {
            let c = shape_config(&shape);
            let shard = cuda::layout::shard(&c, tp).map_err(peregrine_engine::CudaError::Unsupported)?;
            let defines =
                cuda::layout::defines_tp(&shard, &kernel_variant(&kernel)?, tp, c.vocab_size, None, cuda::nvrtc::shared_per_block_of(ARCH));
            for (k, v) in defines {
                println!("-D{k}={v}");
            }
            Ok(())
        }
        Command::Tune { shapes, tp } => tune(&names(shapes), tp),
        Command::Rows { shapes, vectors, repeats } => rows(&names(shapes), vectors, repeats),
    }
}

/// `rows`: a table per matrix of the pass's time by vectors per pass.
fn rows(shapes: &[String], vectors: usize, repeats: usize) -> Result<()> {
    let paths = cuda_options().paths;
    println!("GPU 0: {}", cuda::devices()?.first().cloned().unwrap_or_default());
    for shape in shapes {
        let parsed = shape.split_once('x').and_then(|(r, k)| Some((r.trim().parse::<usize>().ok()?, k.trim().parse::<usize>().ok()?)));
        let Some((n_rows, k)) = parsed else {
            return Err(peregrine_engine::Error::InvalidRequest(format!("--shapes takes ROWSxK, not {shape}")));
        };
        println!("\n{n_rows} × {k} bf16 ({:.1} MB), median of {repeats}", (n_rows * k * 2) as f64 / 1e6);
        println!("| vectors | µs | weight GB/s | × one vector | each vector's bits as alone |");
        println!("| ---: | ---: | ---: | ---: | --- |");
        let most = vectors.min(cuda::rows_cost::max_vectors_for(k));
        for r in cuda::rows_cost::rows_cost(0, &paths, k, n_rows, most, repeats)? {
            println!("| {} | {:.1} | {:.0} | {:.3} | {} |", r.vectors, r.us, r.weight_gbs, r.relative, if r.exact { "yes" } else { "NO" });
        }
    }
    Ok(())
}

/// A list argument without its empty entries (`--variants ''` names none).
fn names(v: Vec<String>) -> Vec<String> {
    v.into_iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()
}

/// The CUDA options here: library folders and the kernel cache from the same variables
/// `peregrine` reads, ranks sharing a GPU with PEREGRINE_TP_SHARE_GPU.
fn cuda_options() -> CudaOptions {
    let var = |v: &str| std::env::var_os(v).filter(|p| !p.is_empty()).map(PathBuf::from);
    CudaOptions { share_gpu: var("PEREGRINE_TP_SHARE_GPU").is_some(), paths: CudaPaths::from_vars(&var), ..CudaOptions::default() }
}

/// A shape name as the standard kernels run it: the preset, a Laneformer preset's
/// matrices as an ordinary model ([`own_lanes`] is the Laneformer itself).
fn shape_config(name: &str) -> ModelConfig {
    ordinary(&preset(name).unwrap_or_else(|| panic!("unknown shape {name}")))
}

/// A Laneformer preset and its own schedule (None for an ordinary preset).
fn own_lanes(name: &str) -> Result<Option<(ModelConfig, DtpSchedule)>> {
    match preset(name) {
        Some(c) if c.lanes.count > 1 => {
            let sched = DtpSchedule::of_laneformer(&c)?;
            Ok(Some((c, sched)))
        }
        _ => Ok(None),
    }
}

/// The devices of a `tp`-rank run: 0..tp, or the list in PEREGRINE_TP_GPUS (`0,0`
/// with PEREGRINE_TP_SHARE_GPU=1 runs both ranks on one GPU).
fn tp_gpus(tp: usize) -> Vec<usize> {
    match std::env::var("PEREGRINE_TP_GPUS") {
        Ok(list) => list.split(',').filter_map(|t| t.trim().parse().ok()).collect(),
        Err(_) => (0..tp).collect(),
    }
}

/// A runtime on one GPU, or with `tp` > 1 over [`tp_gpus`].
fn runtime_for(config: &ModelConfig, w: &Weights, tp: usize, options: KernelOptions) -> Result<CudaRuntime> {
    let gpus = if tp > 1 { tp_gpus(tp) } else { vec![0] };
    CudaRuntime::with_kernel(config, w, &gpus, &cuda_options(), options, None)
}

/// One cubin into the cache: `ranks` ranks of `config` with `options` (and `sched`).
fn compile(config: &ModelConfig, options: &KernelOptions, ranks: usize, sched: Option<&DtpSchedule>) -> Result<usize> {
    cuda::compile_only(config, options, ranks, sched, ARCH, cuda_options().paths.cubin_cache.as_deref())
}

/// Every build of `variants` (and with chaos delays, attention split or not, unless
/// `no_chaos`), the default's always among them, for the tiny check shapes (unless
/// `no_tiny`) and `shapes`.
fn precompile(shapes: &[String], variants: &[String], no_tiny: bool, no_chaos: bool) -> Result<()> {
    let mut options: Vec<(String, KernelOptions)> = vec![("default".into(), KernelOptions::default())];
    for name in variants {
        let base = kernel_variant(name)?;
        options.push((name.clone(), base.clone()));
        if !no_chaos {
            options.push((format!("{name} + chaos"), with_chaos(&base, true)));
            options.push((format!("{name} + chaos unsplit"), with_chaos(&base, false)));
        }
    }
    let mut seen = Vec::new();
    options.retain(|(_, o)| {
        let new = !seen.contains(o);
        seen.push(o.clone());
        new
    });
    let mut configs: Vec<ModelConfig> = if no_tiny { Vec::new() } else { check_shapes() };
    configs.extend(shapes.iter().map(|s| shape_config(s)));
    for c in &configs {
        for (n, o) in &options {
            if let Some(why) = cuda::layout::unsupported(c, o) {
                println!("{} {n}: skipped ({why})", c.name);
                continue;
            }
            let t = Instant::now();
            let bytes = compile(c, o, 1, None)?;
            println!("{} {n}: {bytes} B cubin in {:.1}s", c.name, t.elapsed().as_secs_f64());
        }
    }
    Ok(())
}

/// The kernels a TP 2 run of each shape loads: standard TP with and without chaos
/// delays, the `dtp` configs and a Laneformer preset's own lanes (with chaos too), and
/// `variants` of each.
fn precompile_tp(shapes: &[String], variants: &[String], no_chaos: bool, dtp: &[String]) -> Result<()> {
    let chaos = with_chaos(&KernelOptions::default(), true);
    for shape in shapes {
        let c = shape_config(shape);
        let t = Instant::now();
        compile(&c, &KernelOptions::default(), 1, None)?;
        compile(&c, &KernelOptions::default(), 2, None)?;
        if !no_chaos {
            compile(&c, &chaos, 2, None)?;
        }
        let mut dtps = Vec::new();
        for spec in dtp {
            let d: DtpConfig = spec.parse()?;
            dtps.push((c.clone(), DtpSchedule::new(&d, &c, 2)?));
        }
        dtps.extend(own_lanes(shape)?);
        for (model, sched) in &dtps {
            compile(model, &KernelOptions::default(), sched.lanes, Some(sched))?;
            if !no_chaos {
                compile(model, &chaos, sched.lanes, Some(sched))?;
            }
        }
        for name in variants {
            let o = kernel_variant(name)?;
            compile(&c, &o, 2, None)?;
            for (model, sched) in &dtps {
                compile(model, &o, sched.lanes, Some(sched))?;
            }
        }
        println!("{shape}: TP kernels compiled in {:.1}s", t.elapsed().as_secs_f64());
    }
    Ok(())
}

/// The load-time threads-per-block measurement (cuda/tune.rs) on each shape, twice:
/// how long each load took to choose, and what it chose from where.
fn tune(shapes: &[String], tp: usize) -> Result<()> {
    match cuda::devices() {
        Ok(d) => println!("CUDA devices: {d:?}"),
        Err(e) => {
            println!("skipped: {e}");
            return Ok(());
        }
    }
    for shape in shapes {
        let c = shape_config(shape);
        let w = synthetic_weights(&c, WEIGHT_SEED);
        for load in 1..=2 {
            let mut rt = runtime_for(&c, &w, tp, KernelOptions::default())?;
            let t = Instant::now();
            let choice = cuda::tune::choose_threads(&mut rt, &mut |l| println!("  {l}"))?;
            println!("{shape} load {load}: {} in {:.1}s; runtime: {}", choice.describe(), t.elapsed().as_secs_f64(), rt.describe());
        }
    }
    Ok(())
}
