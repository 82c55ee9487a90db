#!/usr/bin/env bash
# llama.cpp's CUDA build on the GPU host, for the speed side by side of issue #28 run 2:
#   build   SRC.tar.xz   builds llama-bench and llama-quantize (sm_90, flash attention)
#   models  SHAPE...     random-weight GGUFs of benchmark shapes (random_gguf.py), F16
#                        quantized by llama-quantize to Q8_0 and Q4_K_M
#   bench   SHAPE...     llama-bench on each: tg128 (decode) and pp512 (prefill), 5 repeats
# SRC.tar.xz is the llama.cpp tree of the llama-cpp-python sdist, pruned to what these
# two tools need (scripts/bench/pack_llamacpp_source.sh writes it). Work goes to
# LLAMACPP_WORK (default /tmp/llamacpp). The GPU host has a CUDA toolkit under
# /usr/local/cuda; where nvcc comes only from pip wheels (unversioned .so links missing),
# `build` assembles a toolkit root of links for CMake's FindCUDAToolkit.
set -euo pipefail
WORK="${LLAMACPP_WORK:-/tmp/llamacpp}"
HERE="$(cd "$(dirname "$0")" && pwd)"
BIN="$WORK/build/bin"
mkdir -p "$WORK"
cmd="${1:?usage: llamacpp_cuda.sh build SRC.tar.xz | models SHAPE... | bench SHAPE...}"
shift

toolkit_root() {
    local nvcc site root="$WORK/cuda-root"
    nvcc="$(command -v nvcc || true)"
    site="$(python3 -c 'import site; print(site.getsitepackages()[0])')/nvidia/cu13"
    [[ -n "$nvcc" ]] || nvcc="$site/bin/nvcc"
    [[ -x "$nvcc" ]] || { echo "no nvcc found" >&2; exit 1; }
    local top; top="$(cd "$(dirname "$(readlink -f "$nvcc")")/.." && pwd)"
    # A full toolkit (its static runtime is there) is used as it is.
    if compgen -G "$top/targets/*/lib/libcudart_static.a" >/dev/null || [[ -f "$top/lib64/libcudart_static.a" ]]; then
        echo "$top"
        return
    fi
    rm -rf "$root" && mkdir -p "$root/lib64"
    ln -s "$top/bin" "$root/bin"
    ln -s "$top/include" "$root/include"
    # Each library under its unversioned name, from the toolkit's lib dirs, the wheels and the driver.
    for dir in "$top/lib64" "$top/lib" "$site/lib" /usr/lib/x86_64-linux-gnu /usr/lib64; do
        [[ -d "$dir" ]] || continue
        for f in "$dir"/lib*.so*; do
            [[ -e "$f" ]] || continue
            local base; base="$(basename "$f")"; base="${base%%.so*}.so"
            [[ -e "$root/lib64/$base" ]] || ln -s "$f" "$root/lib64/$base"
        done
    done
    echo "$root"
}

case "$cmd" in
build)
    src="${1:?build needs SRC.tar.xz}"
    if [[ ! -f "$WORK/src/CMakeLists.txt" ]]; then
        mkdir -p "$WORK/src" && tar -xJf "$src" -C "$WORK/src" --strip-components=1
    fi
    root="$(toolkit_root)"
    echo "nvcc: $("$root/bin/nvcc" --version | tail -1)"
    export CUDAToolkit_ROOT="$root" LIBRARY_PATH="$root/lib64:${LIBRARY_PATH:-}" LD_LIBRARY_PATH="$root/lib64:${LD_LIBRARY_PATH:-}"
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
    for shape in "$@"; do
        f16="$WORK/$shape-f16.gguf"
        [[ -f "$f16" ]] || python3 "$HERE/random_gguf.py" "$shape" "$f16"
        for q in Q8_0 Q4_K_M; do
            out="$WORK/$shape-$q.gguf"
            [[ -f "$out" ]] || "$BIN/llama-quantize" "$f16" "$out" "$q" "$(nproc)" >"$WORK/quantize-$shape-$q.log" 2>&1 \
                || { tail -20 "$WORK/quantize-$shape-$q.log"; exit 1; }
            echo "$out: $(du -m "$out" | cut -f1) MB"
        done
    done
    ;;
bench)
    for shape in "$@"; do
        for q in f16 Q8_0 Q4_K_M; do
            "$BIN/llama-bench" -m "$WORK/$shape-$q.gguf" -ngl 99 -fa 1 -p 512 -n 128 -r 5 -o md 2>/dev/null \
                | grep -E "^\| (model|llama|---)" | sed "s|^|$shape $q |"
        done
    done
    ;;
*) echo "unknown command $cmd" >&2; exit 2 ;;
esac
