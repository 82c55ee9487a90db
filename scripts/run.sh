#!/usr/bin/env bash
# The main job: set up, build the playground and the server (release), and serve
# the playground + API on http://127.0.0.1:8080 with the default model.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$(dirname "$0")/.."
scripts/setup.sh run
scripts/build-frontend.sh
step "Building the server (cargo build --release)"
cargo build --release -p peregrine-server --bin peregrine
step "Starting peregrine on http://127.0.0.1:8080 (Ctrl-C stops)"
exec "$CARGO_TARGET_DIR/release/peregrine" serve --model "$PEREGRINE_DEFAULT_MODEL" --dist dist "$@"
