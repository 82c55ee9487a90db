#!/usr/bin/env bash
# Issue 7's performance and transformers-parity figures in one device call, on the GPU
# host (no Rust there): `peregrine-bench --device cuda --shape … --baseline` on the four
# benchmark shapes, then scripts/gpu/transformers_check.py. Build here first
# (scripts/gpu/build_bench.sh: .carry/peregrine, .carry/hf_score, .carry/cubins) and
# carry those paths. Every step runs under `timeout -s KILL`; logs go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-logs}; mkdir -p "$out"
export PEREGRINE_CUBIN_CACHE=$PWD/.carry/cubins NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
shapes=${SHAPES:-smollm2-135m,llama-3.2-1b,qwen2.5-coder-1.5b,smollm2-1.7b}
for f in .carry/peregrine .carry/hf_score; do [ -x "$f" ] || { echo "missing $f: run scripts/gpu/build_bench.sh first"; exit 1; }; done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$out/gpu.txt"
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' | tee -a "$out/gpu.txt"
echo "== peregrine bench --device cuda --shape $shapes --baseline"
timeout -s KILL "${BENCH_TIMEOUT:-300}" .carry/peregrine-bench --device cuda --shape "$shapes" --baseline > "$out/bench.log" 2>&1
bench_rc=$?
grep -vE "^\s*\[torch\].*Writing" "$out/bench.log"
echo "bench exit: $bench_rc"
echo "== transformers check"
timeout -s KILL "${CHECK_TIMEOUT:-200}" python3 scripts/gpu/transformers_check.py --bin .carry/hf_score --out "$out" > "$out/check.log" 2>&1
check_rc=$?
grep -vE "Writing model shards|original_max_position" "$out/check.log" | cut -c1-700
echo "transformers check exit: $check_rc"
[ $bench_rc = 0 ] && [ $check_rc = 0 ]
