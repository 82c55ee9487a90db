#!/usr/bin/env bash
# Runs every test: Rust unit + integration tests, the kernel compile check, the
# playground build and the Playwright end-to-end tests in headless Chromium.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$(dirname "$0")/.."
start=$(date +%s)
# Before any install: a stale bundle fails in a second, not after the set-up.
step "Checking the committed playground bundle against the frontend sources"
if [ "$(scripts/frontend-hash.sh)" != "$(cat frontend/bundle/SOURCES.sha256 2>/dev/null)" ]; then
  die "frontend/bundle is stale: the playground's sources changed since it was built. Run scripts/bundle-playground.sh and commit frontend/bundle."
fi
# Incremental state only grows the shared target folder (each clone path adds its own).
export CARGO_INCREMENTAL=0
scripts/cache-room.sh 15
scripts/setup.sh test
export PEREGRINE_DEFAULT_MODEL
# The engine's NVRTC test compiles the real kernel for every preset with the pinned wheel.
PEREGRINE_NVRTC_DIR=$(dirname "$(ls "$PEREGRINE_CUDA_VENV"/lib/python3*/site-packages/nvidia/cu13/lib/libnvrtc.so* | head -n1)")
export PEREGRINE_NVRTC_DIR
step "Rust tests (cargo test)"
cargo test --workspace --no-fail-fast
step "Kernel compile check (nvcc, sm_90a)"
scripts/check-kernels.sh
# The e2e servers serve this fresh build (--dist), so the tests see the sources.
scripts/build-frontend.sh
step "End-to-end tests (Playwright, headless Chromium)"
# The product binary alone, as `make run` builds it: built with the workspace, cargo
# would unify the engine's `lab` feature in (peregrine-bench and the tests ask for
# it), so this is a second engine build (about two minutes in debug on two cores),
# without the apparatus and with its dead-code warnings on; any warning fails the suite.
log=$(mktemp)
cargo build -p peregrine-server --bin peregrine --message-format short 2> "$log" || { cat "$log"; die "the peregrine binary does not build"; }
if grep -E '(^|: )warning:' "$log"; then
  die "building the peregrine binary warns (above): the product build must be clean"
fi
rm -f "$log"
export PEREGRINE_BIN="$CARGO_TARGET_DIR/debug/peregrine"
version=$("$PEREGRINE_BIN" --version)
grep -qx 'lab: off' <<< "$version" || die "$PEREGRINE_BIN was built with the engine's lab feature: $version"
# A free port, so a server left running elsewhere never blocks the suite.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PEREGRINE_E2E_PORT=$(free_port)
# A second server on the 8-lane Laneformer fixture (e2e/tests/laneformer.spec.ts).
PEREGRINE_E2E_LANE_PORT=$(free_port)
PEREGRINE_E2E_FIM_PORT=$(free_port)
PEREGRINE_E2E_KEY_PORT=$(free_port)
export PEREGRINE_E2E_PORT PEREGRINE_E2E_LANE_PORT PEREGRINE_E2E_FIM_PORT PEREGRINE_E2E_KEY_PORT
(cd e2e && CI=1 npx playwright test)
echo "all tests passed in $(( $(date +%s) - start )) s"
