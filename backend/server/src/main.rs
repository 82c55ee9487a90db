//! The `peregrine` binary: parses the command line and runs one subcommand.

use std::io::IsTerminal;

use clap::Parser;
use peregrine_server::cli::{Cli, Command};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => {
            // One line per request (with its timings) and warnings, on stderr.
            tracing_subscriber::fmt().with_writer(std::io::stderr).with_target(false).with_ansi(std::io::stderr().is_terminal()).init();
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
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
