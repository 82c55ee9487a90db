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
}

/// Arguments of `peregrine serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Address to bind.
    #[arg(long, default_value = DEFAULT_HOST)]
    pub host: String,
    /// Port to bind (0 picks a free one).
    #[arg(long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Model file (GGUF) or Hugging Face directory; default: $PEREGRINE_MODEL, then the cached default model.
    #[arg(long, env = "PEREGRINE_MODEL")]
    pub model: Option<PathBuf>,
    /// Folder with the Trunk-built playground.
    #[arg(long, env = "PEREGRINE_DIST", default_value = "dist")]
    pub dist: PathBuf,
}
