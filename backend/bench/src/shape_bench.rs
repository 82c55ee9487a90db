//! `peregrine-bench --device cuda --shape NAME[,NAME…]`: the persistent kernel on
//! synthetic bf16 weights of the benchmark shapes (built here in memory), with the
//! copy bandwidth measured in the same run, optionally next to the PyTorch CUDA-graph
//! baseline (`--baseline`). The measurement is cuda_shape.rs and torch_baseline.rs;
//! this file is the CLI and the table.

use std::path::PathBuf;
use std::time::Instant;

use crate::cuda_shape::{
    self as bench, CudaBenchPlan, ShapeFigures, BANDWIDTH_BYTES, BANDWIDTH_REPEATS, CHECKED_TOKENS, DEFAULT_GEN_TOKENS,
    DEFAULT_PROMPT_TOKENS, DEFAULT_TTFT_PROMPT_TOKENS, TURN_TOKENS,
};
use crate::torch_baseline::{self, BaselineFigures, BaselinePlan};
use peregrine_engine::cuda::{self, measure_copy_bandwidth};
use peregrine_engine::dtp::DtpSchedule;
use peregrine_engine::lab::synthetic::{ordinary, preset, synthetic_mix_weights, QuantMix, LANEFORMER_PRESETS, PRESET_NAMES};
use peregrine_engine::{CudaOptions, GpuWeights};
use serde_json::json;

use crate::error::{Error, Result};

/// Seed of the synthetic weights (the same for every shape and run).
pub const WEIGHT_SEED: u64 = 1234;

/// The CUDA-only arguments of `peregrine-bench`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct CudaBenchArgs {
    /// Synthetic shapes to benchmark on the GPU (comma-separated): smollm2-135m, llama-3.2-1b, qwen2.5-coder-1.5b, smollm2-1.7b, qwen2.5-coder-3b, qwen2.5-coder-7b, llama-3.1-8b, laneformer-2b.
    #[arg(long, value_delimiter = ',')]
    pub shape: Vec<String>,
    /// With --shape: prompt tokens before the decode measurement.
    #[arg(long, default_value_t = DEFAULT_PROMPT_TOKENS)]
    pub prompt: usize,
    /// With --shape: tokens generated per timed run.
    #[arg(long, default_value_t = DEFAULT_GEN_TOKENS)]
    pub gen: usize,
    /// With --shape: KV-cache positions to allocate (default: the kernel's default, capped by the model's context).
    #[arg(long)]
    pub context: Option<usize>,
    /// With --shape and a --tp above 1: also run each ordinary shape as Delayed Tensor
    /// Parallelism with this config (`delay=D[,early=present|none]`); default `none`
    /// (a Laneformer shape always runs its own lanes).
    #[arg(long)]
    pub dtp: Option<String>,
    /// With --shape: the weights each shape runs with, side by side (comma-separated):
    /// bf16, or random quantized blocks streamed natively: q8_0, q4_0, q4_1, q4_k, q6_k
    /// (every matrix), q4_k_m (llama.cpp's Q4_K_M mix of Q4_K and Q6_K) or q4_1+q8_0
    /// (the default model file's mix: Q4_1 matrices, Q8_0 embedding).
    #[arg(long, value_delimiter = ',', default_value = "bf16")]
    pub weights: Vec<String>,
    /// With --shape: also run scripts/bench/torch_cuda_graph.py (PyTorch + transformers, CUDA graph) and print the ratio.
    #[arg(long)]
    pub baseline: bool,
    /// Python with PyTorch and transformers for --baseline (default: $PEREGRINE_TORCH_PYTHON, else python3).
    #[arg(long)]
    pub torch_python: Option<PathBuf>,
    /// With --shape: also write the JSON report to this file (the table still prints), for
    /// scripts that summarise a run whose progress should stay readable.
    #[arg(long)]
    pub json_out: Option<PathBuf>,
}

/// Runs the shape benchmark at each tensor-parallel degree of `tps` (on the first
/// devices of `gpus`, default 0, 1, …); `runs` timed runs per shape, one JSON object
/// with `json`.
pub fn run(args: &CudaBenchArgs, cuda: &CudaOptions, tps: &[usize], gpus: Option<&str>, runs: usize, json: bool) -> Result<()> {
    let say = |line: String| {
        if !json {
            eprintln!("{line}");
        }
    };
    let configs = args
        .shape
        .iter()
        .map(|name| {
            preset(name).ok_or_else(|| {
                let known = PRESET_NAMES.iter().chain(LANEFORMER_PRESETS).copied().collect::<Vec<_>>().join(", ");
                Error::bad("shape", format!("unknown shape `{name}` (known: {known})"))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let plan = CudaBenchPlan {
        prompt_tokens: args.prompt,
        gen_tokens: args.gen,
        ttft_prompt_tokens: DEFAULT_TTFT_PROMPT_TOKENS,
        runs: runs.max(1),
        context: args.context,
    };
    for c in &configs {
        plan.kernel_options(c, cuda)?;
    }
    let mixes = args.weights.iter().map(|m| parse_mix(m).map(|mix| (m.clone(), mix))).collect::<Result<Vec<_>>>()?;
    let max_tp = tps.iter().copied().max().unwrap_or(1);
    let pool: Vec<usize> = match gpus {
        None => (0..max_tp).collect(),
        Some(list) => {
            let n = list.split(',').count();
            if n < max_tp {
                return Err(Error::bad("gpus", format!("--gpus names {n} devices but --tp asks for {max_tp}")));
            }
            peregrine_engine::parse_gpus(n, Some(list), cuda.share_gpu)?
        }
    };
    let devices = cuda::devices().map_err(|e| Error::Request(format!("--device cuda: no CUDA device ({e})")))?;
    say(format!("CUDA devices: {}", devices.join(", ")));
    let bandwidth = measure_copy_bandwidth(pool[0], BANDWIDTH_BYTES, BANDWIDTH_REPEATS)?;
    say(format!("device-to-device copy, {} MiB: {:.2} TB/s (read + write)", BANDWIDTH_BYTES >> 20, bandwidth / 1e12));

    // A shape that fails is reported and skipped; the others still run.
    let mut rows: Vec<ShapeFigures> = Vec::new();
    let mut measured = Vec::new();
    let mut failed: Vec<String> = Vec::new();
    // Index into `measured` (and the baseline's rows) of each row's shape.
    let mut shape_of_row: Vec<usize> = Vec::new();
    // Each row's weights, and the tok/s of the same shape and degree with bf16 weights.
    let mut mix_of_row: Vec<String> = Vec::new();
    for config in &configs {
        for (mix_name, mix) in &mixes {
            let t0 = Instant::now();
            let weights = synthetic_mix_weights(config, WEIGHT_SEED, *mix);
            say(format!(
                "{} {mix_name}: {:.0}M parameters, weights built in {:.1}s",
                config.name,
                config.parameter_count() as f64 / 1e6,
                t0.elapsed().as_secs_f64()
            ));
            // Each degree runs standard TP, with --dtp also as DTP on 2+ GPUs. A Laneformer
            // runs its lanes folded onto each degree's GPUs, beside standard TP of the same
            // matrices as an ordinary model.
            let mut runs: Vec<(usize, Option<DtpSchedule>)> = Vec::new();
            if config.lanes.count > 1 {
                for &tp in tps.iter().filter(|&&tp| config.lanes.count.is_multiple_of(tp)) {
                    runs.push((tp, None));
                    runs.push((tp, Some(DtpSchedule::of_laneformer(config)?)));
                }
            }
            for &tp in tps.iter().filter(|_| config.lanes.count == 1) {
                runs.push((tp, None));
                let dtp_config = match args.dtp.as_deref() {
                    None | Some("none") => None,
                    Some(spec) => Some(spec.parse::<peregrine_engine::dtp::DtpConfig>()?),
                };
                if let (true, Some(d)) = (tp > 1, dtp_config) {
                    runs.push((tp, Some(DtpSchedule::new(&d, config, tp)?)));
                }
            }
            for (tp, dtp) in runs {
                let t1 = Instant::now();
                let label = if dtp.is_some() { format!("tp {tp} DTP") } else { format!("tp {tp}") };
                // Quantized synthetic weights are streamed as they are.
                let native = CudaOptions { weights: GpuWeights::Native, ..cuda.clone() };
                let cuda = if mix.is_some() { &native } else { cuda };
                let plain = ordinary(config);
                let (shape, ordinals, shared) = match (&dtp, config.lanes.count) {
                    (None, l) if l > 1 => (&plain, pool[..tp].to_vec(), None),
                    (Some(_), l) if l > 1 => {
                        let folded: Vec<usize> = pool[..tp].iter().flat_map(|&g| std::iter::repeat_n(g, l / tp)).collect();
                        (config, folded, Some(CudaOptions { share_gpu: true, ..cuda.clone() }))
                    }
                    _ => (config, pool[..tp].to_vec(), None),
                };
                let cuda = shared.as_ref().unwrap_or(cuda);
                match bench::bench_shape(shape, &weights, &ordinals, dtp.as_ref(), &plan, cuda, bandwidth) {
                    Ok(mut figures) => {
                        if *mix_name != "bf16" {
                            figures.name = format!("{} {mix_name}", figures.name);
                        }
                        say(format!("  {label}: {}", figures.describe));
                        say(format!("  {label}: {} ({:.1}s)", shape_line(&figures, &plan), t1.elapsed().as_secs_f64()));
                        if !(figures.tokens_match && figures.verification.passed() && figures.prefill_rel_err < bench::MAX_REL_ERR) {
                            failed.push(format!("{} {label}: correctness check failed", config.name));
                        }
                        rows.push(figures);
                        shape_of_row.push(measured.len());
                        mix_of_row.push(mix_name.clone());
                    }
                    Err(e) => {
                        say(format!("  {} {label}: {e}", config.name));
                        failed.push(format!("{} {label}: {e}", config.name));
                    }
                }
            }
        }
        measured.push(config.clone());
    }

    let baseline = if args.baseline && !measured.is_empty() { Some(run_baseline(args, &measured, &plan, &say)) } else { None };
    let baseline_rows: Option<Vec<BaselineFigures>> = match baseline {
        Some(Ok(b)) => Some(b),
        Some(Err(e)) => {
            say(format!("baseline failed: {e}"));
            None
        }
        None => None,
    };
    let report = Report {
        rows: &rows,
        shape_of_row: &shape_of_row,
        mix_of_row: &mix_of_row,
        baseline: baseline_rows.as_deref(),
        bandwidth,
        plan: &plan,
    };
    if let Some(path) = &args.json_out {
        std::fs::write(path, report_json(report).to_string())
            .map_err(|e| Error::Request(format!("--json-out {}: {e}", path.display())))?;
    }
    if json {
        println!("{}", report_json(report));
    } else {
        print_table(report);
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(Error::Request(failed.join("; ")))
    }
}

fn run_baseline(
    args: &CudaBenchArgs,
    configs: &[peregrine_engine::config::ModelConfig],
    plan: &CudaBenchPlan,
    say: &dyn Fn(String),
) -> Result<Vec<BaselineFigures>> {
    let python = torch_baseline::find_python(args.torch_python.as_deref());
    let script = torch_baseline::find_script()
        .ok_or_else(|| Error::Request(format!("{} not found (run from the repository root)", torch_baseline::SCRIPT)))?;
    say(format!("baseline: {} {}", python.display(), script.display()));
    let bplan = BaselinePlan {
        prompt_tokens: plan.prompt_tokens,
        gen_tokens: plan.gen_tokens,
        ttft_prompt_tokens: plan.ttft_prompt_tokens,
        runs: plan.runs,
        seed: WEIGHT_SEED,
    };
    Ok(torch_baseline::run(&python, &script, configs, &bplan, &mut |line| say(format!("  [torch] {line}")))?)
}

fn shape_line(r: &ShapeFigures, plan: &CudaBenchPlan) -> String {
    let v = &r.verification;
    let lo = r.decode_runs.iter().cloned().fold(f64::INFINITY, f64::min);
    let hi = r.decode_runs.iter().cloned().fold(0.0, f64::max);
    format!(
        "{:.0} tok/s (min {lo:.0}, max {hi:.0}), {:.1} µs/token, {:.1} MB/token, {:.1}% of the {:.0} tok/s bound, TTFT({}) {:.2} ms ({}; token by token {:.2} ms; next turn (+{TURN_TOKENS} tokens, {} reused) {:.2} ms; first-step logits batched vs token-by-token rel err {:.2e}, same first token {}); verified run: argmax-consistent {}, vs CPU f32 reference ({} {}) rel err max {:.2e}, top-1 {}/{}; whole run teacher-forced on the CPU fast runtime: {}; timed runs' tokens = verified run's: {}",
        r.decode_tok_s,
        r.us_per_token,
        r.bytes_per_token as f64 / 1e6,
        r.pct_of_bound,
        r.bound_tok_s,
        plan.ttft_prompt_tokens,
        r.ttft_ms,
        prefill_detail(r),
        r.ttft_tokens_ms,
        r.turn_reused,
        r.turn_ttft_ms,
        r.prefill_rel_err,
        r.prefill_same_token,
        v.argmax_consistent,
        v.reference_positions,
        v.reference_kind,
        v.reference_rel_err,
        v.reference_top1,
        v.reference_positions,
        whole_run_detail(v),
        r.tokens_match
    )
}

/// The whole-run teacher-forced check in words.
fn whole_run_detail(v: &bench::Verification) -> String {
    match &v.whole_run {
        None => "not scored (DTP: the first positions' DTP reference only)".into(),
        Some(a) => format!(
            "top-1 {}/{} of {} tokens, {} near-ties, {} unexplained{}, logits max rel diff {:.2e}",
            a.agree,
            a.positions,
            v.tokens.len(),
            a.near_ties,
            a.unexplained.len(),
            a.unexplained.first().map(|u| format!(" (first: {u})")).unwrap_or_default(),
            a.worst_rel
        ),
    }
}

/// The batched prefill's GPU time and its split, or why there is none.
fn prefill_detail(r: &ShapeFigures) -> String {
    match (r.prefill_gpu_ms, r.prefill_split) {
        (Some(ms), Some((g, a, o))) => {
            format!("batched prefill {ms:.2} ms GPU; profiled: GEMMs {g:.2} ms, attention {a:.2} ms, row kernels {o:.2} ms")
        }
        (Some(ms), None) => format!("batched prefill {ms:.2} ms GPU"),
        _ => "prompt token by token".to_string(),
    }
}

/// tok/s of the same shape and weights at TP 1 in this run, for the speed-up column.
fn tp1_rate(rows: &[ShapeFigures], shape_of_row: &[usize], i: usize) -> Option<f64> {
    rows.iter().zip(shape_of_row).find(|(r, &s)| s == shape_of_row[i] && r.name == rows[i].name && r.tp == 1).map(|(r, _)| r.decode_tok_s)
}

/// tok/s of the same shape and degree with standard TP, for DTP rows' ratio.
fn standard_rate(rows: &[ShapeFigures], shape_of_row: &[usize], i: usize) -> Option<f64> {
    let me = &rows[i];
    me.dtp?;
    rows.iter()
        .zip(shape_of_row)
        .find(|(r, &s)| s == shape_of_row[i] && r.name == me.name && r.tp == me.tp && r.dtp.is_none())
        .map(|(r, _)| r.decode_tok_s)
}

fn parse_mix(name: &str) -> Result<Option<QuantMix>> {
    QuantMix::from_name(name).ok_or_else(|| {
        Error::bad("weights", format!("unknown weights `{name}` (one of {})", peregrine_engine::lab::synthetic::MIX_NAMES.join(", ")))
    })
}

/// tok/s of the same shape and degree with bf16 weights, for quantized rows' ratio.
fn bf16_rate(rows: &[ShapeFigures], shape_of_row: &[usize], mix_of_row: &[String], i: usize) -> Option<f64> {
    let me = &rows[i];
    rows.iter()
        .enumerate()
        .find(|(j, r)| shape_of_row[*j] == shape_of_row[i] && mix_of_row[*j] == "bf16" && r.tp == me.tp && r.dtp == me.dtp)
        .map(|(_, r)| r.decode_tok_s)
}

/// Everything the table and the JSON report are made of.
#[derive(Clone, Copy)]
struct Report<'a> {
    rows: &'a [ShapeFigures],
    /// Index of each row's shape (into the baseline's rows), and its `--weights` entry.
    shape_of_row: &'a [usize],
    mix_of_row: &'a [String],
    baseline: Option<&'a [BaselineFigures]>,
    bandwidth: f64,
    plan: &'a CudaBenchPlan,
}

fn print_table(report: Report) {
    let Report { rows, shape_of_row, mix_of_row, baseline, bandwidth, plan } = report;
    println!(
        "decode: {}-token prompt, {} greedy tokens, median of {} runs · bound = {:.2} TB/s copy measured in this run / bytes per token · TTFT: {}-token prompt",
        plan.prompt_tokens, plan.gen_tokens, plan.runs, bandwidth / 1e12, plan.ttft_prompt_tokens
    );
    let with_base = baseline.is_some();
    let mut head =
        "| shape | tp | tok/s | × tp 1 | × standard TP | × bf16 | µs/token | MB/token per GPU | % of bound | % of 4.8 TB/s | TTFT 512 (ms) | prefill GPU (ms) | TTFT 512 token by token (ms) | tokens = verified |"
            .to_string();
    if with_base {
        head += " PyTorch CUDA graph tok/s | ratio | PyTorch prefill 512 (ms) |";
    }
    println!("{head}");
    println!("{}", "| --- ".repeat(head.matches('|').count() - 1) + "|");
    for (i, r) in rows.iter().enumerate() {
        let ok = r.tokens_match && r.verification.passed();
        let speedup = tp1_rate(rows, shape_of_row, i).map_or("–".to_string(), |t1| format!("{:.2}×", r.decode_tok_s / t1));
        let vs_std = standard_rate(rows, shape_of_row, i).map_or("–".to_string(), |t| format!("{:.2}×", r.decode_tok_s / t));
        let vs_bf16 = match bf16_rate(rows, shape_of_row, mix_of_row, i) {
            Some(t) if mix_of_row[i] != "bf16" => format!("{:.2}×", r.decode_tok_s / t),
            _ => "–".to_string(),
        };
        let mut line = format!(
            "| {} | {}{} | {:.0} | {speedup} | {vs_std} | {vs_bf16} | {:.1} | {:.1} | {:.1}% | {:.1}% | {:.2} | {} | {:.1} | {} |",
            r.name,
            r.tp,
            r.dtp.map_or(String::new(), |d| format!(" DTP d={d}")),
            r.decode_tok_s,
            r.us_per_token,
            r.bytes_per_token as f64 / 1e6,
            r.pct_of_bound,
            r.pct_of_spec,
            r.ttft_ms,
            r.prefill_gpu_ms.map_or("–".to_string(), |ms| format!("{ms:.2}")),
            r.ttft_tokens_ms,
            if ok { "yes" } else { "NO" }
        );
        if let Some(b) = baseline.and_then(|b| b.get(shape_of_row[i])) {
            line += &match &b.error {
                Some(e) => format!(" error: {} | – | – |", e.lines().next().unwrap_or("")),
                None => format!(
                    " {:.0}{} | {:.2}× | {:.1} |",
                    b.decode_tok_s,
                    if b.mode == "cuda-graph" { "" } else { " (eager)" },
                    r.decode_tok_s / b.decode_tok_s,
                    b.prefill_ms
                ),
            };
        }
        println!("{line}");
    }
    if let Some(b) = baseline.and_then(|b| b.iter().find(|b| b.error.is_none())) {
        println!("baseline: torch {}, transformers {}, {}", b.torch, b.transformers, b.device);
    }
}

fn report_json(report: Report) -> serde_json::Value {
    let Report { rows, shape_of_row, mix_of_row, baseline, bandwidth, plan } = report;
    let shapes: Vec<serde_json::Value> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let v = &r.verification;
            let b = baseline.and_then(|b| b.get(shape_of_row[i]));
            json!({
                "shape": r.name,
                "tp": r.tp,
                "weights": mix_of_row[i],
                "speedup_vs_bf16": bf16_rate(rows, shape_of_row, mix_of_row, i).filter(|_| mix_of_row[i] != "bf16").map(|t| r.decode_tok_s / t),
                "dtp_delay": r.dtp,
                "speedup_vs_standard_tp": standard_rate(rows, shape_of_row, i).map(|t| r.decode_tok_s / t),
                "speedup_vs_tp1": tp1_rate(rows, shape_of_row, i).map(|t1| r.decode_tok_s / t1),
                "parameters": r.parameters,
                "bytes_per_token": r.bytes_per_token,
                "decode_tok_s": r.decode_tok_s,
                "decode_runs": r.decode_runs,
                "us_per_token": r.us_per_token,
                "bound_tok_s": r.bound_tok_s,
                "pct_of_bound": r.pct_of_bound,
                "pct_of_spec": r.pct_of_spec,
                "ttft_ms": r.ttft_ms,
                "ttft_tokens_ms": r.ttft_tokens_ms,
                "turn_ttft_ms": r.turn_ttft_ms,
                "turn_reused": r.turn_reused,
                "prefill_gpu_ms": r.prefill_gpu_ms,
                "prefill_split_ms": r.prefill_split.map(|(g, a, o)| json!({"gemm": g, "attention": a, "rows": o})),
                "prefill_rel_err": r.prefill_rel_err,
                "prefill_same_token": r.prefill_same_token,
                "tokens_match": r.tokens_match,
                "verification": {
                    "passed": v.passed(),
                    "argmax_consistent": v.argmax_consistent,
                    "reference_kind": v.reference_kind,
                    "reference_positions": v.reference_positions,
                    "reference_rel_err": v.reference_rel_err,
                    "reference_top1": v.reference_top1,
                    "whole_run": v.whole_run.as_ref().map(|a| json!({
                        "positions": a.positions, "agree": a.agree, "near_ties": a.near_ties,
                        "unexplained": a.unexplained, "worst_rel": a.worst_rel,
                    })),
                    "first_tokens": &v.tokens[..CHECKED_TOKENS.min(v.tokens.len())],
                },
                "kernel": r.describe,
                "baseline": b,
                "ratio": b.filter(|b| b.error.is_none()).map(|b| r.decode_tok_s / b.decode_tok_s),
            })
        })
        .collect();
    json!({
        "copy_bandwidth_bytes_per_s": bandwidth,
        "prompt_tokens": plan.prompt_tokens,
        "gen_tokens": plan.gen_tokens,
        "ttft_prompt_tokens": plan.ttft_prompt_tokens,
        "runs": plan.runs,
        "shapes": shapes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_shapes_are_a_clear_error() {
        let args = CudaBenchArgs { shape: vec!["gpt-9".into()], prompt: 32, gen: 256, ..Default::default() };
        let err = run(&args, &CudaOptions::default(), &[1], None, 1, true).expect_err("unknown shape");
        assert!(err.to_string().contains("unknown shape `gpt-9`"), "{err}");
    }

    #[test]
    fn without_a_gpu_the_bench_says_so() {
        if cuda::devices().is_ok() {
            return;
        }
        let args = CudaBenchArgs { shape: vec!["smollm2-135m".into()], prompt: 32, gen: 256, ..Default::default() };
        let err = run(&args, &CudaOptions::default(), &[1], None, 1, true).expect_err("no device");
        assert!(err.to_string().contains("no CUDA device"), "{err}");
    }
}
