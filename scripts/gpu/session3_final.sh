#!/usr/bin/env bash
# Session 3's last device call, on `nvidia-h200-x2`: fuse_down and the staging rule on
# GPU 0 (next_session.sh: kernel-check of v4+fuse-down against the default kernel with
# the chaos race check, bench v3 / v4 / v4+fuse-down, correctness vs the CPU float32
# reference), then `peregrine bench --tp 2` for qwen2.5-coder-1.5b and dtp-2b with the
# default kernel. Build first into .carry/s3 (gpu_check, peregrine, cubins: see
# docs/perf-notes.md "Session 3").
#   run(command="bash .carry/s3/scripts/gpu/session3_final.sh", carry=[".carry/s3"], kind="nvidia-h200-x2")
set -uo pipefail
out=${OUT:-gpu-logs}; mkdir -p "$out"
C=.carry/s3
export NCCL_NVLS_ENABLE=0 PEREGRINE_CUBIN_CACHE=$PWD/$C/cubins
rc=0
CARRY=$C OUT=$out/single DEADLINE_S=${SINGLE_S:-230} STEPS="kernel_check bench correctness" RACE_TOKENS=1000 \
  CHECK_KERNEL=v4+fuse-down BENCH_VARIANTS=v3,v4,v4+fuse-down timeout -s KILL 260 bash $C/scripts/gpu/next_session.sh | grep -v '^PASS tiny' | cut -c1-300 || rc=1
echo "== bench --tp 2"
timeout -s KILL ${TP_S:-150} $C/peregrine bench --device cuda --shape qwen2.5-coder-1.5b,dtp-2b --tp 2 --runs 3 > "$out/bench_tp2.log" 2>&1 || rc=1
grep -E '^\| ' "$out/bench_tp2.log"; tail -n 3 "$out/bench_tp2.log" | cut -c1-300
echo "session3_final: $([ $rc = 0 ] && echo all steps passed || echo SOME STEPS FAILED)"
exit $rc
