#!/usr/bin/env bash
# Issue 8 (tensor parallelism) in one device call on the 2-GPU host (no Rust there):
# `gpu_check tp` (TP=2 vs one GPU: scored logits, greedy, seeded sampling with top
# log-probs, stop token, cancellation, chaos race check on each rank), then
# `peregrine-bench --tp 1,2`, then transformers_check.py --tp 1,2 (TP=1 and TP=2 vs
# transformers float32 / bf16). Build here first (BIN holds peregrine, gpu_check and
# hf_score; scripts/gpu/build_tp.sh fills .carry/tp). Every step runs under
# `timeout -s KILL`; logs go to $OUT.
# A CHECK_SHAPES Laneformer preset (laneformer-2b) also runs its own lanes, folded onto
# the GPUs, in `tp_check` (scored logits vs the CPU lane reference, chaos race check on
# each rank); the transformers step takes ordinary presets only.
# On a one-GPU machine, PEREGRINE_TP_GPUS=0,0 PEREGRINE_TP_SHARE_GPU=1 runs both ranks
# there (`tp_check` only: a share of the SMs each, for the exchange logic, not speed).
#   env: BIN (default .carry/tp), SHAPES (bench), CHECK_SHAPES (gpu_check / transformers),
#        RACE_TOKENS (default 2000), RUNS (default 5), STEPS (default: tp_check bench transformers),
#        TRACE_SHAPES / TRACE_VARIANTS (default default,default+tp-evict,default+tp-waves) for the
#        `trace` step (`gpu_check trace --tp 2`, rank 0's phase spans and per-layer sum);
#        build_tp.sh's VARIANTS must hold those kernels and their `+trace` twins
#        (e.g. VARIANTS=default+tp-evict,default+trace,default+tp-evict+trace). `variants`: `gpu_check bench --tp 2` of
#        BENCH_VARIANTS (default default,default+tp-evict,default+tp-waves,default+tp-evict+tp-waves,default+threads448,default+threads384) on VARIANT_SHAPES (default qwen2.5-coder-1.5b), every
#        variant's tokens checked against the first's. CHECK_KERNEL (default default, the
#        default kernel): the kernel `tp_check` checks (a variant's race check).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-.carry/tp}
out=${OUT:-gpu-logs}; mkdir -p "$out"
case $bin in /*) cubins=$bin/cubins ;; *) cubins=$PWD/$bin/cubins ;; esac
export PEREGRINE_CUBIN_CACHE=${PEREGRINE_CUBIN_CACHE:-$cubins} NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
shapes=${SHAPES:-qwen2.5-coder-1.5b,smollm2-1.7b,laneformer-2b}
steps=${STEPS:-tp_check bench transformers}
check_shapes=${CHECK_SHAPES:-qwen2.5-coder-1.5b}
for f in "$bin/peregrine" "$bin/gpu_check" "$bin/hf_score"; do [ -x "$f" ] || { echo "missing $f: run scripts/gpu/build_tp.sh first"; exit 1; }; done
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$out/gpu.txt"
nvidia-smi topo -m | tee -a "$out/gpu.txt"
rc=0
step() { # name timeout cmd...: runs one step, keeps its log, prints its tail
  local name=$1 t=$2; shift 2
  echo "== $name"
  timeout -s KILL "$t" "$@" > "$out/$name.log" 2>&1
  local r=$?
  grep -vE "Writing model shards|original_max_position" "$out/$name.log" | tail -n "${TAIL:-40}" | cut -c1-600
  echo "$name exit: $r"
  [ $r = 0 ] || rc=1
}
quick=(); [ "${RACE_TOKENS:-2000}" -lt 1000 ] && quick=(--quick)
for s in $steps; do
  case $s in
    tp_check) step tp_check "${TP_CHECK_TIMEOUT:-200}" "$bin/gpu_check" tp --shapes "$check_shapes" --kernel "${CHECK_KERNEL:-default}" "${quick[@]}" ;;
    # Standard TP at 1 and 2; laneformer-2b also its own lanes folded onto 1 and 2 GPUs.
    bench) step bench "${BENCH_TIMEOUT:-300}" "$bin/peregrine-bench" --device cuda --shape "$shapes" --tp 1,2 --runs "${RUNS:-5}" ;;
    trace) step trace "${TRACE_TIMEOUT:-150}" "$bin/gpu_check" trace --tp 2 --shapes "${TRACE_SHAPES:-qwen2.5-coder-1.5b}" --variants "${TRACE_VARIANTS:-default,default+tp-evict,default+tp-waves}" --runs 3 ;;
    variants) step variants "${BENCH_TIMEOUT:-300}" "$bin/gpu_check" bench --tp 2 --shapes "${VARIANT_SHAPES:-qwen2.5-coder-1.5b}" --variants "${BENCH_VARIANTS:-default,default+tp-evict,default+tp-waves,default+tp-evict+tp-waves,default+threads448,default+threads384}" --runs "${RUNS:-5}" ;;
    transformers) step transformers "${CHECK_TIMEOUT:-180}" python3 "$here/transformers_check.py" --bin "$bin/hf_score" --shapes "$check_shapes" --tp 1,2 --out "$out" ;;
    *) echo "unknown step $s"; rc=1 ;;
  esac
done
exit $rc
