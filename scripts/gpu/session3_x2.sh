#!/usr/bin/env bash
# One device call on `nvidia-h200-x2` for session 3's kernel (v4: staging, residual in
# shared memory, 4-row LM head, staged attention): single-GPU checks and bench on GPU 0
# (next_session.sh from .carry/next), then tensor parallelism from .carry/tp: the TP=2
# correctness + race check (tp_check.sh), `peregrine bench --tp 1,2` with v4 and with
# PEREGRINE_KERNEL=v3 (the previous kernel), and the phase trace of rank 0 at TP=2
# (standard and DTP). Build first: scripts/gpu/build_next.sh and
# SHAPES=qwen2.5-coder-1.5b,dtp-2b scripts/gpu/build_tp.sh (then precompile-tp with
# PEREGRINE_KERNEL=v3 and --variants v4+trace into .carry/tp/cubins).
#   run(command="bash scripts/gpu/session3_x2.sh", carry=[".carry/next", ".carry/tp"], kind="nvidia-h200-x2")
#   env: OUT, STEPS (default "single tp_check bench bench_v3 trace_tp"), RUNS (3)
set -uo pipefail
out=${OUT:-gpu-logs}; mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 PEREGRINE_CUBIN_CACHE=$PWD/.carry/tp/cubins
shapes=qwen2.5-coder-1.5b,dtp-2b
rc=0
step() { # name limit cmd...: one step under timeout, log kept, tail printed
  local name=$1 t=$2; shift 2
  echo "== $name"
  timeout -s KILL "$t" "$@" > "$out/$name.log" 2>&1
  local r=$?
  grep -vE "Writing model shards|original_max_position|^PASS tiny|sampling \[" "$out/$name.log" | tail -n "${TAIL:-40}" | cut -c1-400
  echo "$name exit: $r"
  [ $r = 0 ] || rc=1
}
for s in ${STEPS:-single tp_check bench bench_v3 trace_tp}; do
  case $s in
    single) CARRY=.carry/next OUT=$out/single DEADLINE_S=200 STEPS="kernel_check bench trace" RACE_TOKENS=1000 \
              PEREGRINE_CUBIN_CACHE=$PWD/.carry/next/cubins timeout -s KILL 230 bash .carry/next/scripts/gpu/next_session.sh | grep -v '^PASS tiny' | cut -c1-300 || rc=1 ;;
    tp_check) step tp_check 150 .carry/tp/gpu_check tp --shapes qwen2.5-coder-1.5b --quick ;;
    bench) step bench 200 .carry/tp/peregrine bench --device cuda --shape "$shapes" --tp 1,2 --runs "${RUNS:-3}" ;;
    bench_v3) PEREGRINE_KERNEL=v3 step bench_v3 200 .carry/tp/peregrine bench --device cuda --shape "$shapes" --tp 1,2 --runs "${RUNS:-3}" ;;
    trace_tp) TAIL=60 step trace_tp 120 .carry/tp/gpu_check trace --tp 2 --shapes "$shapes" --variants v4 --runs 2 ;;
    *) echo "unknown step $s"; rc=1 ;;
  esac
done
echo "session3_x2: $([ $rc = 0 ] && echo all steps passed || echo SOME STEPS FAILED)"
exit $rc
