#!/usr/bin/env bash
# Builds what scripts/gpu/bench_and_check.sh carries to the GPU host: the `peregrine`
# binary, the hf_score example and the default kernel's cubins for every benchmark
# shape (NVRTC wheel), all under .carry/ (gitignored).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/env.sh
cargo build --release -p peregrine-server --bin peregrine
cargo build --release -p peregrine-server --bin peregrine -p peregrine-bench --bin peregrine-bench --example hf_score
mkdir -p .carry
cp "$CARGO_TARGET_DIR/release/peregrine" "$CARGO_TARGET_DIR/release/peregrine-bench" "$CARGO_TARGET_DIR/release/examples/hf_score" .carry/
# gpu_check precompile fills .carry/cubins (the default variant is enough here).
bash scripts/gpu/build.sh --variants v3
