#!/usr/bin/env bash
# Builds what scripts/gpu/prefill_check.sh carries to the GPU host into one folder
# (default .carry/prefill of this checkout; CARRY_DIR overrides): the `peregrine` and
# `gpu_check` binaries, the cubins of every benchmark shape (decode + prefill, NVRTC
# wheel) and the scripts themselves.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/env.sh
dest=${CARRY_DIR:-$PWD/.carry/prefill}
mkdir -p "$dest/cubins" "$dest/scripts/gpu"
# The target folder is shared with other worktrees: copy each binary right after its
# build and check it embeds this tree's prefill kernels (another build may have
# replaced it in between).
cargo build --release -p peregrine-server --bin peregrine
cp "$CARGO_TARGET_DIR/release/peregrine" "$CARGO_TARGET_DIR/release/peregrine-bench" "$dest/"
cargo build --release -p peregrine-server --bin peregrine -p peregrine-bench --bin peregrine-bench --example gpu_check
cp "$CARGO_TARGET_DIR/release/examples/gpu_check" "$dest/"
for b in peregrine gpu_check; do
  grep -q pg_pf_attention "$dest/$b" || die "$dest/$b was built from another tree (no prefill kernels): run again"
done
cp scripts/gpu/prefill_check.sh "$dest/scripts/gpu/"
nvrtc_dir=$(dirname "$(ls "$PEREGRINE_CUDA_VENV"/lib/python3*/site-packages/nvidia/cu13/lib/libnvrtc.so* | head -n1)")
PEREGRINE_NVRTC_DIR=$nvrtc_dir PEREGRINE_CUBIN_CACHE=$dest/cubins "$dest/gpu_check" precompile --variants default
du -sh "$dest"
