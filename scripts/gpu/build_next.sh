#!/usr/bin/env bash
# Builds what scripts/gpu/next_session.sh carries to the GPU host into one folder
# (default .carry/next of this checkout; CARRY_DIR overrides): the gpu_check binary,
# the script itself, and the cubins of every kernel the session loads (NVRTC wheel, no
# GPU): the default kernel, fuse_o (with and without chaos delays, attention split and
# unsplit) on the tiny check shapes, SmolLM2-135M and Llama-3.2-1B, and the traced
# default and fuse_o kernels on the two benchmark shapes. Takes ~10 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/env.sh
dest=${CARRY_DIR:-$PWD/.carry/next}
shapes=smollm2-135m,llama-3.2-1b
mkdir -p "$dest/cubins" "$dest/scripts/gpu"
# The target folder is shared with other worktrees: copy the binary right after its
# build and check it embeds this tree's kernels (another build may have replaced it).
cargo build --release -p peregrine-engine --example gpu_check
cp "$CARGO_TARGET_DIR/release/examples/gpu_check" "$dest/"
grep -q head_o_proj "$dest/gpu_check" || die "$dest/gpu_check was built from another tree (no fuse_o kernel): run again"
cp scripts/gpu/next_session.sh "$dest/scripts/gpu/"
nvrtc_dir=$(dirname "$(ls "$PEREGRINE_CUDA_VENV"/lib/python3*/site-packages/nvidia/cu13/lib/libnvrtc.so* | head -n1)")
export PEREGRINE_NVRTC_DIR=$nvrtc_dir PEREGRINE_CUBIN_CACHE=$dest/cubins
# correctness --kernel fuse-o and kernel-check: tiny shapes + both shapes, default and fuse_o ± chaos.
"$dest/gpu_check" precompile --kernel fuse-o --variants '' --shapes "$shapes"
# trace and bench: the traced kernels of both variants and fuse_o + prefetch on the two benchmark shapes.
"$dest/gpu_check" precompile --no-tiny --kernel fuse-o --variants trace,fuse-o-trace,fuse-o-prefetch --shapes "$shapes"
size=$(du -sm "$dest" | cut -f1)
echo "carry folder $dest: ${size} MB"
[ "$size" -lt 60 ] || die "carry folder is ${size} MB: over the 64 MiB a device call carries"
