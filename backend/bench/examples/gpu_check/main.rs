//! The persistent kernel's measuring tools (the GPU host has no Rust: build here,
//! carry the binary there): `trace` prints the phase trace of kernel builds side by
//! side, `precompile` / `precompile-tp` fill the cubin cache without a GPU, `defines`
//! prints the NVRTC `-D` options of a shape, `tune` times the load-time choice of
//! threads per block. Every correctness check is a trial of the engine's GPU test
//! suite (backend/engine/tests/gpu.rs); the decode benchmark is `peregrine-bench
//! --device cuda --shape …`.
//!
//! Kernel builds are named as `peregrine_engine::lab::variants::kernel_variant` reads
//! them: `default`, then `+` modifiers (`threads384`, `nosplit`, `tp-evict`, …).

#[cfg(feature = "cuda")]
fn main() {
    if let Err(e) = imp::main() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

#[cfg(not(feature = "cuda"))]
fn main() {
    eprintln!("gpu_check needs the `cuda` feature");
    std::process::exit(2);
}

#[cfg(feature = "cuda")]
mod imp;
