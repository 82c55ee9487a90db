#!/usr/bin/env bash
# GPU engine correctness + sanitizer + benchmark in one go, on the GPU host (no Rust
# there: build .carry/gpu_check here with scripts/gpu/build.sh, carry .carry). Prints
# a short table last; full logs go to $OUT (or ./gpu-logs).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-logs}; mkdir -p "$out"
export PEREGRINE_CUBIN_CACHE=$PWD/.carry/cubins
bin=.carry/gpu_check
[ -x "$bin" ] || { echo "missing $bin: run scripts/gpu/build.sh first"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$out/gpu.txt"
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
echo "== compute-sanitizer memcheck (small shape)"
timeout -s KILL "${SAN_TIMEOUT:-180}" "$san" --tool memcheck --error-exitcode 9 "$bin" sanitize > "$out/sanitize.log" 2>&1
echo "sanitizer exit: $? ($(grep -c 'Invalid\|ERROR SUMMARY' "$out/sanitize.log") report lines)"; tail -3 "$out/sanitize.log"
echo "== correctness + benchmark"
timeout -s KILL "${CHECK_TIMEOUT:-420}" "$bin" all "$@" > "$out/check.log" 2>&1
rc=$?
grep -E "^(  )?(PASS|FAIL)|tok/s|TB/s|error|skipped" "$out/check.log" | grep -v "^  " | head -5
sed -n '/==== summary ====/,$p' "$out/check.log"
[ $rc -eq 0 ] || { echo "gpu_check exit $rc; last lines:"; tail -25 "$out/check.log"; }
exit $rc
