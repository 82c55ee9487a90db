#!/usr/bin/env bash
# Builds what scripts/gpu/next_session.sh carries to the GPU host into one folder
# (default .carry/next of this checkout; CARRY_DIR overrides): the gpu_check binary,
# the script itself, and the cubins of every kernel the session loads (NVRTC wheel, no
# GPU): the default kernel, preload and fuse_o (each with and without chaos delays,
# attention split and unsplit) on the tiny check shapes, SmolLM2-135M and Llama-3.2-1B,
# and the traced default and preload kernels, fuse_o + prefetch and fuse_o + preload on
# the two benchmark shapes. Takes ~15 minutes on 2 cores.
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
grep -q RowPreload "$dest/gpu_check" || { echo "$dest/gpu_check was built from another tree (no preload kernel): run again"; exit 1; }
cp scripts/gpu/next_session.sh "$dest/scripts/gpu/"
nvrtc_dir=$(dirname "$(ls "$PEREGRINE_CUDA_VENV"/lib/python3*/site-packages/nvidia/cu13/lib/libnvrtc.so* | head -n1)")
export PEREGRINE_NVRTC_DIR=$nvrtc_dir PEREGRINE_CUBIN_CACHE=$dest/cubins
# correctness --kernel fuse-o and kernel-check --kernel preload: tiny shapes + both shapes,
# the default kernel, fuse_o ± chaos and preload ± chaos.
"$dest/gpu_check" precompile --kernel fuse-o --variants '' --shapes "$shapes"
"$dest/gpu_check" precompile --kernel preload --variants '' --shapes "$shapes"
# trace and bench on the two benchmark shapes: traced default and preload kernels, fuse_o +
# prefetch and fuse_o + preload.
"$dest/gpu_check" precompile --no-tiny --kernel preload --variants trace,preload-trace,fuse-o-prefetch,fuse-o-preload --shapes "$shapes"
size=$(du -sm "$dest" | cut -f1)
echo "carry folder $dest: ${size} MB"
[ "$size" -lt 60 ] || die "carry folder is ${size} MB: over the 64 MiB a device call carries"
