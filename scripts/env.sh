# Shared paths for every script (sourced, never run). One cache folder holds all
# that set-up installs or downloads, so fresh clones on the same machine reuse it.
PEREGRINE_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/peregrine"
export PEREGRINE_CACHE
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PEREGRINE_CACHE/target}"
export PEREGRINE_MODELS="$PEREGRINE_CACHE/models"
export PEREGRINE_CUDA_VENV="$PEREGRINE_CACHE/venv-cuda"
# `cargo install` puts Trunk and wasm-bindgen in $CARGO_HOME/bin.
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$HOME/.cargo/bin:$PATH"
# Trunk must never download a tool: a version mismatch is a hard error instead.
export TRUNK_OFFLINE=true
DEFAULT_MODEL_FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
export PEREGRINE_DEFAULT_MODEL="$PEREGRINE_MODELS/$DEFAULT_MODEL_FILE"
step() { printf '\n\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }
