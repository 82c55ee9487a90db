//! GPU engine check and benchmark in one binary (the GPU host has no Rust: build
//! here, carry it there). `gpu_check all` runs correctness against the CPU float32
//! reference on synthetic random-weight models, then times decode on the benchmark
//! shapes; `gpu_check prefill` compares the batched prefill with the per-token prompt
//! path (first-step logits and greedy tokens); `gpu_check precompile` fills the cubin
//! cache without a GPU.
//!
//! `gpu_check tp --shapes a,b` checks tensor parallelism on GPUs 0 and 1 against
//! one GPU, with the chaos race check on each rank.
//!
//! `--kernel NAME` runs `correctness` (and `kernel-check`) with that build instead of
//! the default; `gpu_check kernel-check --kernel default+threads384 --shapes a,b` scores
//! long prompts with it against the default kernel (every position's logits: the
//! split-attention merge path included) and runs the chaos race check with it;
//! `gpu_check trace --shapes a,b [--variants default,default+threads448]` prints the
//! phase trace (`--weights q8_0` etc.: of random quantized weights streamed natively).
//! Builds are named as `variant` below says.
//!
//! Usage: gpu_check [all|correctness|bench|sanitize|prefill|precompile|precompile-tp|tp|tp-prefill|trace|kernel-check|defines] [--quick]
//!        [--tp N] [--shapes a,b] [--runs N] [--prompt N] [--gen N] [--variants v1,v2,...] [--kernel NAME] [--no-tiny] [--no-chaos] [--dtp SPEC;SPEC] [--weights MIX]

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
