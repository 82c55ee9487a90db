//! Prefill and decode throughput of the engine on one model, medians of several runs;
//! on the CPU, alternated run by run with llama.cpp (llama-cpp-python, same GGUF, same
//! threads) when an interpreter with it is found. The measurement is cpu_plan.rs.

use std::path::PathBuf;

use peregrine_engine::cpu::build_cpu_runtime;
use peregrine_engine::cpu::fast_runtime::{FastOptions, FastRuntime};
use peregrine_engine::runtime::Runtime;
use peregrine_engine::{build_generator, load_model, CpuRuntimeKind, Device};
use serde::Serialize;

use peregrine_server::cli::ModelArgs;

use crate::cpu_plan::{
    measure, median, BenchPlan, Figures, DEFAULT_GEN_TOKENS, DEFAULT_PROMPT_TOKENS, DEFAULT_RUNS, DEFAULT_SHORT_PROMPT_TOKENS,
};
use crate::error::{Error, Result};
use crate::llamacpp::LlamaCpp;

/// Arguments of `peregrine-bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Measurements per engine (medians are reported).
    #[arg(long, default_value_t = DEFAULT_RUNS)]
    pub runs: usize,
    /// Prompt length of the prefill measurement.
    #[arg(long, default_value_t = DEFAULT_PROMPT_TOKENS)]
    pub prompt_tokens: usize,
    /// Tokens generated in the decode measurement.
    #[arg(long, default_value_t = DEFAULT_GEN_TOKENS)]
    pub gen_tokens: usize,
    /// Prompt length before the decode measurement.
    #[arg(long, default_value_t = DEFAULT_SHORT_PROMPT_TOKENS)]
    pub short_prompt_tokens: usize,
    /// Python with llama-cpp-python (default: /tmp/llama-venv/bin/python if present).
    #[arg(long, env = "PEREGRINE_LLAMACPP_PYTHON")]
    pub llamacpp_python: Option<PathBuf>,
    /// Measure Peregrine only.
    #[arg(long)]
    pub no_llamacpp: bool,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// `--shape` and its options: the CUDA kernel on synthetic weights (bench_cuda.rs).
    #[command(flatten)]
    pub cuda: crate::shape_bench::CudaBenchArgs,
}

/// What `--json` prints.
#[derive(Serialize)]
struct Report {
    model: String,
    cpu: String,
    backend: String,
    threads: Option<usize>,
    plan: PlanOut,
    runs: Vec<FiguresOut>,
    median: FiguresOut,
    /// On the CPU: the weight bytes a decoded token reads, and the read loop's bytes per
    /// second with the same threads, measured in this run.
    decode_bytes_per_token: Option<u64>,
    read_loop_bytes_per_s: Option<f64>,
    llamacpp: Option<Side>,
}

#[derive(Serialize)]
struct PlanOut {
    prompt: Vec<u32>,
    short_prompt: Vec<u32>,
    gen_tokens: usize,
}

#[derive(Serialize, Clone, Copy)]
struct FiguresOut {
    prefill_tok_s: f64,
    decode_tok_s: f64,
}

#[derive(Serialize)]
struct Side {
    version: String,
    runs: Vec<FiguresOut>,
    median: FiguresOut,
}

impl From<Figures> for FiguresOut {
    fn from(f: Figures) -> Self {
        FiguresOut { prefill_tok_s: f.prefill_tok_s, decode_tok_s: f.decode_tok_s }
    }
}

fn medians(runs: &[FiguresOut]) -> FiguresOut {
    let of = |f: fn(&FiguresOut) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
    FiguresOut { prefill_tok_s: of(|r| r.prefill_tok_s), decode_tok_s: of(|r| r.decode_tok_s) }
}

/// Runs the benchmark `args` describe.
pub fn run(args: BenchArgs) -> Result<()> {
    let device: Device = args.model.device.into();
    if !args.cuda.shape.is_empty() {
        if device == Device::Cpu {
            return Err(Error::bad("device", "--shape benchmarks the CUDA engine on synthetic weights: use --device cuda"));
        }
        let cuda = args.model.engine.cuda_options()?;
        return crate::shape_bench::run(&args.cuda, &cuda, &args.model.tp_list()?, args.model.gpus.as_deref(), args.runs, args.json);
    }
    let path = args.model.model_path()?;
    let engine = args.model.engine_options()?;
    let say = |line: String| {
        if !args.json {
            eprintln!("{line}");
        }
    };
    say(format!("loading {}", path.display()));
    let files = load_model(&path)?;
    let plan =
        BenchPlan::new(Some(files.tokenizer()), files.config().vocab_size, args.prompt_tokens, args.short_prompt_tokens, args.gen_tokens)?;
    let model_name = format!("{} ({:.1}M parameters)", files.config().name, files.config().parameter_count() as f64 / 1e6);
    let decode_bytes = decode_bytes_per_token(files.weights());
    // llama.cpp gets the same threads (--cpu-threads, else every core).
    let options = FastOptions::from_options(&engine.cpu);
    let mut runtime: Box<dyn Runtime> = match (device, engine.cpu.runtime) {
        (Device::Cpu, CpuRuntimeKind::Fast) => Box::new(FastRuntime::new(files.config(), files.weights(), options)?),
        (Device::Cpu, _) => build_cpu_runtime(&engine.cpu, files.config(), files.weights())?,
        _ => build_generator(files, &engine)?.into_runtime(),
    };
    let backend = runtime.backend();
    let on_cpu = backend.kind == "cpu";
    say(format!("model {model_name} on {} [{}]", backend.kind, backend.devices.join(", ")));

    let mut llama = None;
    if on_cpu && !args.no_llamacpp {
        match (LlamaCpp::find_python(args.llamacpp_python.as_deref()), LlamaCpp::find_script(), path.is_file()) {
            (Some(python), Some(script), true) => {
                say(format!("starting llama.cpp ({} {})", python.display(), script.display()));
                let context = plan.prompt.len().max(plan.short_prompt.len() + plan.gen_tokens) + 1;
                llama = Some(LlamaCpp::start(&python, &script, &path, options.threads, context)?);
            }
            (None, _, _) => say("no Python with llama-cpp-python found (--llamacpp-python): Peregrine only".into()),
            (_, None, _) => say("scripts/bench/llamacpp_bench.py not found (run from the repository root): Peregrine only".into()),
            (_, _, false) => say("llama.cpp needs a GGUF file: Peregrine only".into()),
        }
    }

    // One untimed pass each: first-touch page faults, thread start-up, allocator.
    measure(runtime.as_mut(), &plan)?;
    if let Some(l) = llama.as_mut() {
        l.measure(&plan)?;
    }
    let read_loop = on_cpu.then(|| peregrine_engine::lab::read_bandwidth::read_bandwidth(options.threads));
    if let Some(bw) = read_loop {
        say(format!(
            "read loop, {} MiB, {} threads: {:.1} GB/s",
            peregrine_engine::lab::read_bandwidth::READ_BYTES >> 20,
            options.threads,
            bw / 1e9
        ));
    }
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for i in 0..args.runs.max(1) {
        ours.push(FiguresOut::from(measure(runtime.as_mut(), &plan)?));
        let mut line =
            format!("run {}: Peregrine prefill {:7.1} · decode {:6.1} tok/s", i + 1, ours[i].prefill_tok_s, ours[i].decode_tok_s);
        if let Some(l) = llama.as_mut() {
            theirs.push(FiguresOut::from(l.measure(&plan)?));
            line += &format!("   llama.cpp prefill {:7.1} · decode {:6.1} tok/s", theirs[i].prefill_tok_s, theirs[i].decode_tok_s);
        }
        say(line);
    }
    let report = Report {
        model: model_name,
        cpu: peregrine_engine::runtime::cpu_name(),
        backend: format!("{} [{}]", backend.kind, backend.devices.join(", ")),
        threads: on_cpu.then_some(options.threads),
        plan: PlanOut { prompt: plan.prompt.clone(), short_prompt: plan.short_prompt.clone(), gen_tokens: plan.gen_tokens },
        median: medians(&ours),
        runs: ours,
        decode_bytes_per_token: on_cpu.then_some(decode_bytes),
        read_loop_bytes_per_s: read_loop,
        llamacpp: llama.as_ref().map(|l| Side { version: l.version.clone(), median: medians(&theirs), runs: theirs }),
    };
    if args.json {
        println!("{}", serde_json::to_string(&report).unwrap_or_default());
    } else {
        print_table(&report, &plan);
    }
    Ok(())
}

/// Weight bytes one decoded token reads: every layer tensor and the LM head (the
/// embedding when it is tied; otherwise the embedding's one row is left out).
fn decode_bytes_per_token(w: &peregrine_engine::weights::Weights) -> u64 {
    let layers: usize = w.layers.iter().map(|l| l.tensors().map(|t| t.bytes().len()).sum::<usize>()).sum();
    (layers + w.lm_head().bytes().len() + w.final_norm.bytes().len()) as u64
}

fn print_table(r: &Report, plan: &BenchPlan) {
    println!("{} · {} · medians of {} runs", r.model, r.backend, r.runs.len());
    let rows = [
        (format!("decode tok/s ({} tokens)", plan.gen_tokens), r.median.decode_tok_s, r.llamacpp.as_ref().map(|l| l.median.decode_tok_s)),
        (
            format!("prefill tok/s ({}-token prompt)", plan.prompt.len()),
            r.median.prefill_tok_s,
            r.llamacpp.as_ref().map(|l| l.median.prefill_tok_s),
        ),
    ];
    match &r.llamacpp {
        Some(l) => {
            println!("{:<32} {:>10} {:>10} {:>7}", "", "Peregrine", "llama.cpp", "ratio");
            for (label, ours, theirs) in rows {
                let theirs = theirs.unwrap_or(f64::NAN);
                println!("{label:<32} {ours:>10.1} {theirs:>10.1} {:>6.2}×", ours / theirs);
            }
            println!("llama.cpp: llama-cpp-python {}, same GGUF and threads, runs alternated with Peregrine's", l.version);
        }
        None => {
            for (label, ours, _) in rows {
                println!("{label:<32} {ours:>10.1}");
            }
        }
    }
    if let (Some(bytes), Some(bw)) = (r.decode_bytes_per_token, r.read_loop_bytes_per_s) {
        let gbs = r.median.decode_tok_s * bytes as f64 / 1e9;
        println!(
            "decode reads {:.1} MB/token: {gbs:.1} GB/s, {:.0} % of the read loop's {:.1} GB/s ({} threads)",
            bytes as f64 / 1e6,
            100.0 * gbs * 1e9 / bw,
            bw / 1e9,
            r.threads.unwrap_or(1)
        );
    }
}
