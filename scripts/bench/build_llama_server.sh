#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` (CPU only) as a reference server for the
# throughput/latency benchmarks (scripts/bench/concurrent_streams.py).
#
# Source: the llama.cpp tree vendored in the PyPI sdist of llama-cpp-python==0.3.36
# (only PyPI is reachable from here, not GitHub). Tools: cmake + ninja from PyPI in
# a private venv.
#
# Flags (as for every llama.cpp reference build here): GGML_NATIVE=OFF
# with the ISA listed explicitly and every AMX option off. GGML_NATIVE=ON would NOT
# do: it compiles with -march=native, which turns AMX on by itself on CPUs that
# have it (the GGML_AMX_* options are only read when GGML_NATIVE=OFF), and that
# build segfaults at the first decode on these VMs. AVX-512 is enabled only when
# /proc/cpuinfo has avx512f (some machines here are AVX2-only EPYCs, where an
# AVX-512 build dies with SIGILL); the binary is therefore tied to this CPU class.
# Static libraries, so the single binary can be copied anywhere; no web UI
# (it would be downloaded from Hugging Face), no OpenSSL, no curl.
#
# Idempotent: does nothing when OUT_DIR/llama-server already exists (delete it to
# rebuild); the venv, download and build folders are reused too.
#
# usage: scripts/bench/build_llama_server.sh [OUT_DIR]   (default /tmp)
#   env: LLSRV_WORK  where venv/source/build go (default /tmp)
#        LLSRV_JOBS  parallel compile jobs (default 2)
# Measured 2026-12-02: build step 557 s wall (735 s CPU) on 2 cores under nice -n 19,
# alongside another compile; download + venv add ~20 s.
set -euo pipefail

OUT_DIR="${1:-/tmp}"
WORK="${LLSRV_WORK:-/tmp}"
JOBS="${LLSRV_JOBS:-2}"
VERSION=0.3.36
BIN="$OUT_DIR/llama-server"

if [[ -x "$BIN" ]]; then
    echo "llama-server already built: $BIN (delete it to rebuild)"
    "$BIN" --version 2>&1 | grep -E '^(version|built with)' || true
    exit 0
fi

VENV="$WORK/llsrv-venv"
SRC_DL="$WORK/llsrv-src"
SRC="$SRC_DL/llama_cpp_python-$VERSION/vendor/llama.cpp"
BUILD="$WORK/llsrv-build"

# 1. cmake + ninja from PyPI.
if [[ ! -x "$VENV/bin/cmake" || ! -x "$VENV/bin/ninja" ]]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q cmake ninja
fi

# 2. The sdist. `--no-binary llama-cpp-python`, NOT `--no-binary :all:`: pip
#    prepares the sdist's metadata, which installs its build requirements
#    (scikit-build-core, cmake, ninja); with :all: it tries to compile cmake
#    itself from source (minutes of CPU, for nothing).
if [[ ! -f "$SRC/CMakeLists.txt" ]]; then
    mkdir -p "$SRC_DL"
    nice -n 19 "$VENV/bin/pip" download -q "llama-cpp-python==$VERSION" \
        --no-deps --no-binary llama-cpp-python -d "$SRC_DL"
    tar -xzf "$SRC_DL/llama_cpp_python-$VERSION.tar.gz" -C "$SRC_DL"
fi

# 3. Configure.
AVX512=OFF
if grep -qw avx512f /proc/cpuinfo; then AVX512=ON; fi
echo "AVX-512: $AVX512"
nice -n 19 "$VENV/bin/cmake" -S "$SRC" -B "$BUILD" -G Ninja \
    -DCMAKE_MAKE_PROGRAM="$VENV/bin/ninja" \
    -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF \
    -DGGML_CCACHE=OFF \
    -DGGML_NATIVE=OFF \
    -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
    -DGGML_AVX512="$AVX512" -DGGML_AVX512_VBMI="$AVX512" \
    -DGGML_AVX512_VNNI="$AVX512" -DGGML_AVX512_BF16="$AVX512" \
    -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF

# 4. Build only the server.
start=$(date +%s)
nice -n 19 "$VENV/bin/cmake" --build "$BUILD" --target llama-server -j"$JOBS"
echo "build took $(( $(date +%s) - start )) s"

mkdir -p "$OUT_DIR"
cp "$BUILD/bin/llama-server" "$BIN.tmp"
mv "$BIN.tmp" "$BIN"
echo "built: $BIN"
"$BIN" --version 2>&1 | grep -E '^(version|built with)' || true
