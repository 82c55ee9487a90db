#!/usr/bin/env bash
# The engine's float32 CPU reference of TP / DTP (dtp_ref) against the PyTorch reference
# (dtp_reference.py) on small exported models, lanes 2, 4, 8: float32 vs float32, so the
# bound is strict (default 1e-5), plus the PyTorch invariants (selftest). Runs on the CPU
# machine (torch in a venv) or on the GPU host (carried dtp_ref binary); no GPU needed.
#
# Usage: DTP_REF=path/to/dtp_ref PYTHON=python3 scripts/gpu/dtp_crosscheck.sh [OUTDIR]
# Env: LANES (default 2,4,8), SEQS (4), LEN (64), TOL (1e-5).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${DTP_REF:-dtp_ref}
py=${PYTHON:-python3}
out=${1:-${OUT:-/tmp/pg-dtp-crosscheck}}
lanes=${LANES:-2,4,8}
seqs=${SEQS:-4}
len=${LEN:-64}
tol=${TOL:-1e-5}
work=$(mktemp -d /tmp/pg-dtp-xc.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
ref="$here/dtp_reference.py"
fail=0

echo "== PyTorch invariants (selftest)"
"$py" "$ref" selftest --lanes "$lanes" > "$out/selftest.json" || fail=1

# name | export flags | DTP variants (score spec → compare flags)
# llama-like: the dtp-2b family scaled down (8 heads / 4 KV heads: replicated at 8 lanes).
# qwen2-like: q/k/v biases, untied head, 2 KV heads, a vocabulary that does not divide by 8.
models=(
  "dtp-small|--shape dtp-2b --layers 6 --hidden 128 --ffn 256 --heads 8 --kv-heads 4 --head-dim 16 --vocab 512 --seed 21"
  "qwen-small|--shape qwen2.5-coder-1.5b --layers 4 --hidden 96 --ffn 192 --heads 8 --kv-heads 2 --head-dim 12 --vocab 300 --seed 22 --dtp none"
)
variants=("delay=2,early=present" "delay=2,early=none" "delay=1,early=present" "delay=0,early=present")

row() { echo "| $1 | $2 | $3 | $4 |" | tee -a "$out/crosscheck.md"; }
echo "| model | mode | lanes | Rust vs PyTorch ‖Δ‖/‖ref‖ (float32), top-1 |" > "$out/crosscheck.md"
echo "| --- | --- | --- | --- |" >> "$out/crosscheck.md"
for m in "${models[@]}"; do
  name=${m%%|*}
  flags=${m#*|}
  dir="$work/$name"
  # shellcheck disable=SC2086
  "$bin" export $flags --out "$dir" > "$out/$name.export.json"
  vocab=$("$py" -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$dir/config.json")
  "$py" "$ref" tokens --vocab "$vocab" --seqs "$seqs" --len "$len" --out "$dir/tokens.json"
  cases=("plain 1 -" )
  for l in ${lanes//,/ }; do
    cases+=("standard $l -")
    for v in "${variants[@]}"; do cases+=("dtp $l $v"); done
  done
  for c in "${cases[@]}"; do
    read -r mode l spec <<< "$c"
    rust_mode=$mode; [ "$mode" = plain ] && rust_mode=unsharded
    extra=(); cmp=()
    if [ "$spec" != - ]; then
      extra=(--dtp "$spec")
      d=${spec#delay=}; d=${d%%,*}; e=${spec#*early=}
      cmp=(--delay "$d" --early "$e")
    fi
    if ! "$bin" score --model "$dir" --tokens "$dir/tokens.json" --out "$dir/ours.f32" --mode "$rust_mode" --lanes "$l" "${extra[@]}" > /dev/null; then
      row "$name" "$mode $spec" "$l" "dtp_ref failed"; fail=1; continue
    fi
    if res=$("$py" "$ref" compare --model "$dir" --tokens "$dir/tokens.json" --ours "$dir/ours.f32" --mode "$mode" --lanes "$l" "${cmp[@]}" --strict "$tol"); then
      verdict=PASS
    else
      verdict=FAIL; fail=1
    fi
    echo "$res" >> "$out/crosscheck.jsonl"
    fig=$("$py" -c "import json,sys; r=json.loads(sys.argv[1]); print(f\"{r['ours_rel_err']:.2e}, {100*r['ours_top1']:.2f}%\")" "$res")
    row "$name" "$mode ${spec/-/}" "$l" "$fig $verdict"
  done
done
[ "$fail" = 0 ] && echo "crosscheck: all passed" || echo "crosscheck: FAILED"
exit "$fail"
