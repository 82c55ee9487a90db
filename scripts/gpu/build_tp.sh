#!/usr/bin/env bash
# Builds what scripts/gpu/tp_check.sh needs on the GPU host into a carry folder
# (default .carry/tp, gitignored): the `peregrine` binary, gpu_check, hf_score, the
# scripts, and the cubins of the TP / DTP kernels it loads (NVRTC wheel, no GPU), so
# the host compiles nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/env.sh
dest=${1:-.carry/tp}
cargo build --release -p peregrine-server --bin peregrine
cargo build --release -p peregrine-server --bin peregrine -p peregrine-bench --bin peregrine-bench --example hf_score --example gpu_check
mkdir -p "$dest/scripts/gpu"
cp "$CARGO_TARGET_DIR/release/peregrine" "$CARGO_TARGET_DIR/release/peregrine-bench" "$CARGO_TARGET_DIR/release/examples/hf_score" "$CARGO_TARGET_DIR/release/examples/gpu_check" "$dest/"
cp scripts/gpu/tp_check.sh scripts/gpu/transformers_check.py "$dest/scripts/gpu/"
nvrtc_dir=$(ls -d "$PEREGRINE_CUDA_VENV"/lib/python3*/site-packages/nvidia/cu13/lib | head -n1)
# VARIANTS (gpu_check names, comma-separated): more kernels, e.g. `+trace` ones for
# tp_check.sh's `trace` step. The default holds the block sizes the runtime times at
# load (cuda/tune.rs).
variants=${VARIANTS-default+threads448,default+threads384}
PEREGRINE_NVRTC_DIR=$nvrtc_dir PEREGRINE_CUBIN_CACHE=$dest/cubins "$dest/gpu_check" precompile-tp --shapes "${SHAPES:-qwen2.5-coder-1.5b,smollm2-1.7b,laneformer-2b}" ${variants:+--variants "$variants"}
du -sh "$dest"
