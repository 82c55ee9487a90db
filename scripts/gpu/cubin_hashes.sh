#!/usr/bin/env bash
# sha256 of the decode kernel's cubin (pinned nvcc wheel, sm_90a) with the -D options the
# engine gives NVRTC (the kernel_defines example). A refactor of kernels/ that keeps these
# hashes cannot change what runs on the GPU.
# usage: scripts/gpu/cubin_hashes.sh ["PRESET [FORMATS-MASK LM-FORMAT [TP [dtp]]]" ...]
#   (default: the benchmark shapes at tp 1, Qwen2.5-Coder-1.5B at tp 2, laneformer-2b's
#   own 8 lanes, and Llama-3.2-1B with Q4_K_M's weight formats)
# KERNELS=DIR hashes another kernel tree with today's defines (e.g. a `git archive` of the
# commit before a refactor), so before and after come from one run.
set -euo pipefail
source "$(dirname "$0")/../env.sh"
cd "$(dirname "$0")/../.."
nvcc=$(ls "$PEREGRINE_CUDA_VENV"/lib/python3*/site-packages/nvidia/cu13/bin/nvcc 2>/dev/null | head -n1)
[ -x "$nvcc" ] || die "nvcc not found; run scripts/setup.sh test"
cargo build -q -p peregrine-bench --example kernel_defines
kernel_defines="$CARGO_TARGET_DIR/debug/examples/kernel_defines"
kernels=${KERNELS:-kernels}
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
runs=("$@")
[ ${#runs[@]} -gt 0 ] || runs=(smollm2-135m llama-3.2-1b qwen2.5-coder-1.5b smollm2-1.7b "qwen2.5-coder-1.5b 0 0 2" "laneformer-2b 0 0 8 dtp" "llama-3.2-1b 48 5")
for run in "${runs[@]}"; do
  # shellcheck disable=SC2086  # the run's words are kernel_defines' arguments
  mapfile -t defs < <("$kernel_defines" $run)
  "$nvcc" -std=c++17 -gencode=arch=compute_90a,code=sm_90a -cubin -I"$kernels" "${defs[@]}" -o "$out/k.cubin" "$kernels/decode.cu"
  echo "$(sha256sum "$out/k.cubin" | cut -c1-16)  $run"
done
