#!/usr/bin/env bash
# Variants compared within one GPU call, as the method asks: each `peregrine-bench`
# binary under .carry/NAME/ (built here from the commit to compare, then copied there)
# runs the same command one after the other; each binary's table goes to $OUT/bench_NAME.log.
# usage (on the GPU host, .carry carried):
#   scripts/gpu/ab_bench.sh "NAME1 NAME2 ..." [peregrine-bench options]
#   e.g. scripts/gpu/ab_bench.sh "base new" --threads 512 --runs 2 --shape llama-3.2-1b --weights q8_0,q4_k_m
# Here: `git stash` (or check out the base), `cargo build --release -p peregrine-bench`, copy
# $CARGO_TARGET_DIR/release/peregrine-bench to .carry/base/, likewise .carry/new/ (~12 MB each).
set -uo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { echo "usage: $0 \"NAME ...\" [peregrine-bench options]" >&2; exit 2; }
names=$1; shift
out=${OUT:-/tmp}
export PEREGRINE_CUBIN_CACHE=${PEREGRINE_CUBIN_CACHE:-/tmp/cubins} NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
rc=0
for name in $names; do
  bin=.carry/$name/peregrine-bench
  [ -x "$bin" ] || { echo "missing $bin"; rc=1; continue; }
  timeout -s KILL "${BENCH_TIMEOUT:-300}" "$bin" --device cuda "$@" > "$out/bench_$name.log" 2>&1
  status=$?
  echo "== $name (exit $status)"
  grep -E '^\| ' "$out/bench_$name.log"
  [ $status = 0 ] || rc=1
done
exit $rc
