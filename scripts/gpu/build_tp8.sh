#!/usr/bin/env bash
# Builds what scripts/gpu/tp8_run.sh (issue 9, 8 GPUs) needs on the GPU host into a
# carry folder (default .carry/tp8, gitignored): peregrine, gpu_check, hf_score, dtp_ref
# and the scripts they call. No weights: the host builds them from seeds.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/env.sh
dest=${1:-.carry/tp8}
cargo build --release -p peregrine-server --bin peregrine
cargo build --release -p peregrine-engine --example hf_score --example gpu_check --example dtp_ref
mkdir -p "$dest/scripts/gpu"
for f in peregrine examples/hf_score examples/gpu_check examples/dtp_ref; do cp "$CARGO_TARGET_DIR/release/$f" "$dest/"; done
cp scripts/gpu/tp8_run.sh scripts/gpu/transformers_check.py scripts/gpu/dtp_reference.py scripts/gpu/dtp_crosscheck.sh "$dest/scripts/gpu/"
du -sh "$dest"
