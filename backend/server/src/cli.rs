//! Command-line interface of the `peregrine` binary (clap derive).

use std::path::PathBuf;

/// Default port of `peregrine serve`.
pub const DEFAULT_PORT: u16 = 8080;
/// Default bind address: loopback, so nothing is exposed by accident.
pub const DEFAULT_HOST: &str = "127.0.0.1";

/// `--version`'s second line says whether the engine was built with its measuring
/// apparatus (the `lab` feature, which only backend/bench and the tests want): the test
/// script checks that the binary it serves says `lab: off`.
pub const LONG_VERSION: &str =
    if peregrine_engine::LAB { concat!(env!("CARGO_PKG_VERSION"), "\nlab: on") } else { concat!(env!("CARGO_PKG_VERSION"), "\nlab: off") };

/// Fast single-request LLM inference with a playground.
#[derive(Debug, clap::Parser)]
#[command(name = "peregrine", version, long_version = LONG_VERSION, about)]
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
}

pub use crate::engine_args::{EngineArgs, ModelArgs};

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
    /// Folder with a Trunk-built playground to serve instead of the one built into
    /// the binary.
    #[arg(long, env = "PEREGRINE_DIST")]
    pub dist: Option<PathBuf>,
    /// Folder of the SQLite share store (unless --share-store); default ${XDG_DATA_HOME:-~/.local/share}/peregrine.
    #[arg(long, env = "PEREGRINE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Requests that may wait behind the running ones; more get 429.
    #[arg(long, default_value_t = peregrine_engine::DEFAULT_MAX_QUEUE)]
    pub max_queue: usize,
    /// Requests decoded together (continuous batching); default: the runtime's own
    /// (4 on the fast CPU runtime, 1 where the runtime decodes one request at a time).
    #[arg(long, env = "PEREGRINE_MAX_BATCH")]
    pub max_batch: Option<usize>,
    /// KV-cache positions (prompt + max_tokens) the running requests may reserve
    /// together; a request that does not fit waits. Default: context length × batch.
    #[arg(long, env = "PEREGRINE_KV_BUDGET")]
    pub kv_budget: Option<usize>,
    /// Draft tokens by prompt lookup and verify them in one step (`lookup`), or decode
    /// one token per step (`off`); a request's `speculative` field overrides it. Only
    /// runtimes that verify several rows per step draft (the CPU runtimes).
    #[arg(long, env = "PEREGRINE_SPECULATIVE", default_value = "lookup", value_parser = parse_speculative)]
    pub speculative: peregrine_engine::SpeculativeMode,
    /// Concurrent requests per client IP (0 = no limit); more get 429.
    #[arg(long, default_value_t = crate::config::DEFAULT_MAX_PER_CLIENT)]
    pub max_per_client: usize,
    /// Seconds after which a request (queue wait included) is cancelled (0 = never).
    #[arg(long, default_value_t = crate::config::DEFAULT_REQUEST_TIMEOUT_SECS)]
    pub request_timeout: u64,
    /// Origin allowed to call the API cross-site (repeatable; `*` for any). Default: same origin only.
    #[arg(long = "cors-origin")]
    pub cors_origins: Vec<String>,
    /// Seconds a request's headers may take to arrive; an idle keep-alive connection
    /// closes after as long.
    #[arg(long, default_value_t = crate::config::DEFAULT_HEADER_TIMEOUT_SECS)]
    pub header_timeout: u64,
    /// Seconds a request's body may take to arrive (408 after).
    #[arg(long, default_value_t = crate::config::DEFAULT_BODY_TIMEOUT_SECS)]
    pub body_timeout: u64,
    /// Open connections served at once; 16 more answer /health only, others are closed.
    #[arg(long, default_value_t = crate::config::DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// Tokens a chat completion that names no max_tokens may generate (capped by the context).
    #[arg(long, default_value_t = crate::config::DEFAULT_CHAT_MAX_TOKENS)]
    pub default_max_tokens: usize,
    /// Largest text `/tokenize` takes, in bytes (413 beyond; the tokenizer's memory grows with it).
    #[arg(long, default_value_t = crate::config::DEFAULT_MAX_TOKENIZE_BYTES)]
    pub max_tokenize_bytes: usize,
    /// Host name the server answers for (repeatable; the `Host` header without its port).
    /// Default: bound to a loopback address, localhost, 127.0.0.1 and [::1] only (a web
    /// page cannot reach it by rebinding its own name); bound to any other address, any
    /// host unless this is given.
    #[arg(long = "allowed-host")]
    pub allowed_hosts: Vec<String>,
    /// Name the OpenAI API knows the model by (repeatable): the first is the id answers
    /// report, every one is listed by /v1/models and accepted as `model`. Default: the
    /// model file's stem.
    #[arg(long = "served-model-name", value_name = "NAME")]
    pub served_model_names: Vec<String>,
    #[command(flatten)]
    pub access: crate::access_args::AccessArgs,
    /// Log lines as human-readable text or one JSON object per line; `RUST_LOG`
    /// filters them (default `info`; e.g. `RUST_LOG=peregrine_server=debug`).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Seconds the running request may finish after Ctrl-C / SIGTERM before it is cancelled.
    #[arg(long, default_value_t = crate::config::DEFAULT_SHUTDOWN_GRACE_SECS)]
    pub shutdown_grace: u64,
    #[command(flatten)]
    pub shares: crate::share_args::ShareArgs,
}

/// How `serve` writes its log on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
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
    #[arg(long, default_value_t = peregrine_engine::DEFAULT_MAX_TOKENS)]
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

/// `--speculative`: `lookup` or `off`.
fn parse_speculative(s: &str) -> std::result::Result<peregrine_engine::SpeculativeMode, String> {
    peregrine_engine::SpeculativeMode::parse(s).ok_or_else(|| format!("expected lookup or off, not {s:?}"))
}
