//! The llama.cpp side of `peregrine bench --device cpu`: a worker process running
//! `scripts/bench/llamacpp_bench.py --serve` under a Python that has
//! llama-cpp-python, fed the same token ids over JSON lines, so the two engines
//! can be measured alternately with the same model, prompt and thread count.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde::{Deserialize, Serialize};

use crate::cpu_plan::{BenchPlan, Figures};
use peregrine_engine::{Error, Result};

/// Environment variable with the Python interpreter that has llama-cpp-python.
pub const PYTHON_ENV: &str = "PEREGRINE_LLAMACPP_PYTHON";
/// The interpreter's default place (its build: docs/benchmarks.md, "Machines").
pub const DEFAULT_PYTHON: &str = "/tmp/llama-venv/bin/python";
/// The worker script, relative to the repository root.
pub const SCRIPT: &str = "scripts/bench/llamacpp_bench.py";

/// A running llama.cpp worker.
pub struct LlamaCpp {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    /// llama-cpp-python's version, as the worker reports it.
    pub version: String,
}

#[derive(Serialize)]
struct Request<'a> {
    prompt: &'a [u32],
    short_prompt: &'a [u32],
    gen_tokens: usize,
}

#[derive(Deserialize)]
struct Reply {
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    prefill_tok_s: f64,
    #[serde(default)]
    decode_tok_s: f64,
    #[serde(default)]
    llama_cpp_python: Option<String>,
}

impl LlamaCpp {
    /// The interpreter to use: `explicit`, else `$PEREGRINE_LLAMACPP_PYTHON`, else
    /// [`DEFAULT_PYTHON`] when it exists.
    pub fn find_python(explicit: Option<&Path>) -> Option<PathBuf> {
        explicit
            .map(Path::to_path_buf)
            .or_else(|| std::env::var_os(PYTHON_ENV).filter(|p| !p.is_empty()).map(PathBuf::from))
            .or_else(|| Some(PathBuf::from(DEFAULT_PYTHON)))
            .filter(|p| p.exists())
    }

    /// The worker script: under the current directory, else in this source tree.
    pub fn find_script() -> Option<PathBuf> {
        let here = PathBuf::from(SCRIPT);
        let source_tree = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(SCRIPT);
        [here, source_tree].into_iter().find(|p| p.exists())
    }

    /// Starts the worker on `model` with `threads` threads and waits until it has
    /// loaded the model.
    pub fn start(python: &Path, script: &Path, model: &Path, threads: usize, context: usize) -> Result<LlamaCpp> {
        let io_err = |e: std::io::Error| Error::Io { path: python.display().to_string(), source: e };
        let mut child = Command::new(python)
            .arg(script)
            .arg("--serve")
            .args(["--model", &model.display().to_string()])
            .args(["--threads", &threads.to_string()])
            .args(["--n-ctx", &context.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(io_err)?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            return Err(Error::Unavailable("llama.cpp worker has no pipes".into()));
        };
        let mut worker = LlamaCpp { child, stdin, stdout: BufReader::new(stdout), version: String::new() };
        let ready = worker.read_reply()?;
        worker.version = ready.llama_cpp_python.unwrap_or_else(|| "unknown".into());
        Ok(worker)
    }

    /// One measurement of `plan`.
    pub fn measure(&mut self, plan: &BenchPlan) -> Result<Figures> {
        let request = Request { prompt: &plan.prompt, short_prompt: &plan.short_prompt, gen_tokens: plan.gen_tokens };
        let line = serde_json::to_string(&request).map_err(|e| Error::Unavailable(format!("encoding a llama.cpp request: {e}")))?;
        writeln!(self.stdin, "{line}")
            .and_then(|_| self.stdin.flush())
            .map_err(|e| Error::Unavailable(format!("llama.cpp worker: {e}")))?;
        let reply = self.read_reply()?;
        Ok(Figures { prefill_tok_s: reply.prefill_tok_s, decode_tok_s: reply.decode_tok_s })
    }

    fn read_reply(&mut self) -> Result<Reply> {
        let mut line = String::new();
        let n = self.stdout.read_line(&mut line).map_err(|e| Error::Unavailable(format!("llama.cpp worker: {e}")))?;
        if n == 0 {
            return Err(Error::Unavailable("the llama.cpp worker exited (see its messages above)".into()));
        }
        let reply: Reply =
            serde_json::from_str(&line).map_err(|e| Error::Unavailable(format!("llama.cpp worker sent `{}`: {e}", line.trim())))?;
        match reply.error {
            Some(e) => Err(Error::Unavailable(format!("llama.cpp worker: {e}"))),
            None => Ok(reply),
        }
    }
}

impl Drop for LlamaCpp {
    fn drop(&mut self) {
        // Closing stdin ends the worker's loop; kill covers a stuck one.
        let _ = writeln!(self.stdin, "{{\"quit\": true}}");
        let _ = self.stdin.flush();
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            std::thread::sleep(std::time::Duration::from_millis(200));
            if !matches!(self.child.try_wait(), Ok(Some(_))) {
                let _ = self.child.kill();
            }
        }
        let _ = self.child.wait();
    }
}
