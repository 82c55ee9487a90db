#!/usr/bin/env bash
# Coverage checks of issues 7 and 8 still unrun after session 2, in one call on the
# 2-GPU host (no Rust there; scripts/gpu/build_cover.sh fills the carry folder):
#   GPU 0: `peregrine bench --device cuda` on llama-3.2-1b and smollm2-135m with the
#          default short prompt (32 + 256) and a long one (8000 + 128: the batched
#          prefill fills the KV cache, decode then attends over ~8k positions);
#   GPU 1, meanwhile, side by side: compute-sanitizer memcheck of `gpu_check sanitize`
#          (the tensor-core prefill attention included), and a random-weight HF
#          directory of the smollm2-1.7b shape with the default model's tokenizer;
#   both:  `peregrine serve --tp 2` on that directory, checked with curl (/api/info, a
#          streamed /v1/completions), then transformers_check.py on smollm2-1.7b at TP 1
#          and 2 if the deadline leaves room.
# Every step runs under `timeout -s KILL`, bounded by DEADLINE seconds from the start;
# logs go to $OUT (see pack below).
#   env: BIN (carry folder, default: two levels above this script), DEADLINE (default 300),
#        RUNS (bench, default 3), LONG_PROMPT (default 8000), STEPS (default: bench sanitize serve transformers)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$(cd "$here/../.." && pwd)}
out=${OUT:-gpu-logs}
# Step logs go to $logs; on exit the main ones are copied to $out and all of them packed
# into $out/cover-logs.tgz ($OUT brings back at most 8 files).
logs=/tmp/cover-logs
rm -rf "$logs"
mkdir -p "$out" "$logs"
pack() {
  for f in bench_short.log bench_long.log sanitize.log sse.txt info.json transformers_check.json; do
    [ -f "$logs/$f" ] && cp "$logs/$f" "$out/"
  done
  tar czf "$out/cover-logs.tgz" -C "$(dirname "$logs")" "$(basename "$logs")"
}
trap pack EXIT
export PEREGRINE_CUBIN_CACHE=$bin/cubins NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
deadline=$((SECONDS + ${DEADLINE:-300}))
steps=" ${STEPS:-bench sanitize serve transformers} "
runs=${RUNS:-3}
long=${LONG_PROMPT:-8000}
model=/tmp/cover-smollm2-1.7b
for f in peregrine gpu_check hf_score; do [ -x "$bin/$f" ] || { echo "missing $bin/$f: run scripts/gpu/build_cover.sh first"; exit 1; }; done
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$logs/gpu.txt"
rc=0
has() { [[ $steps == *" $1 "* ]]; }
left() { echo $((deadline - SECONDS)); }
# run NAME LIMIT CMD...: CMD under timeout -s KILL min(LIMIT, time left), log to $out/NAME.log.
run() {
  local name=$1 t=$2
  shift 2
  local l
  l=$(left)
  [ "$l" -lt "$t" ] && t=$l
  if [ "$t" -lt 10 ]; then
    echo "$name: skipped (deadline)" | tee "$logs/$name.log"
    return 1
  fi
  local t0=$SECONDS
  timeout -s KILL "$t" "$@" > "$logs/$name.log" 2>&1
  local r=$?
  echo "$name: exit $r after $((SECONDS - t0)) s (limit $t s)" >> "$logs/$name.log"
  return $r
}

# GPU 1 in the background, side by side: the sanitizer and the served model's directory.
sanitize() {
  local san
  san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  CUDA_VISIBLE_DEVICES=1 run sanitize 200 "$san" --tool memcheck --error-exitcode 9 "$bin/gpu_check" sanitize
}
serve_model() {
  CUDA_VISIBLE_DEVICES=1 run serve_model 120 python3 - "$here" "$bin/hf_score" "$model" "$bin/tokenizer" <<'PY'
import os, shutil, sys, time
sys.path.insert(0, sys.argv[1])
import torch
from transformers_check import build_model, preset_config
t0 = time.time()
model = build_model(preset_config(sys.argv[2], "smollm2-1.7b"), "cuda", 7).to(torch.bfloat16)
model.save_pretrained(sys.argv[3])
for f in os.listdir(sys.argv[4]):
    shutil.copy(os.path.join(sys.argv[4], f), sys.argv[3])
print(f"{sys.argv[3]}: {sorted(os.listdir(sys.argv[3]))} in {time.time() - t0:.1f}s")
PY
}
bg=()
if has sanitize; then
  sanitize &
  bg+=($!)
fi
if has serve; then
  serve_model &
  bg+=($!)
fi

if has bench; then
  echo "== bench, GPU 0: default prompt, then a ${long}-token prompt"
  CUDA_VISIBLE_DEVICES=0 run bench_short 150 "$bin/peregrine" bench --device cuda --shape llama-3.2-1b,smollm2-135m --runs "$runs" || rc=1
  grep -vE "^\s*$" "$logs/bench_short.log" | cut -c1-400 | tail -n 20
  CUDA_VISIBLE_DEVICES=0 run bench_long 150 "$bin/peregrine" bench --device cuda --shape llama-3.2-1b,smollm2-135m --runs "$runs" --prompt "$long" --gen 128 || rc=1
  grep -vE "^\s*$" "$logs/bench_long.log" | cut -c1-400 | tail -n 20
fi
[ ${#bg[@]} = 0 ] || wait "${bg[@]}"
if has sanitize; then
  echo "== compute-sanitizer memcheck (gpu_check sanitize)"
  grep -E "ERROR SUMMARY|sanitize|batched prefill|Invalid|exit" "$logs/sanitize.log" | cut -c1-400 | head -n 20
  grep -q "ERROR SUMMARY: 0 errors" "$logs/sanitize.log" || rc=1
fi

if has serve; then
  echo "== serve --tp 2 + curl"
  tail -n 2 "$logs/serve_model.log"
  port=18091
  l=$(left)
  timeout -s KILL "$((l > 10 ? l : 10))" "$bin/peregrine" serve --device cuda --tp 2 --model "$model" --port $port --dist /nonexistent --data-dir /tmp/cover-data > "$logs/serve.log" 2>&1 &
  serve_pid=$!
  ready=0
  for _ in $(seq 180); do
    curl -sf --max-time 2 localhost:$port/api/info > "$logs/info.json" 2>/dev/null && { ready=1; break; }
    kill -0 $serve_pid 2>/dev/null || break
    sleep 0.5
  done
  echo "ready: $ready after $SECONDS s since the script's start"
  if [ $ready = 1 ]; then
    cat "$logs/info.json"; echo
    id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["model_id"])' "$logs/info.json")
    curl -sN --max-time 60 localhost:$port/v1/completions -H 'content-type: application/json' \
      -d '{"model":"'"$id"'","prompt":"def add(a, b):","max_tokens":24,"stream":true,"stream_options":{"include_usage":true}}' > "$logs/sse.txt"
    echo "curl exit $?: $(grep -c '^data: ' "$logs/sse.txt") data lines, $(grep -c '"text"' "$logs/sse.txt") with text, last: $(grep '^data: ' "$logs/sse.txt" | tail -n 1)"
    head -c 600 "$logs/sse.txt"; echo; echo ...; tail -n 4 "$logs/sse.txt" | cut -c1-600
    grep -q '^data: \[DONE\]' "$logs/sse.txt" || rc=1
    curl -s --max-time 60 localhost:$port/v1/completions -H 'content-type: application/json' \
      -d '{"model":"'"$id"'","prompt":"def add(a, b):","max_tokens":24}' > "$logs/completion.json"
    echo "non-streamed: $(head -c 600 "$logs/completion.json")"
  else
    rc=1
  fi
  kill $serve_pid 2>/dev/null
  wait $serve_pid 2>/dev/null
  grep -iE "cuda|model|tp|error|listening" "$logs/serve.log" | cut -c1-400 | head -n 8
  rm -rf "$model"
fi

if has transformers; then
  if [ "$(left)" -ge 100 ]; then
    echo "== transformers_check.py smollm2-1.7b, TP 1 and 2"
    run transformers 240 python3 "$here/transformers_check.py" --bin "$bin/hf_score" --shapes smollm2-1.7b --tp 1,2 --out "$logs" || rc=1
    grep -vE "Writing model shards|original_max_position" "$logs/transformers.log" | cut -c1-600 | tail -n 8
  else
    echo "transformers: skipped, $(left) s left before the deadline"
  fi
fi
echo "total $SECONDS s, exit $rc"
exit $rc
