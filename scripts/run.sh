#!/usr/bin/env bash
# The main job: fetch the default model, build the server (release; it embeds the
# committed playground bundle) and serve the playground + API on
# http://127.0.0.1:8080.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$(dirname "$0")/.."
scripts/setup.sh run
step "Building the server (cargo build --release)"
cargo build --release -p peregrine-server --bin peregrine
step "Starting peregrine on http://127.0.0.1:8080 (Ctrl-C stops)"
exec "$CARGO_TARGET_DIR/release/peregrine" serve --model "$PEREGRINE_DEFAULT_MODEL" "$@"
