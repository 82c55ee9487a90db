#!/usr/bin/env bash
# Packs llama.cpp's source for the GPU host (scripts/bench/llamacpp_cuda.sh build): the
# tree vendored in the llama-cpp-python 0.3.36 sdist (PyPI is the only source reachable
# here), without its models, docs, tests, web UI and the GPU backends other than CUDA,
# so it fits one device call's carry (~5 MB instead of 77).
# usage: scripts/bench/pack_llamacpp_source.sh [OUT]   (default .carry/llamacpp-src.tar.xz)
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${1:-.carry/llamacpp-src.tar.xz}"
VERSION=0.3.36
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
SDIST="${LLAMACPP_SDIST:-}"
if [[ -z "$SDIST" ]]; then
    python3 -m pip download -q "llama-cpp-python==$VERSION" --no-deps --no-binary llama-cpp-python -d "$WORK"
    SDIST="$WORK/llama_cpp_python-$VERSION.tar.gz"
fi
tar -xzf "$SDIST" -C "$WORK" "llama_cpp_python-$VERSION/vendor/llama.cpp"
TREE="$WORK/llama_cpp_python-$VERSION/vendor/llama.cpp"
rm -rf "$TREE"/{models,docs,media,benches,tests,tools/ui} "$TREE"/.git*
find "$TREE/examples" -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +
for backend in cann et hexagon hip metal musa opencl openvino sycl virtgpu vulkan webgpu zdnn zendnn; do
    rm -rf "$TREE/ggml/src/ggml-$backend"
done
mkdir -p "$(dirname "$OUT")"
tar -cJf "$OUT" -C "$(dirname "$TREE")" llama.cpp
echo "$OUT: $(du -h "$OUT" | cut -f1)"
