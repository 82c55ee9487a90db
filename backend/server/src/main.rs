//! The `peregrine` binary: parses the command line and runs one subcommand.

use std::io::IsTerminal;

use clap::Parser;
use peregrine_server::cli::{Cli, Command, LogFormat};
use tracing_subscriber::EnvFilter;

/// Request lines (access and generation, with timings) and warnings on stderr,
/// filtered by `RUST_LOG` (default `info`).
fn init_logging(format: LogFormat) {
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => EnvFilter::try_new(&spec).unwrap_or_else(|e| {
            eprintln!("warning: RUST_LOG={spec:?} is not a filter ({e}); logging at info");
            EnvFilter::new("info")
        }),
        _ => EnvFilter::new("info"),
    };
    let builder = tracing_subscriber::fmt().with_writer(std::io::stderr).with_env_filter(filter).with_target(false);
    match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(false).init(),
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => {
            init_logging(args.log_format);
            peregrine_server::serve::run(args).await
        }
        Command::Generate(args) => peregrine_server::generate::run(args).await,
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // A startup 400 names a flag: say which.
        Err(peregrine_server::error::Error::BadRequest { message, param: Some(flag) }) => {
            eprintln!("error: --{flag}: {message}");
            std::process::ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("{}", peregrine_server::error::report(&e));
            std::process::ExitCode::FAILURE
        }
    }
}
