#!/usr/bin/env bash
# Issue 9 on an 8×H200 host (`nvidia-h200-x8`; a 4-GPU host runs the TP ≤ 4 parts):
# correctness of standard TP and DTP at TP=4 and TP=8, then `peregrine bench --tp 1,2,4,8`.
# Two device calls (10 minutes each at most): PART=check, then PART=bench.
# Build here first: scripts/gpu/build_tp8.sh fills .carry/tp8 (peregrine, gpu_check,
# hf_score, dtp_ref and these scripts); weights are built on the host from seeds.
#
#   PART=check   1. gpu_check tp --tp N (TP=N vs one GPU: logits, greedy, sampling, stop,
#                   cancel, chaos race check on each rank) for N = 4, 8
#                2. transformers_check.py --tp 1,2,4,8 (vs transformers float32/bf16)
#                3. DTP and standard TP of a bf16 dtp-2b model through the real HF loader
#                   (hf_score --tp N) vs scripts/gpu/dtp_reference.py (PyTorch), N = 4, 8
#   PART=dtp     step 3 only (DTP and standard TP vs the PyTorch reference)
#   PART=bench   4. peregrine bench --tp 1,2,4,8 on llama-3.2-1b, smollm2-1.7b, dtp-2b (standard)
#                5. the same for dtp-2b with DTP (8 lanes at TP=8)
#
# Flags it uses (all on main): `--tp LIST` / `--gpus` and `--dtp SPEC` on bench,
# `hf_score score --tp N` (DTP when config.json has a `dtp` block, docs/dtp.md),
# `transformers_check.py --tp LIST`, `gpu_check tp --tp N`. Only 2-GPU runs have been
# made (2026-11-30): nothing here has run at TP 4 or 8.
#   env: BIN (.carry/tp8), PART (check|bench|all), TPS (1,2,4,8), CHECK_TPS (4,8),
#        RUNS (5), RACE_TOKENS (2000), DTP_FLAG, OUT
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-.carry/tp8}
out=${OUT:-gpu-logs}; mkdir -p "$out"
part=${PART:-check}
tps=${TPS:-1,2,4,8}
check_tps=${CHECK_TPS:-4,8}
dtp_flag=${DTP_FLAG:---dtp delay=2,early=present}
export PEREGRINE_CUBIN_CACHE=${PEREGRINE_CUBIN_CACHE:-/tmp/pg-cubins} NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
for f in peregrine gpu_check hf_score dtp_ref; do [ -x "$bin/$f" ] || { echo "missing $bin/$f: run scripts/gpu/build_tp8.sh first"; exit 1; }; done
gpus=$(nvidia-smi -L | wc -l)
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$out/gpu.txt"
nvidia-smi topo -m | tee -a "$out/gpu.txt"
# Degrees this host can run (a 4-GPU host skips 8 and says so).
fit() { local keep=(); for t in ${1//,/ }; do if [ "$t" -le "$gpus" ]; then keep+=("$t"); else echo "skipped: TP=$t needs $t GPUs, this host has $gpus" >&2; fi; done; (IFS=,; echo "${keep[*]}"); }
tps=$(fit "$tps"); check_tps=$(fit "$check_tps")
rc=0
step() { # name timeout cmd...: one step, its log kept, its tail printed
  local name=$1 t=$2; shift 2
  echo "== $name"
  timeout -s KILL "$t" "$@" > "$out/$name.log" 2>&1
  local r=$?
  grep -vE "Writing model shards|original_max_position" "$out/$name.log" | tail -n "${TAIL:-30}" | cut -c1-600
  echo "$name exit: $r"
  [ $r = 0 ] || rc=1
}

if [ "$part" = check ] || [ "$part" = all ]; then
  quick=(); [ "${RACE_TOKENS:-2000}" -lt 1000 ] && quick=(--quick)
  for t in ${check_tps//,/ }; do
    step "gpu_check_tp$t" "${TP_CHECK_TIMEOUT:-150}" "$bin/gpu_check" tp --tp "$t" --shapes llama-3.2-1b,smollm2-1.7b "${quick[@]}"
  done
  step transformers "${CHECK_TIMEOUT:-150}" python3 "$here/transformers_check.py" --bin "$bin/hf_score" --shapes llama-3.2-1b,smollm2-1.7b --tp "1,$check_tps" --seqs 8 --len 256 --out "$out"
fi

if [ "$part" = check ] || [ "$part" = all ] || [ "$part" = dtp ]; then
  # DTP: one bf16 dtp-2b model written twice, with its dtp block (the engine runs DTP)
  # and without (the engine runs the same weights as standard TP).
  work=/tmp/pg-tp8; rm -rf "$work"; mkdir -p "$work"
  step export_dtp 120 "$bin/dtp_ref" export --shape dtp-2b --dtype bf16 --out "$work/dtp-2b"
  step export_std 120 "$bin/dtp_ref" export --shape dtp-2b --dtype bf16 --dtp none --out "$work/dtp-2b-std"
  python3 "$here/dtp_reference.py" tokens --vocab 32768 --seqs 8 --len 256 --out "$work/tokens.json"
  for t in ${check_tps//,/ }; do
    step "score_dtp_tp$t" 120 "$bin/hf_score" score --model "$work/dtp-2b" --tokens "$work/tokens.json" --out "$work/dtp.tp$t.f32" --tp "$t"
    step "compare_dtp_tp$t" 200 python3 "$here/dtp_reference.py" compare --model "$work/dtp-2b" --tokens "$work/tokens.json" --ours "$work/dtp.tp$t.f32" --mode dtp --lanes "$t"
    step "score_std_tp$t" 120 "$bin/hf_score" score --model "$work/dtp-2b-std" --tokens "$work/tokens.json" --out "$work/std.tp$t.f32" --tp "$t"
    step "compare_std_tp$t" 200 python3 "$here/dtp_reference.py" compare --model "$work/dtp-2b-std" --tokens "$work/tokens.json" --ours "$work/std.tp$t.f32" --mode standard --lanes "$t"
  done
  rm -rf "$work"
fi

if [ "$part" = bench ] || [ "$part" = all ]; then
  step bench_standard "${BENCH_TIMEOUT:-360}" "$bin/peregrine" bench --device cuda --shape llama-3.2-1b,smollm2-1.7b,dtp-2b --tp "$tps" --runs "${RUNS:-5}"
  # shellcheck disable=SC2086
  step bench_dtp "${BENCH_TIMEOUT:-200}" "$bin/peregrine" bench --device cuda --shape dtp-2b --tp "$tps" $dtp_flag --runs "${RUNS:-5}"
fi
echo "tp8_run ($part): $([ $rc = 0 ] && echo all steps passed || echo SOME STEPS FAILED)"
exit $rc
