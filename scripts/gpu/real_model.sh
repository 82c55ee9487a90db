#!/usr/bin/env bash
# The real default model on the GPU host, through the `peregrine` binary itself:
# greedy tokens on CUDA vs the CPU float32 reference for several prompts,
# `generate --device cuda` streaming, and `serve --device auto` answering a streamed
# /v1/completions and /api/info checked with curl. Needs .carry/peregrine and the
# model at $MODEL (joined from parts by the caller: the model is over one call's limit).
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=$PWD/.carry/peregrine
model=${MODEL:-/tmp/model.gguf}
out=${OUT:-gpu-logs}; mkdir -p "$out"
[ -x "$bin" ] && [ -f "$model" ] || { echo "need $bin and $model"; exit 1; }
export PEREGRINE_CUBIN_CACHE=/tmp/cubins
prompts=("def quicksort(arr):" "fn main() {" "#include <stdio.h>
int main(void) {" "The capital of France is")
fail=0
echo "== greedy, 32 tokens: CUDA vs CPU float32 reference"
for i in "${!prompts[@]}"; do
  p=${prompts[$i]}
  "$bin" generate --device cuda --model "$model" --prompt "$p" --max-tokens 32 --ignore-eos --json > "$out/cuda_$i.json" 2>>"$out/cuda.log"
  PEREGRINE_CPU_RUNTIME=reference "$bin" generate --device cpu --model "$model" --prompt "$p" --max-tokens 32 --ignore-eos --json > "$out/cpu_$i.json" 2>>"$out/cpu.log"
  python3 - "$out/cuda_$i.json" "$out/cpu_$i.json" <<'PY' || fail=1
import json, sys
g, c = (json.load(open(f)) for f in sys.argv[1:3])
a, b = g["token_ids"], c["token_ids"]
same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
t = g["timings"]
print(f"prompt {sys.argv[1].split('_')[-1][:-5]}: equal prefix {same}/{len(b)}  cuda decode {t['predicted_per_second']:.0f} tok/s  ttft {t['ttft_ms']:.1f} ms  | {g['text'][:60]!r}")
sys.exit(0 if same == len(b) else 1)
PY
done
echo "== generate --device cuda (streamed text)"
"$bin" generate --device cuda --model "$model" --prompt "def fibonacci(n):" --max-tokens 48 2>&1 | tail -12
echo "== serve --device auto + curl"
"$bin" serve --device auto --model "$model" --port 18090 --dist /nonexistent --data-dir /tmp/pdata > "$out/serve.log" 2>&1 &
pid=$!
for _ in $(seq 60); do curl -sf localhost:18090/health >/dev/null && break; sleep 0.5; done
curl -s localhost:18090/api/info; echo
id=$(curl -s localhost:18090/v1/models | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
curl -sN localhost:18090/v1/completions -H 'content-type: application/json' \
  -d '{"model":"'"$id"'","prompt":"def add(a, b):","max_tokens":16,"stream":true,"stream_options":{"include_usage":true}}' | tail -4
kill $pid; wait $pid 2>/dev/null
grep -iE "cuda|using" "$out/serve.log" | head -3
echo "greedy check: $([ $fail = 0 ] && echo PASS || echo FAIL)"
