#!/usr/bin/env bash
# Builds the playground into dist/ with Trunk (release), on whichever wasm32 route
# set-up chose.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$(dirname "$0")/.."
if [ "$(cat "$PEREGRINE_CACHE/wasm-route" 2>/dev/null)" = debian ]; then
  # Debian's rustc-web ships no prebuilt wasm32 std: build it from source.
  export PATH="$PEREGRINE_CACHE/rust-web-shim:$PATH" RUSTC_BOOTSTRAP=1 CARGO_UNSTABLE_BUILD_STD="std panic_abort"
  cargo fetch --target wasm32-unknown-unknown >/dev/null
fi
step "Building the playground (trunk build --release)"
trunk build --release
