#!/usr/bin/env bash
# The GPU checks as cargo tests (backend/engine/tests/gpu.rs), for a GPU host without
# Rust. Here: `scripts/gpu/test.sh build` compiles the test binary (`cargo test
# --no-run`) into .carry/gpu-tests/. On the GPU host (with .carry carried):
# `scripts/gpu/test.sh run` finds NVRTC and cuBLAS in the image's Python wheels and
# runs it; every check prints ok or FAILED with its figures. Without a CUDA device the
# same binary reports each check as ignored. `scripts/gpu/test.sh sanitize FILTER` runs
# the checks FILTER names under compute-sanitizer memcheck (exit 9 on any error).
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=.carry/gpu-tests
case "${1:-}" in
  build)
    source scripts/env.sh
    bin=$(cargo test -q -p peregrine-engine --test gpu --no-run --message-format=json 2>/dev/null |
      python3 -c 'import json,sys; print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("executable") and m["target"]["name"] == "gpu"][-1])')
    mkdir -p "$dest" && cp "$bin" "$dest/gpu" && strip "$dest/gpu"
    echo "built $dest/gpu; carry .carry and run: scripts/gpu/test.sh run"
    ;;
  run|sanitize)
    [ -x "$dest/gpu" ] || { echo "missing $dest/gpu: run scripts/gpu/test.sh build here first" >&2; exit 1; }
    for d in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))'); do
      if ls "$d"/nvidia/cu13/lib/libnvrtc.so* >/dev/null 2>&1; then
        export PEREGRINE_NVRTC_DIR=$d/nvidia/cu13/lib PEREGRINE_CUBLAS_DIR=$d/nvidia/cu13/lib; break
      fi
    done
    export PEREGRINE_CUBIN_CACHE=${PEREGRINE_CUBIN_CACHE:-/tmp/cubins}
    mode=$1; shift
    if [ "$mode" = sanitize ]; then
      san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
      exec "$san" --tool memcheck --error-exitcode 9 "$dest/gpu" --test-threads 1 "$@"
    fi
    "$dest/gpu" "$@"
    ;;
  *) echo "usage: scripts/gpu/test.sh build|run [test filter]|sanitize FILTER" >&2; exit 2 ;;
esac
