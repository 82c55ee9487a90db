#!/usr/bin/env bash
# Builds what scripts/gpu/tp_check.sh needs on the GPU host into a carry folder
# (default .carry/tp, gitignored): the `peregrine` binary, gpu_check, hf_score and the
# two scripts. The kernels compile there through NVRTC at load (about 2 s each).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/env.sh
dest=${1:-.carry/tp}
cargo build --release -p peregrine-server --bin peregrine
cargo build --release -p peregrine-engine --example hf_score --example gpu_check
mkdir -p "$dest/scripts/gpu"
cp "$CARGO_TARGET_DIR/release/peregrine" "$CARGO_TARGET_DIR/release/examples/hf_score" "$CARGO_TARGET_DIR/release/examples/gpu_check" "$dest/"
cp scripts/gpu/tp_check.sh scripts/gpu/transformers_check.py "$dest/scripts/gpu/"
du -sh "$dest"
