#!/usr/bin/env bash
# The GPU kit: everything a GPU session verifies and measures, from one folder, in one
# device call. The GPU host has no Rust toolchain and no network, so the build machine
# prepares the folder and the GPU host only runs it.
#
#   scripts/gpu/kit.sh build [--model]     here: writes .carry/kit/ (binaries, the scripts
#                                          the GPU host runs, the llama.cpp source pack);
#                                          --model also splits the default model into
#                                          .carry/model-1, .carry/model-2 (one per call)
#   scripts/gpu/kit.sh run [SUITE...]      on the GPU host, with .carry/kit carried
#
# Suites (default: tests bench):
#   tests     the GPU correctness suite (backend/engine/tests/gpu.rs), one check at a time,
#             less its exhaustive trials (KIT_TESTS_SKIP: ';'-separated name patterns)
#   tests-all every trial of the suite (a call of its own)
#   bench     peregrine-bench on every benchmark shape and weight format, PyTorch beside it
#             (KIT_GEN=64 for the 3–8B presets: their CPU verification then fits a call;
#             KIT_BENCH_FLAGS adds options, e.g. "--threads 256 --gpu-q-pipeline")
#   peers     llama.cpp's CUDA build and llama-bench on the same shapes and formats; its
#             build starts first, in the background, while the other suites run
#   sanitize  compute-sanitizer memcheck over the checks KIT_SANITIZE names
#   trace     gpu_check's phase trace of KIT_SHAPES in each of KIT_WEIGHTS, per kernel
#             build of KIT_TRACE_VARIANTS (default: default; e.g. default+threads256,default+threads256+q-pipe)
#   rows      what an extra row of a step costs: one matrix times 1..8 vectors per pass
#             (gpu_check rows; KIT_ROWS_SHAPES as ROWSxK,…), each vector's bits checked
#   hf        the engine against transformers through the real HF loader
#   model     the real default model through `peregrine` (needs both model parts carried)
#
# Every step runs under a deadline (KIT_DEADLINE seconds from the start, default 530,
# inside one call's 10 minutes); logs and one summary table (summary.md) go to $OUT.
set -uo pipefail

# The repository root, or the kit folder itself when this is the kit's own copy.
here=$(cd "$(dirname "$0")/../.." && pwd)
KIT_SHAPES=${KIT_SHAPES:-smollm2-135m,llama-3.2-1b,qwen2.5-coder-1.5b,smollm2-1.7b}
KIT_WEIGHTS=${KIT_WEIGHTS:-bf16,q8_0,q4_k_m}

build() {
  set -e
  source "$here/scripts/env.sh"
  cd "$here"
  local kit=.carry/kit model=0
  [ "${1:-}" = --model ] && model=1
  step "Release binaries: peregrine (the product build), peregrine-bench and gpu_check"
  cargo build --release -p peregrine-server --bin peregrine
  mkdir -p "$kit/bin"
  install -m755 "$CARGO_TARGET_DIR/release/peregrine" "$kit/bin/"
  cargo build --release -p peregrine-bench --bin peregrine-bench --example gpu_check --example hf_score
  install -m755 "$CARGO_TARGET_DIR/release/peregrine-bench" "$CARGO_TARGET_DIR/release/examples/gpu_check" \
    "$CARGO_TARGET_DIR/release/examples/hf_score" "$kit/bin/"
  step "The GPU test binary (cargo test --no-run)"
  local tests
  tests=$(cargo test -q -p peregrine-engine --test gpu --no-run --message-format=json |
    python3 -c 'import json,sys; print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("executable") and m["target"]["name"] == "gpu"][-1])')
  install -m755 "$tests" "$kit/bin/gpu-tests"
  strip "$kit"/bin/*
  step "Scripts the GPU host runs"
  rm -rf "$kit/scripts" && mkdir -p "$kit/scripts/gpu" "$kit/scripts/bench"
  cp scripts/gpu/kit.sh scripts/gpu/kit_summary.py scripts/gpu/real_model.sh scripts/gpu/serve_check.py \
    scripts/gpu/transformers_check.py "$kit/scripts/gpu/"
  cp scripts/bench/torch_cuda_graph.py scripts/bench/llamacpp_cuda.sh scripts/bench/random_gguf.py "$kit/scripts/bench/"
  step "llama.cpp source pack"
  local pack="$PEREGRINE_CACHE/llamacpp-src.tar.xz"
  [ -f "$pack" ] || scripts/bench/pack_llamacpp_source.sh "$pack"
  cp "$pack" "$kit/llamacpp-src.tar.xz"
  git rev-parse --short HEAD > "$kit/COMMIT"
  git status --porcelain --untracked-files=no | grep -q . && echo "+uncommitted changes" >> "$kit/COMMIT"
  if [ $model = 1 ]; then
    step "Default model in two parts (one call's carry each)"
    scripts/fetch-model.sh
    rm -rf .carry/model-1 .carry/model-2 && mkdir -p .carry/model-1 .carry/model-2
    local half=$(( ($(stat -c %s "$PEREGRINE_DEFAULT_MODEL") + 1) / 2 ))
    head -c "$half" "$PEREGRINE_DEFAULT_MODEL" > .carry/model-1/part
    tail -c +"$(( half + 1 ))" "$PEREGRINE_DEFAULT_MODEL" > .carry/model-2/part
    sha256sum < "$PEREGRINE_DEFAULT_MODEL" | cut -d' ' -f1 > "$kit/MODEL_SHA256"
  fi
  du -sh "$kit" $(ls -d .carry/model-? 2>/dev/null)
  echo "built $kit ($(cat "$kit/COMMIT" | tr '\n' ' ')); on the GPU host, carry .carry/kit and run: scripts/gpu/kit.sh run [tests tests-all bench peers sanitize trace rows hf model]"
}

# Seconds left before the deadline, at most $1.
budget() {
  local left=$(( KIT_END - $(date +%s) ))
  (( left > $1 )) && left=$1
  (( left < 0 )) && left=0
  echo $left
}

# Runs "$@" under the remaining budget (capped at $1 s), logging to $2; records its status.
timed() {
  local cap=$1 log=$2; shift 2
  local t=$(budget "$cap") t0=$(date +%s) rc
  if (( t < 5 )); then echo "skipped (deadline): $*" | tee -a "$log"; return 124; fi
  timeout -s KILL "$t" "$@" >> "$log" 2>&1
  rc=$?
  echo "[$(( $(date +%s) - t0 )) s, exit $rc] $*" | tee -a "$log" "$KIT_WORK/steps.txt" >&2
  return $rc
}

run() {
  local kit=$here
  [ -x "$kit/bin/gpu-tests" ] || kit=$here/.carry/kit
  [ -x "$kit/bin/gpu-tests" ] || { echo "no kit at $kit: run scripts/gpu/kit.sh build on the build machine and carry .carry/kit" >&2; exit 1; }
  OUT=${OUT:-/tmp/gpu-logs}; mkdir -p "$OUT"; export OUT
  # $OUT brings back at most 8 files: the environment and step times go into the summary.
  KIT_WORK=$(mktemp -d); export KIT_WORK
  KIT_END=$(( $(date +%s) + ${KIT_DEADLINE:-530} ))
  local suites=("$@"); [ ${#suites[@]} -gt 0 ] || suites=(tests bench)
  has() { [[ " ${suites[*]} " == *" $1 "* ]]; }
  # NVRTC and cuBLAS from the image's CUDA wheels; kernels cached across steps.
  for d in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))') /usr/local/cuda/lib64; do
    if ls "$d"/nvidia/cu13/lib/libnvrtc.so* >/dev/null 2>&1; then
      export PEREGRINE_NVRTC_DIR=$d/nvidia/cu13/lib PEREGRINE_CUBLAS_DIR=$d/nvidia/cu13/lib; break
    fi
  done
  export PEREGRINE_CUBIN_CACHE=${PEREGRINE_CUBIN_CACHE:-/tmp/cubins} NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
  export PATH="$PATH:/usr/local/cuda/bin"
  cd "$kit"
  { echo "kit $(tr '\n' ' ' < COMMIT)"; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
    python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' 2>&1; } > "$KIT_WORK/env.txt"
  cat "$KIT_WORK/env.txt"
  : > "$KIT_WORK/steps.txt"
  local peers_pid=""
  if has peers; then
    # The build needs the CPUs only: it overlaps the GPU suites, at the lowest priority so
    # the checks' CPU references keep their cores.
    ( export LLAMACPP_WORK=/tmp/llamacpp
      timed 400 "$OUT/peers.log" nice -n 19 scripts/bench/llamacpp_cuda.sh build llamacpp-src.tar.xz &&
      timed 400 "$OUT/peers.log" nice -n 19 scripts/bench/llamacpp_cuda.sh models ${KIT_SHAPES//,/ } ) &
    peers_pid=$!
  fi
  if has tests || has tests-all; then
    # `tests` leaves out the exhaustive trials (each kernel variant, the benchmark-sized
    # presets, long prompts at tp 2, the 3–8B widths, the opt-in one launch of a
    # Laneformer's lanes: KIT_TESTS_FILTER="widths" or "one launch" runs
    # those in a call of their own), which do not fit one call beside the other suites;
    # `tests-all` runs every trial. The summary says how many were filtered out.
    local skip=() pattern filters
    if ! has tests-all; then
      IFS=';' read -ra filters <<< "${KIT_TESTS_SKIP:-kernel default+;over long prompts;tp 2 qwen2.5-coder-1.5b;laneformer-2b lanes on tp 2;1000 greedy tokens;widths, 2 layers;one launch of every lane;sanitize:}"
      for pattern in "${filters[@]}"; do skip+=(--skip "$pattern"); done
    fi
    if [ -n "${KIT_TESTS_FILTER:-}" ]; then
      # Only the trials whose names contain one of these (';'-separated) patterns: the
      # rest of a run a deadline cut short.
      IFS=';' read -ra filters <<< "$KIT_TESTS_FILTER"
      for pattern in "${filters[@]}"; do
        echo "== tests: bin/gpu-tests --test-threads 1 '$pattern'"
        timed 540 "$OUT/tests.log" bin/gpu-tests --test-threads 1 "$pattern"
      done
    else
      echo "== tests: bin/gpu-tests --test-threads 1 ${skip[*]}"
      timed "$(has tests-all && echo 540 || echo 330)" "$OUT/tests.log" bin/gpu-tests --test-threads 1 "${skip[@]}"
    fi
    grep -E "^test .*(FAILED|ok)$|^test result" "$OUT/tests.log" | grep -vE " ok$" | tail -20
  fi
  if has sanitize; then
    echo "== sanitize: compute-sanitizer memcheck on '${KIT_SANITIZE:-sanitize:}'"
    timed 240 "$OUT/sanitize.log" compute-sanitizer --tool memcheck --error-exitcode 9 \
      bin/gpu-tests --test-threads 1 "${KIT_SANITIZE:-sanitize:}"
    tail -3 "$OUT/sanitize.log"
  fi
  if has bench; then
    # One invocation per weight format, so a deadline loses at most the last one's rows;
    # PyTorch (bf16 only) runs beside the bf16 one.
    local w
    for w in ${KIT_WEIGHTS//,/ }; do
      echo "== bench: peregrine-bench --device cuda --shape $KIT_SHAPES --weights $w"
      timed 420 "$OUT/bench.log" bin/peregrine-bench --device cuda --shape "$KIT_SHAPES" --weights "$w" \
        --runs "${KIT_RUNS:-3}" ${KIT_GEN:+--gen "$KIT_GEN"} ${KIT_BENCH_FLAGS:-} $([ "$w" = bf16 ] && echo --baseline) --json-out "$KIT_WORK/bench-$w.json"
    done
    python3 - "$KIT_WORK" "$OUT/bench.json" <<'PY'
import glob, json, sys
parts = [json.load(open(f)) for f in sorted(glob.glob(sys.argv[1] + "/bench-*.json"))]
if parts:
    merged = dict(parts[0], shapes=[row for p in parts for row in p["shapes"]])
    json.dump(merged, open(sys.argv[2], "w"), indent=1)
PY
    grep -vE "Writing|^\s*$" "$OUT/bench.log" | grep -E "tok/s|failed|error|bound" | tail -30
  fi
  if has trace; then
    local tw
    for tw in ${KIT_WEIGHTS//,/ }; do
      echo "== trace: gpu_check trace --shapes $KIT_SHAPES --weights $tw --variants ${KIT_TRACE_VARIANTS:-default}"
      timed 300 "$OUT/trace.log" bin/gpu_check trace --shapes "$KIT_SHAPES" --weights "$tw" --variants "${KIT_TRACE_VARIANTS:-default}"
    done
    grep -E "^\| |error|Error" "$OUT/trace.log" | tail -40
  fi
  if has rows; then
    echo "== rows: gpu_check rows (one matrix times 1..8 vectors per pass)"
    timed 180 "$OUT/rows.log" bin/gpu_check rows ${KIT_ROWS_SHAPES:+--shapes "$KIT_ROWS_SHAPES"}
    grep -E "^\| |^[0-9]|GPU|error|Error" "$OUT/rows.log" | tail -40
  fi
  if has hf; then
    echo "== hf: transformers against the engine through the HF loader"
    timed 200 "$OUT/hf.log" python3 scripts/gpu/transformers_check.py --bin bin/hf_score --out /tmp/hf-check
    tail -8 "$OUT/hf.log"
  fi
  if has model; then
    echo "== model: the real default model through peregrine"
    if cat "$kit"/../model-1/part "$kit"/../model-2/part > /tmp/model.gguf 2>/dev/null &&
       [ "$(sha256sum < /tmp/model.gguf | cut -d' ' -f1)" = "$(cat MODEL_SHA256 2>/dev/null)" ]; then
      MODEL=/tmp/model.gguf OUT=/tmp/model-check timed 200 "$OUT/model.log" bash scripts/gpu/real_model.sh
      tail -12 "$OUT/model.log"
    else
      echo "model parts missing or incomplete: build with --model, carry .carry/model-1 in one call and .carry/model-2 in the next" | tee "$OUT/model.log"
    fi
  fi
  if [ -n "$peers_pid" ]; then
    echo "== peers: llama.cpp CUDA (llama-bench tg128 / pp512)"
    # Its models step may have stopped early (deadline, disk): bench makes what is missing
    # and deletes each shape's files once measured.
    wait "$peers_pid"
    [ -x /tmp/llamacpp/build/bin/llama-bench ] && LLAMACPP_WORK=/tmp/llamacpp LLAMACPP_PRUNE=1 timed 400 "$OUT/peers.log" \
      scripts/bench/llamacpp_cuda.sh bench ${KIT_SHAPES//,/ }
    grep -E "tg128|pp512|error|Error" "$OUT/peers.log" | tail -24
  fi
  python3 scripts/gpu/kit_summary.py "$OUT" "$KIT_WORK" | tee "$OUT/summary.md"
}

case "${1:-}" in
  build) shift; build "$@" ;;
  run) shift; run "$@" ;;
  *) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
