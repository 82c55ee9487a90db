//! The baseline of `peregrine bench --device cuda --baseline`: PyTorch + transformers
//! decoding the same shapes (random bf16 weights, static KV cache, one decode step
//! captured as a CUDA graph and replayed: roughly vLLM at batch 1), run by
//! `scripts/bench/torch_cuda_graph.py` in a child process of the same invocation.
//! Shapes travel as transformers `config.json` objects built from the engine's own
//! presets ([`peregrine_engine::lab::hf_export::hf_config_json`]), so they are defined once.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use peregrine_engine::config::ModelConfig;
use peregrine_engine::{Error, Result};

/// Environment variable naming the Python that has PyTorch and transformers.
pub const PYTHON_ENV: &str = "PEREGRINE_TORCH_PYTHON";
/// The interpreter used otherwise (the GPU host's `python3` holds PyTorch).
pub const DEFAULT_PYTHON: &str = "python3";
/// The baseline script, relative to the repository root.
pub const SCRIPT: &str = "scripts/bench/torch_cuda_graph.py";

/// One shape for the script.
#[derive(Debug, Serialize)]
struct ShapeRequest {
    name: String,
    config: Value,
}

/// Everything the script reads from its standard input.
#[derive(Debug, Serialize)]
struct Request {
    shapes: Vec<ShapeRequest>,
    prompt_tokens: usize,
    gen_tokens: usize,
    ttft_prompt_tokens: usize,
    runs: usize,
    seed: u64,
    /// Leading greedy tokens reported back (a sanity view, not compared: other weights).
    report_tokens: usize,
}

/// The script's figures for one shape (one JSON line on its stdout).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct BaselineFigures {
    pub name: String,
    /// Why this shape has no figures (the others may still have).
    #[serde(default)]
    pub error: Option<String>,
    /// `"cuda-graph"`, or `"eager-static-cache"` when graph capture failed.
    #[serde(default)]
    pub mode: String,
    #[serde(default)]
    pub decode_runs: Vec<f64>,
    #[serde(default)]
    pub decode_tok_s: f64,
    /// Eager forward of the TTFT prompt into the static cache, median ms.
    #[serde(default)]
    pub prefill_ms: f64,
    #[serde(default)]
    pub torch: String,
    #[serde(default)]
    pub transformers: String,
    #[serde(default)]
    pub device: String,
}

/// The interpreter: `explicit`, else `$PEREGRINE_TORCH_PYTHON`, else `python3`.
pub fn find_python(explicit: Option<&Path>) -> PathBuf {
    explicit
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os(PYTHON_ENV).filter(|p| !p.is_empty()).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_PYTHON))
}

/// The script: under the current directory, else in this source tree.
pub fn find_script() -> Option<PathBuf> {
    let here = PathBuf::from(SCRIPT);
    let source_tree = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(SCRIPT);
    [here, source_tree].into_iter().find(|p| p.exists())
}

/// What to run: the shapes and the same lengths as the engine's measurement.
#[derive(Debug, Clone)]
pub struct BaselinePlan {
    pub prompt_tokens: usize,
    pub gen_tokens: usize,
    pub ttft_prompt_tokens: usize,
    pub runs: usize,
    pub seed: u64,
}

/// Runs the script once for every shape (one import of torch) and returns one
/// entry per shape, in order; `log` gets each of the script's stderr lines.
pub fn run(
    python: &Path,
    script: &Path,
    configs: &[ModelConfig],
    plan: &BaselinePlan,
    log: &mut dyn FnMut(&str),
) -> Result<Vec<BaselineFigures>> {
    let request = Request {
        shapes: configs
            .iter()
            .map(|c| ShapeRequest { name: c.name.clone(), config: peregrine_engine::lab::hf_export::hf_config_json(c) })
            .collect(),
        prompt_tokens: plan.prompt_tokens,
        gen_tokens: plan.gen_tokens,
        ttft_prompt_tokens: plan.ttft_prompt_tokens,
        runs: plan.runs,
        seed: plan.seed,
        report_tokens: 8,
    };
    let io_err = |e: std::io::Error| Error::Io { path: python.display().to_string(), source: e };
    let mut child = Command::new(python)
        .arg(script)
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(io_err)?;
    let body = serde_json::to_vec(&request).map_err(|e| Error::Unavailable(format!("baseline request: {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(&body).map_err(io_err)?;
    }
    let stderr = child.stderr.take();
    let stdout = child.stdout.take();
    let (figures, log_lines) = std::thread::scope(|s| {
        let err_thread =
            s.spawn(move || stderr.map(|e| BufReader::new(e).lines().map_while(|l| l.ok()).collect::<Vec<_>>()).unwrap_or_default());
        let figures: Vec<BaselineFigures> = stdout
            .map(|o| BufReader::new(o).lines().map_while(|l| l.ok()).filter_map(|l| serde_json::from_str(l.trim()).ok()).collect())
            .unwrap_or_default();
        (figures, err_thread.join().unwrap_or_default())
    });
    for line in &log_lines {
        log(line);
    }
    let status = child.wait().map_err(io_err)?;
    if figures.is_empty() {
        let tail = log_lines.iter().rev().take(5).rev().cloned().collect::<Vec<_>>().join(" | ");
        return Err(Error::Unavailable(format!(
            "the PyTorch baseline ({} {}) gave no figures ({status}): {tail}",
            python.display(),
            script.display()
        )));
    }
    Ok(configs
        .iter()
        .map(|c| {
            figures.iter().find(|f| f.name == c.name).cloned().unwrap_or_else(|| BaselineFigures {
                name: c.name.clone(),
                error: Some("no figures from the script".into()),
                mode: String::new(),
                decode_runs: Vec::new(),
                decode_tok_s: f64::NAN,
                prefill_ms: f64::NAN,
                torch: String::new(),
                transformers: String::new(),
                device: String::new(),
            })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_is_in_the_tree() {
        assert!(find_script().is_some(), "{SCRIPT} is missing");
    }

    /// End to end through the script on a tiny shape, where `$PEREGRINE_TORCH_PYTHON`
    /// names a Python with torch + transformers (eager on a CPU-only machine).
    #[test]
    fn the_script_answers_for_every_shape() {
        if std::env::var_os(PYTHON_ENV).is_none() {
            eprintln!("skipped: {PYTHON_ENV} is not set");
            return;
        }
        let base = peregrine_engine::lab::synthetic::preset("qwen2.5-coder-1.5b").expect("preset");
        let tiny = ModelConfig {
            name: "tiny-qwen".into(),
            vocab_size: 512,
            hidden_size: 128,
            intermediate_size: 256,
            num_layers: 2,
            num_heads: 4,
            num_kv_heads: 2,
            head_dim: 32,
            ..base
        };
        let plan = BaselinePlan { prompt_tokens: 8, gen_tokens: 16, ttft_prompt_tokens: 32, runs: 2, seed: 1 };
        let rows = run(&find_python(None), &find_script().expect("script"), &[tiny], &plan, &mut |l| eprintln!("{l}")).expect("figures");
        assert_eq!(rows.len(), 1);
        assert!(rows[0].error.is_none() && rows[0].decode_tok_s > 0.0 && rows[0].prefill_ms > 0.0, "{:?}", rows[0]);
    }

    #[test]
    fn a_missing_interpreter_is_an_error() {
        let config = peregrine_engine::lab::synthetic::preset("smollm2-135m").expect("preset");
        let plan = BaselinePlan { prompt_tokens: 4, gen_tokens: 4, ttft_prompt_tokens: 8, runs: 1, seed: 1 };
        let script = find_script().expect("script");
        let err = run(Path::new("/nonexistent/python"), &script, &[config], &plan, &mut |_| {}).expect_err("no interpreter");
        assert!(err.to_string().contains("/nonexistent/python"), "{err}");
    }
}
