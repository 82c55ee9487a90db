#!/usr/bin/env bash
# Idempotent set-up shared by `make run` and `make test`: installs only what is
# missing. `setup.sh run` fetches the default model (the server embeds the committed
# playground, so no web tools); `setup.sh bundle` installs the pinned Trunk and
# wasm-bindgen; `setup.sh test` all of it plus the browser, Playwright and the CUDA
# compiler wheels for kernel checks, and PostgreSQL and nginx for the share store
# and replica tests.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$(dirname "$0")/.."

MODE="${1:-run}"
TRUNK_VERSION="0.21.14"
# Every CUDA wheel is pinned, or pip mixes 13.5 headers with 13.0 nvcc.
CUDA_WHEELS=(nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88
             nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85
             nvidia-cuda-nvrtc==13.0.88)

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
apt_install() {
  step "apt-get install $*"
  as_root apt-get update -qq || true
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@"
}

# The wasm32 standard library: rustup first, Debian's rustc-web (+ -Zbuild-std) as fallback.
ensure_wasm_std() {
  if rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
    rm -f "$PEREGRINE_CACHE/wasm-route"; return
  fi
  [ "$(cat "$PEREGRINE_CACHE/wasm-route" 2>/dev/null)" = debian ] && return
  step "Adding the wasm32-unknown-unknown target"
  if command -v rustup >/dev/null && timeout 180 rustup target add wasm32-unknown-unknown; then
    return
  fi
  echo "rustup could not add wasm32; using Debian's rustc-web with -Zbuild-std" >&2
  apt_install rustc-web cargo-web rust-web-src rust-web-llvm lld-22
  local shim="$PEREGRINE_CACHE/rust-web-shim"
  mkdir -p "$shim"
  for tool in cargo rustc rustdoc; do ln -sf "/usr/bin/$tool" "$shim/$tool"; done
  mkdir -p "$PEREGRINE_CACHE"; echo debian > "$PEREGRINE_CACHE/wasm-route"
}

cargo_install_pinned() { # crate version binary
  local crate=$1 version=$2 bin=$3
  if "$bin" --version 2>/dev/null | grep -q " $version\$"; then return; fi
  step "cargo install $crate $version (first time only; several minutes)"
  # --locked fails for wasm-bindgen-cli here; trunk's lock file works.
  local locked=(); [ "$crate" = trunk ] && locked=(--locked)
  cargo install "$crate" --version "$version" "${locked[@]}"
}

ensure_web_tools() {
  cargo_install_pinned trunk "$TRUNK_VERSION" trunk
  # wasm-bindgen-cli must equal the wasm-bindgen crate in Cargo.lock exactly.
  local wb
  wb=$(awk '/^name = "wasm-bindgen"$/{getline; gsub(/version = |"/,""); print; exit}' Cargo.lock)
  [ -n "$wb" ] || die "Cargo.lock has no wasm-bindgen entry"
  cargo_install_pinned wasm-bindgen-cli "$wb" wasm-bindgen
}

ensure_browser() {
  command -v chromium >/dev/null || apt_install chromium
  if [ ! -d e2e/node_modules/@playwright/test ] || [ e2e/package-lock.json -nt e2e/node_modules/.stamp ]; then
    step "npm ci (Playwright, system Chromium)"
    (cd e2e && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund && touch node_modules/.stamp)
  fi
}

ensure_nvcc() {
  if [ -x "$(nvcc_path)" ] && [ -n "$(nvrtc_dir)" ]; then return; fi
  step "Installing the pinned CUDA 13.0 compiler wheels into $PEREGRINE_CUDA_VENV"
  python3 -m venv "$PEREGRINE_CUDA_VENV"
  "$PEREGRINE_CUDA_VENV/bin/pip" install -q --progress-bar on "${CUDA_WHEELS[@]}"
  [ -x "$(nvcc_path)" ] || die "nvcc missing after installing ${CUDA_WHEELS[*]}"
}
# Folder with libnvrtc.so from the wheel (the engine's NVRTC compile test uses it).
nvrtc_dir() {
  dirname "$(ls "$PEREGRINE_CUDA_VENV"/lib/python3*/site-packages/nvidia/cu13/lib/libnvrtc.so* 2>/dev/null | head -n1)" 2>/dev/null | grep -v '^\.$' || true
}
nvcc_path() {
  ls "$PEREGRINE_CUDA_VENV"/lib/python3*/site-packages/nvidia/cu13/bin/nvcc 2>/dev/null | head -n1
}

# The share store tests run a throwaway PostgreSQL; the replica test puts nginx in front
# of two servers (backend/server/tests/common/postgres.rs, tests/replicas.rs).
ensure_db_and_proxy() {
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || apt_install postgresql
  [ -x /usr/sbin/nginx ] || command -v nginx >/dev/null || apt_install nginx-light
}

if [ "$MODE" != run ]; then
  ensure_wasm_std
  ensure_web_tools
fi
[ "$MODE" = bundle ] || scripts/fetch-model.sh
if [ "$MODE" = test ]; then
  ensure_browser
  ensure_nvcc
  ensure_db_and_proxy
fi
