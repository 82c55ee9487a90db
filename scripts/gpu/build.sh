#!/usr/bin/env bash
# Builds the GPU check/bench binary here and precompiles its cubins (NVRTC wheel) into
# .carry/, which device runs carry: the GPU host has no Rust and needs no compile time.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/env.sh
cargo build --release -p peregrine-server --bin peregrine -p peregrine-bench --bin peregrine-bench --example gpu_check
mkdir -p .carry/cubins
cp "$CARGO_TARGET_DIR/release/examples/gpu_check" .carry/
nvrtc_dir=""
for d in "${PEREGRINE_CUDA_VENV:-/nonexistent}"/lib/python3*/site-packages/nvidia/cu13/lib /tmp/cuda-venv/lib/python3*/site-packages/nvidia/cu13/lib; do
  if ls "$d"/libnvrtc.so* >/dev/null 2>&1; then nvrtc_dir=$d; break; fi
done
if [ -n "$nvrtc_dir" ]; then
  PEREGRINE_NVRTC_DIR=$nvrtc_dir PEREGRINE_CUBIN_CACHE=$PWD/.carry/cubins .carry/gpu_check precompile "$@"
else
  echo "no NVRTC wheel found: cubins will be compiled on the GPU host"
fi
