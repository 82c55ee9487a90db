#!/usr/bin/env bash
# One device call on `nvidia-h200` that measures the kernel variants under work
# (docs/perf-notes.md): build here first with scripts/gpu/build_next.sh, then
#   run(command="bash .carry/next/scripts/gpu/next_session.sh", carry=[".carry/next"])
# from the repository root. Steps, most informative first, each under `timeout -s KILL`
# and all inside an overall deadline (default 480 s, well under the 10-minute limit; the
# step limits add up to more, so the last steps get what is left or are skipped):
#   1. kernel-check  $check_kernel vs the default kernel on 300/600 scored positions
#                    and the chaos race check over RACE_TOKENS greedy tokens
#   2. bench         $bench_variants, median of RUNS, on SHAPES
#   3. trace         phase trace of $trace_variants
#   4. correctness   gpu_check correctness --quick with $correctness_kernel (tiny shapes +
#                    SmolLM2-135M vs the CPU float32 reference, sampling, stops, cancellation)
#   5. prefill       gpu_check prefill --quick on SmolLM2-135M: the default kernel's
#                    batched prompt path against its token-by-token prompt path
# The variant lists live in next_variants.sh (shared with build_next.sh).
# A hung kernel ends its step after the runtime's 60 s stall timeout (the process exits,
# which ends the kernel); the later steps still run. Logs go to $OUT.
#   env: CARRY (.carry/next), OUT, DEADLINE_S (480), RACE_TOKENS (1000), RUNS (3), STEPS
#   (default "kernel_check bench trace correctness prefill"), SHAPES, BENCH_LIMIT_S (200),
#   CHECK_KERNEL, BENCH_VARIANTS, TRACE_VARIANTS, CORRECTNESS_KERNEL
set -uo pipefail
C=${CARRY:-.carry/next}
out=${OUT:-gpu-logs}; mkdir -p "$out"
case $C in /*) cubins=$C/cubins ;; *) cubins=$PWD/$C/cubins ;; esac
export PEREGRINE_CUBIN_CACHE=$cubins NCCL_NVLS_ENABLE=0
bin=$C/gpu_check
[ -x "$bin" ] || { echo "missing $bin: run scripts/gpu/build_next.sh first"; exit 1; }
shapes=${SHAPES:-smollm2-135m,llama-3.2-1b}
# What the steps run (build_next.sh precompiles the same lists).
source "$(dirname "$0")/next_variants.sh"
start=$(date +%s)
deadline=$((start + ${DEADLINE_S:-480}))
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$out/gpu.txt"
rc=0
step() { # name max_seconds cmd...: one step, capped by the overall deadline; its log kept, its summary printed
  local name=$1 max=$2; shift 2
  local left=$((deadline - $(date +%s)))
  local t=$(( max < left ? max : left ))
  if [ "$t" -lt 20 ]; then echo "== $name: SKIPPED (${left}s left before the deadline)"; rc=1; return; fi
  echo "== $name (limit ${t}s)"
  local t0=$(date +%s)
  timeout -s KILL "$t" "$@" > "$out/$name.log" 2>&1
  local r=$?
  if [ "$name" = trace ]; then
    grep -E "^== trace|^\| |per-layer|SM clock|PASS|FAIL|^error|panicked" "$out/$name.log" | cut -c1-400
  else
    sed -n '/==== summary ====/,$p' "$out/$name.log" | cut -c1-400
    grep -E "^error|panicked" "$out/$name.log" | head -5
  fi
  echo "$name exit: $r after $(( $(date +%s) - t0 ))s"
  [ $r = 0 ] || { rc=1; tail -n 8 "$out/$name.log" | cut -c1-400; }
}
for s in ${STEPS:-kernel_check bench trace correctness prefill}; do
  case $s in
    kernel_check) step kernel_check 120 "$bin" kernel-check --kernel "$check_kernel" --shapes "$shapes" --gen "${RACE_TOKENS:-1000}" ;;
    bench) step bench ${BENCH_LIMIT_S:-200} "$bin" bench --variants "$bench_variants" --shapes "$shapes" --runs "${RUNS:-3}" ;;
    trace) step trace 110 "$bin" trace --shapes "$shapes" --variants "$trace_variants" --runs "${RUNS:-3}" ;;
    correctness) step correctness 150 "$bin" correctness --quick --kernel "$correctness_kernel" ;;
    prefill) step prefill 90 "$bin" prefill --quick --shapes smollm2-135m ;;
    *) echo "unknown step $s"; rc=1 ;;
  esac
done
echo "next_session: $([ $rc = 0 ] && echo all steps passed || echo SOME STEPS FAILED) in $(( $(date +%s) - start ))s"
exit $rc
