#!/usr/bin/env bash
# Builds what scripts/gpu/cover_x2.sh carries to the 2-GPU host (no Rust there) into a
# carry folder (default .carry/cover, gitignored; a helper passes the main checkout's
# /work/main/.carry/NAME): the `peregrine` binary, gpu_check, hf_score, the scripts,
# the default model's tokenizer as tokenizer.json (for the served random-weight HF
# directory) and the cubins every step loads (NVRTC wheel, no GPU; no chaos kernels).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/env.sh
dest=${1:-.carry/cover}
rm -rf "$dest"
mkdir -p "$dest/scripts/gpu"
# CARGO_TARGET_DIR is shared by every worktree and the artifacts' names do not depend on
# the checkout: touch so cargo relinks this tree's sources, copy each binary as soon as
# it is built, and check it holds a string only this tree's sources have (another
# worktree's build can replace it in between: then build again).
build() { # what, marker, cargo args...
  local what=$1 marker=$2
  shift 2
  for _ in 1 2 3; do
    touch backend/engine/src/lib.rs backend/server/src/main.rs backend/engine/examples/*.rs
    cargo build --release "$@"
    cp "$CARGO_TARGET_DIR/release/$what" "$dest/"
    grep -q "$marker" "$dest/$(basename "$what")" && return 0
    echo "$what is another tree's build: building again" >&2
  done
  die "$what: no build of this tree after 3 tries"
}
build peregrine "prompt positions, long prompt" -p peregrine-server --bin peregrine
build examples/gpu_check "sanitize mma run" -p peregrine-engine --example gpu_check
build examples/hf_score "hf_score tokenizer --gguf" -p peregrine-engine --example hf_score
cp scripts/gpu/cover_x2.sh scripts/gpu/transformers_check.py "$dest/scripts/gpu/"
"$dest/hf_score" tokenizer --gguf "$PEREGRINE_DEFAULT_MODEL" --out "$dest/tokenizer"
nvrtc_dir=$(ls -d "$PEREGRINE_CUDA_VENV"/lib/python3*/site-packages/nvidia/cu13/lib | head -n1)
case $dest in /*) cubins=$dest/cubins ;; *) cubins=$PWD/$dest/cubins ;; esac
export PEREGRINE_NVRTC_DIR=$nvrtc_dir PEREGRINE_CUBIN_CACHE=$cubins
# Tiny shapes (sanitize) and the two bench shapes, default kernel; smollm2-1.7b at TP 1
# and 2 (serve --tp 2 and the transformers step).
"$dest/gpu_check" precompile --variants '' --no-chaos --shapes smollm2-135m,llama-3.2-1b
"$dest/gpu_check" precompile-tp --no-chaos --shapes smollm2-1.7b
du -sh "$dest"
