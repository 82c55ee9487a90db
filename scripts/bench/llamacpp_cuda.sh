#!/usr/bin/env bash
# llama.cpp's CUDA build on the GPU host, for the speed side by side in docs/benchmarks.md:
#   build   SRC.tar.xz   builds llama-bench and llama-quantize (sm_90, flash attention)
#   models  SHAPE...     random-weight GGUFs of benchmark shapes (random_gguf.py), F16
#                        quantized by llama-quantize to Q8_0 and Q4_K_M
#   bench   SHAPE...     llama-bench on each: tg128 (decode) and pp512 (prefill), 5 repeats
#                        (makes missing models first; LLAMACPP_PRUNE=1 deletes each
#                        shape's files once measured, for the 3–8B shapes' disk)
# SRC.tar.xz is the llama.cpp tree of the llama-cpp-python sdist, pruned to what these
# two tools need (scripts/bench/pack_llamacpp_source.sh writes it). Work goes to
# LLAMACPP_WORK (default /tmp/llamacpp). The GPU host has a full CUDA toolkit under
# /usr/local/cuda (nvcc on PATH), CMake and ninja.
set -euo pipefail
WORK="${LLAMACPP_WORK:-/tmp/llamacpp}"
HERE="$(cd "$(dirname "$0")" && pwd)"
BIN="$WORK/build/bin"
mkdir -p "$WORK"
cmd="${1:?usage: llamacpp_cuda.sh build SRC.tar.xz | models SHAPE... | bench SHAPE...}"
shift

# The CUDA toolkit of the nvcc on PATH (CMake's FindCUDAToolkit needs its static runtime,
# which the pip wheels of nvcc lack).
toolkit_root() {
    local nvcc top
    nvcc="$(command -v nvcc)" || { echo "no nvcc on PATH" >&2; exit 1; }
    top="$(cd "$(dirname "$(readlink -f "$nvcc")")/.." && pwd)"
    compgen -G "$top/targets/*/lib/libcudart_static.a" >/dev/null || [[ -f "$top/lib64/libcudart_static.a" ]] \
        || { echo "$top is not a full CUDA toolkit (no libcudart_static.a)" >&2; exit 1; }
    echo "$top"
}

# The F16, Q8_0 and Q4_K_M GGUFs of shape $1 (kept when present); fails when the disk
# cannot hold the missing ones.
make_models() {
    local shape=$1 f16="$WORK/$1-f16.gguf" need free q out
    if [[ ! -f "$WORK/$shape-Q4_K_M.gguf" ]]; then
        # F16 + Q8_0 (~0.53×) + Q4_K_M (~0.3×), and a margin.
        need=$(( $(python3 "$HERE/random_gguf.py" --f16-bytes "$shape") * 19 / 10 + (2 << 30) ))
        free=$(( $(df --output=avail -B1 "$WORK" | tail -1) ))
        (( free > need )) || { echo "$shape: needs $(( need >> 30 )) GiB on $WORK, $(( free >> 30 )) GiB free" >&2; return 1; }
    fi
    [[ -f "$f16" ]] || python3 "$HERE/random_gguf.py" "$shape" "$f16"
    for q in Q8_0 Q4_K_M; do
        out="$WORK/$shape-$q.gguf"
        [[ -f "$out" ]] || "$BIN/llama-quantize" "$f16" "$out" "$q" "$(nproc)" >"$WORK/quantize-$shape-$q.log" 2>&1 \
            || { tail -20 "$WORK/quantize-$shape-$q.log"; return 1; }
        echo "$out: $(du -m "$out" | cut -f1) MB"
    done
}

built() { [[ -x "$BIN/llama-bench" && -x "$BIN/llama-quantize" ]] || { echo "no llama.cpp build in $WORK: run \`$0 build SRC.tar.xz\` first" >&2; exit 1; }; }

case "$cmd" in
build)
    src="${1:?build needs SRC.tar.xz}"
    if [[ ! -f "$WORK/src/CMakeLists.txt" ]]; then
        mkdir -p "$WORK/src" && tar -xJf "$src" -C "$WORK/src" --strip-components=1
    fi
    root="$(toolkit_root)"
    echo "nvcc: $("$root/bin/nvcc" --version | tail -1)"
    cmake -S "$WORK/src" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_CUDA_COMPILER="$root/bin/nvcc" -DCUDAToolkit_ROOT="$root" \
        -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CCACHE=OFF \
        -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
        -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_UI=OFF \
        -DLLAMA_USE_PREBUILT_UI=OFF >"$WORK/configure.log" 2>&1 || { tail -40 "$WORK/configure.log"; exit 1; }
    grep -E "CUDA Toolkit|CUDA_ARCH|Found CUDAToolkit" "$WORK/configure.log" || true
    t0=$(date +%s)
    cmake --build "$WORK/build" -j "$(nproc)" --target llama-bench llama-quantize >"$WORK/build.log" 2>&1 \
        || { grep -E "error|Error" "$WORK/build.log" | head -30; tail -20 "$WORK/build.log"; exit 1; }
    echo "built llama-bench, llama-quantize in $(( $(date +%s) - t0 )) s"
    ;;
models)
    built
    # Shapes in order while the disk holds them (an 8B model's three files take ~30 GB);
    # `bench` makes the rest once it has pruned the ones it measured.
    for shape in "$@"; do
        make_models "$shape" || { echo "$shape: left for bench (disk)"; break; }
    done
    ;;
bench)
    built
    for shape in "$@"; do
        make_models "$shape" || exit 1
        for q in f16 Q8_0 Q4_K_M; do
            "$BIN/llama-bench" -m "$WORK/$shape-$q.gguf" -ngl 99 -fa 1 -p 512 -n 128 -r 5 -o md 2>/dev/null \
                | grep -E "^\| (model|llama|---)" | sed "s|^|$shape $q |"
        done
        [[ -z "${LLAMACPP_PRUNE:-}" ]] || rm -f "$WORK/$shape"-*.gguf
    done
    ;;
*) echo "unknown command $cmd" >&2; exit 2 ;;
esac
