//! `peregrine-bench`: prefill and decode throughput of the engine, on the CPU side by
//! side with llama.cpp when available, and (`--device cuda --shape NAME[,NAME…]`) the
//! CUDA kernel on synthetic weights next to the HBM bound and, with `--baseline`, a
//! PyTorch CUDA-graph baseline. Every timed run's tokens are checked against the CPU
//! float32 reference. The product binary does none of this and spawns no Python.

mod cpu_plan;
mod cuda_shape;
mod error;
mod llamacpp;
mod model_bench;
mod shape_bench;
mod torch_baseline;

use clap::Parser;

/// Measures the engine.
#[derive(Debug, clap::Parser)]
#[command(name = "peregrine-bench", version, about)]
struct Cli {
    #[command(flatten)]
    args: model_bench::BenchArgs,
}

fn main() -> std::process::ExitCode {
    match model_bench::run(Cli::parse().args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
