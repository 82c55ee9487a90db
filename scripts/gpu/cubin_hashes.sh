#!/usr/bin/env bash
# sha256 of the decode kernel's cubin (pinned nvcc wheel, sm_90a) for each benchmark
# shape at tp 1 and for Qwen2.5-Coder-1.5B at tp 2, with the -D options the engine gives
# NVRTC (`gpu_check defines`). A refactor of kernels/ that keeps these hashes cannot
# change what runs on the GPU. usage: scripts/gpu/cubin_hashes.sh [SHAPE:TP ...]
set -euo pipefail
source "$(dirname "$0")/../env.sh"
cd "$(dirname "$0")/../.."
nvcc=$(ls "$PEREGRINE_CUDA_VENV"/lib/python3*/site-packages/nvidia/cu13/bin/nvcc 2>/dev/null | head -n1)
[ -x "$nvcc" ] || die "nvcc not found; run scripts/setup.sh test"
cargo build -q -p peregrine-bench --example gpu_check
gpu_check="$CARGO_TARGET_DIR/debug/examples/gpu_check"
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
runs=("$@")
[ ${#runs[@]} -gt 0 ] || runs=(smollm2-135m:1 llama-3.2-1b:1 qwen2.5-coder-1.5b:1 smollm2-1.7b:1 qwen2.5-coder-1.5b:2)
for run in "${runs[@]}"; do
  shape=${run%%:*} tp=${run##*:}
  # nvcc splits option values at commas unless they are escaped.
  mapfile -t defs < <("$gpu_check" defines --shapes "$shape" --tp "$tp" | sed 's/,/\\,/g')
  "$nvcc" -std=c++17 -gencode=arch=compute_90a,code=sm_90a -cubin -Ikernels "${defs[@]}" -o "$out/k.cubin" kernels/decode.cu
  echo "$(sha256sum "$out/k.cubin" | cut -c1-16)  $shape tp $tp"
done
