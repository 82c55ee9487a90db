#!/usr/bin/env bash
# The real default model on the GPU host, through the `peregrine` binary itself, for
# both GPU weight forms (bf16 converted at load; auto, Q4_1 streamed natively): greedy
# tokens on CUDA vs the CPU float32 reference for several prompts, and `serve --device
# cuda` answering a streamed /api/generate and /v1/completions (serve_check.py: framing,
# decode tok/s from timings). Run from the GPU kit (scripts/gpu/kit.sh run model): needs
# bin/peregrine beside this script's folder and the model at $MODEL (joined from its
# parts by the kit: the model is over one call's carry).
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=${PEREGRINE_BIN:-$PWD/bin/peregrine}
model=${MODEL:-/tmp/model.gguf}
out=${OUT:-gpu-logs}; mkdir -p "$out"
[ -x "$bin" ] && [ -f "$model" ] || { echo "need $bin and $model"; exit 1; }
export PEREGRINE_CUBIN_CACHE=/tmp/cubins
prompts=("def quicksort(arr):" "fn main() {" "#include <stdio.h>
int main(void) {" "The capital of France is")
fail=0
for w in bf16 auto; do
echo "== greedy, 32 tokens, --gpu-weights $w: CUDA vs CPU float32 reference"
for i in "${!prompts[@]}"; do
  p=${prompts[$i]}
  "$bin" generate --device cuda --gpu-weights $w --model "$model" --prompt "$p" --max-tokens 32 --ignore-eos --json > "$out/cuda_${w}_$i.json" 2>>"$out/cuda.log"
  [ -f "$out/cpu_$i.json" ] || PEREGRINE_CPU_RUNTIME=reference "$bin" generate --device cpu --model "$model" --prompt "$p" --max-tokens 32 --ignore-eos --json > "$out/cpu_$i.json" 2>>"$out/cpu.log"
  python3 - "$out/cuda_${w}_$i.json" "$out/cpu_$i.json" $i <<'PY' || fail=1
import json, sys
g, c = (json.load(open(f)) for f in sys.argv[1:3])
a, b = g["token_ids"], c["token_ids"]
same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
t = g["timings"]
print(f"prompt {sys.argv[3]}: equal prefix {same}/{len(b)}  cuda decode {t['predicted_per_second']:.0f} tok/s  ttft {t['ttft_ms']:.1f} ms  | {g['text'][:60]!r}")
sys.exit(0 if same == len(b) else 1)
PY
done
echo "== serve --device cuda --gpu-weights $w: streamed /api/generate and /v1/completions"
"$bin" serve --device cuda --gpu-weights $w --model "$model" --port 18090 --dist /nonexistent --data-dir /tmp/pdata > "$out/serve_$w.log" 2>&1 &
pid=$!
for _ in $(seq 120); do curl -sf localhost:18090/health >/dev/null && break; sleep 0.5; done
curl -s localhost:18090/api/info; echo
python3 scripts/gpu/serve_check.py 18090 "$w" || fail=1
kill $pid; wait $pid 2>/dev/null
grep -iE "cuda|using|weights" "$out/serve_$w.log" | head -3
done
echo "real model check: $([ $fail = 0 ] && echo PASS || echo FAIL)"
