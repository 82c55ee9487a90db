#!/usr/bin/env bash
# Runs llama.cpp's own server tests (tools/server/tests in the llama-cpp-python 0.3.36
# sdist, from PyPI) against the real `peregrine` binary through the `llama-server` shim
# beside this script. Usage: scripts/llamacpp-tests/run.sh [test file or pytest args…]
# (default: the unit files of the routes Peregrine serves). Prints pytest's summary;
# the list of what fails and why is in docs/server.md.
set -euo pipefail
source "$(dirname "$0")/../env.sh"
here="$(cd "$(dirname "$0")" && pwd)"
VERSION="0.3.36"
work="$PEREGRINE_CACHE/llamacpp-tests"
tests="$work/llama_cpp_python-$VERSION/vendor/llama.cpp/tools/server/tests"
venv="$work/venv"
mkdir -p "$work"
if [ ! -d "$tests" ]; then
  step "Fetching llama-cpp-python==$VERSION's sdist from PyPI (its server tests)"
  python3 -m pip download -q --no-deps --no-binary llama-cpp-python --only-binary cmake,ninja \
    -d "$work" "llama-cpp-python==$VERSION" || die "pip could not download llama-cpp-python==$VERSION"
  tar xzf "$work/llama_cpp_python-$VERSION.tar.gz" -C "$work" --wildcards "*/vendor/llama.cpp/tools/server/tests/*"
fi
if [ ! -f "$venv/.installed" ]; then
  step "Installing the tests' requirements"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r "$tests/requirements.txt"
  touch "$venv/.installed"
fi
scripts/fetch-model.sh
export PEREGRINE_BIN="${PEREGRINE_BIN:-$CARGO_TARGET_DIR/debug/peregrine}"
[ -x "$PEREGRINE_BIN" ] || cargo build -p peregrine-server
export LLAMA_SERVER_BIN_PATH="$here/llama-server"
cd "$tests"
if [ $# -eq 0 ]; then
  set -- unit/test_basic.py unit/test_completion.py unit/test_chat_completion.py unit/test_tokenize.py \
    unit/test_compat_oai_responses.py unit/test_compat_anthropic.py unit/test_security.py unit/test_ignore_eos.py
fi
"$venv/bin/python" -m pytest -q -p no:cacheprovider -rfE "$@" || true
