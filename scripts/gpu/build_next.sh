#!/usr/bin/env bash
# Builds what scripts/gpu/next_session.sh carries to the GPU host into one folder
# (default .carry/next of this checkout; CARRY_DIR overrides): the gpu_check binary,
# the scripts, and the cubins of every kernel the session loads (NVRTC wheel, no GPU):
# the default kernel and $check_kernel (each with and without chaos delays, attention
# split and unsplit) on the tiny check shapes and SHAPES, and the bench and trace
# variants of scripts/gpu/next_variants.sh on SHAPES. ~5–15 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/env.sh
dest=${CARRY_DIR:-$PWD/.carry/next}
shapes=${SHAPES:-smollm2-135m,llama-3.2-1b}
source scripts/gpu/next_variants.sh
mkdir -p "$dest/cubins" "$dest/scripts/gpu"
# The target folder is shared with other worktrees: copy the binary right after its
# build and check it embeds this tree's kernels (another build may have replaced it).
cargo build --release -p peregrine-engine --example gpu_check
cp "$CARGO_TARGET_DIR/release/examples/gpu_check" "$dest/"
grep -q RowStage "$dest/gpu_check" || { echo "$dest/gpu_check was built from another tree (no staging kernel): run again"; exit 1; }
cp scripts/gpu/next_session.sh scripts/gpu/next_variants.sh "$dest/scripts/gpu/"
nvrtc_dir=$(dirname "$(ls "$PEREGRINE_CUDA_VENV"/lib/python3*/site-packages/nvidia/cu13/lib/libnvrtc.so* | head -n1)")
export PEREGRINE_NVRTC_DIR=$nvrtc_dir PEREGRINE_CUBIN_CACHE=$dest/cubins
# kernel-check and correctness: tiny shapes + SHAPES, the default kernel and the checked
# variant ± chaos.
"$dest/gpu_check" precompile --kernel "$check_kernel" --variants '' --shapes "$shapes"
# bench and trace on SHAPES (trace variants get +trace).
traced=$(echo "$trace_variants" | tr ',' '\n' | sed 's/^v3$/trace/; t; s/$/+trace/' | paste -sd, -)
"$dest/gpu_check" precompile --no-tiny --kernel "$check_kernel" --variants "$bench_variants,$traced" --shapes "$shapes"
size=$(du -sm "$dest" | cut -f1)
echo "carry folder $dest: ${size} MB"
[ "$size" -lt 60 ] || die "carry folder is ${size} MB: over the 64 MiB a device call carries"
