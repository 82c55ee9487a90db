//! Command-line interface of the `peregrine` binary (clap derive).

use std::path::PathBuf;

/// Default port of `peregrine serve`.
pub const DEFAULT_PORT: u16 = 8080;
/// Default bind address: loopback, so nothing is exposed by accident.
pub const DEFAULT_HOST: &str = "127.0.0.1";

/// Fast single-request LLM inference with a playground.
#[derive(Debug, clap::Parser)]
#[command(name = "peregrine", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Serve the playground and the API.
    Serve(ServeArgs),
    /// Generate text for one prompt: text to stdout, timings to stderr.
    Generate(GenerateArgs),
    /// Prefill and decode throughput (on the CPU side by side with llama.cpp when available;
    /// `--device cuda --shape NAME[,NAME…]`: the CUDA kernel on synthetic weights, `--baseline` next to PyTorch).
    Bench(crate::bench::BenchArgs),
}

/// Where the model comes from and where it runs (shared by every subcommand).
#[derive(Debug, Clone, clap::Args)]
pub struct ModelArgs {
    /// Model file (GGUF) or Hugging Face directory; default: $PEREGRINE_MODEL, then the cached default model.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// auto (CUDA when present, else CPU), cpu or cuda.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Tensor-parallel degree: GPUs one model is split over (`bench --shape` takes a list, e.g. 1,2).
    #[arg(long, default_value = "1")]
    pub tp: String,
    /// CUDA devices to use, comma-separated (default: the first --tp).
    #[arg(long)]
    pub gpus: Option<String>,
}

impl ModelArgs {
    /// The tensor-parallel degrees of `--tp` (a comma-separated list).
    pub fn tp_list(&self) -> crate::error::Result<Vec<usize>> {
        self.tp
            .split(',')
            .map(|t| {
                t.trim()
                    .parse::<usize>()
                    .ok()
                    .filter(|&n| n >= 1)
                    .ok_or_else(|| crate::error::Error::bad("tp", format!("`{t}` is not a degree ≥ 1")))
            })
            .collect()
    }

    /// The CUDA devices of a single-degree run (`serve`, `generate`, model benchmarks).
    pub fn gpus(&self) -> crate::error::Result<Vec<usize>> {
        let tp = match self.tp_list()?.as_slice() {
            [one] => *one,
            _ => return Err(crate::error::Error::bad("tp", "takes one degree here (a list only with bench --shape)")),
        };
        Ok(peregrine_engine::model::parse_gpus(tp, self.gpus.as_deref())?)
    }
}

/// Arguments of `peregrine serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Address to bind.
    #[arg(long, default_value = DEFAULT_HOST)]
    pub host: String,
    /// Port to bind (0 picks a free one).
    #[arg(long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Folder with the Trunk-built playground.
    #[arg(long, env = "PEREGRINE_DIST", default_value = "dist")]
    pub dist: PathBuf,
    /// Where share links are stored (SQLite); default ${XDG_DATA_HOME:-~/.local/share}/peregrine.
    #[arg(long, env = "PEREGRINE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Requests that may wait behind the running one; more get 429.
    #[arg(long, default_value_t = peregrine_engine::handle::DEFAULT_MAX_QUEUE)]
    pub max_queue: usize,
    /// Concurrent requests per client IP (0 = no limit); more get 429.
    #[arg(long, default_value_t = crate::config::DEFAULT_MAX_PER_CLIENT)]
    pub max_per_client: usize,
    /// Seconds after which a request (queue wait included) is cancelled (0 = never).
    #[arg(long, default_value_t = crate::config::DEFAULT_REQUEST_TIMEOUT_SECS)]
    pub request_timeout: u64,
    /// Origin allowed to call the API cross-site (repeatable; `*` for any). Default: same origin only.
    #[arg(long = "cors-origin")]
    pub cors_origins: Vec<String>,
    /// Seconds the running request may finish after Ctrl-C / SIGTERM before it is cancelled.
    #[arg(long, default_value_t = crate::config::DEFAULT_SHUTDOWN_GRACE_SECS)]
    pub shutdown_grace: u64,
}

/// Arguments of `peregrine generate`.
#[derive(Debug, Clone, clap::Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The prompt text (completion mode unless --chat).
    #[arg(long)]
    pub prompt: String,
    /// Treat the prompt as a user message and apply the model's chat template.
    #[arg(long)]
    pub chat: bool,
    /// Most tokens to generate.
    #[arg(long, default_value_t = peregrine_engine::request::DEFAULT_MAX_TOKENS)]
    pub max_tokens: usize,
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// 0 = no limit.
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    #[arg(long, default_value_t = 0.0)]
    pub min_p: f32,
    #[arg(long, default_value_t = 1.0)]
    pub repetition_penalty: f32,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Strings that end generation (repeatable).
    #[arg(long)]
    pub stop: Vec<String>,
    /// Keep generating past end-of-sequence tokens.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Print one JSON object (token_ids, text, finish_reason, timings) instead of streaming.
    #[arg(long)]
    pub json: bool,
}

#[cfg(test)]
mod tests {
    use super::ModelArgs;

    fn args(tp: &str, gpus: Option<&str>) -> ModelArgs {
        ModelArgs { model: None, device: "cuda".into(), tp: tp.into(), gpus: gpus.map(String::from) }
    }

    #[test]
    fn tp_takes_a_list_only_where_a_list_makes_sense() {
        assert_eq!(args("1,2", None).tp_list().expect("list"), vec![1, 2]);
        assert_eq!(args("2", Some("1,0")).gpus().expect("one degree"), vec![1, 0]);
        assert!(args("1,2", None).gpus().is_err(), "serve/generate take one degree");
        assert!(args("0", None).tp_list().is_err());
        assert!(args("two", None).tp_list().is_err());
    }
}
