#!/usr/bin/env bash
# Continuous batching side by side: Peregrine's server and llama.cpp's llama-server on
# the default model with the same threads and the same number of parallel sequences,
# measured by concurrent_streams.py (aggregate and per-stream decode tok/s, p50/p95
# TTFT at 1, 2, 4, 8 streaming clients, then the TTFT of a request arriving while 3
# stream). Servers run one after another, ROUNDS times alternately (this machine's
# timing drifts; compare within a round).
#
# usage: scripts/bench/batching_vs_llamacpp.sh [ROUNDS] > table.md
#   env: PEREGRINE   the release binary (default $CARGO_TARGET_DIR/release/peregrine)
#        LLAMA_SERVER   llama-server (default /tmp/llama-server; scripts/bench/build_llama_server.sh)
#        THREADS (2), SLOTS (4: Peregrine --max-batch, llama-server --parallel),
#        CLIENTS (1,2,4,8), REQUESTS (2 per client), MAX_TOKENS (128)
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROUNDS=${1:-1}
PEREGRINE=${PEREGRINE:-${CARGO_TARGET_DIR:-target}/release/peregrine}
LLAMA_SERVER=${LLAMA_SERVER:-/tmp/llama-server}
MODEL=${PEREGRINE_DEFAULT_MODEL:-$HOME/.cache/peregrine/models/SmolLM2-135M-Instruct.Q4_1.gguf}
THREADS=${THREADS:-2}
SLOTS=${SLOTS:-4}
CLIENTS=${CLIENTS:-1,2,4,8}
REQUESTS=${REQUESTS:-2}
MAX_TOKENS=${MAX_TOKENS:-128}
PORT=18431

wait_ready() {
    for _ in $(seq 1 300); do
        curl -sf "http://127.0.0.1:$PORT/v1/models" >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    echo "server on port $PORT did not come up" >&2
    return 1
}

measure() { # label, then the server command
    local label=$1
    shift
    "$@" >"/tmp/batching-$label.log" 2>&1 &
    local pid=$!
    wait_ready
    python3 "$HERE/concurrent_streams.py" --url "http://127.0.0.1:$PORT" --clients "$CLIENTS" \
        --requests-per-client "$REQUESTS" --max-tokens "$MAX_TOKENS" --label "$label"
    python3 "$HERE/concurrent_streams.py" --url "http://127.0.0.1:$PORT" --max-tokens "$MAX_TOKENS" --label "$label" --arrival
    kill "$pid"
    wait "$pid" 2>/dev/null || true
}

echo "model $(basename "$MODEL"), $THREADS threads, $SLOTS parallel sequences, $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
for round in $(seq 1 "$ROUNDS"); do
    echo "## round $round"
    measure "peregrine-b$SLOTS" "$PEREGRINE" serve --model "$MODEL" --device cpu --cpu-threads "$THREADS" \
        --max-batch "$SLOTS" --port "$PORT" --dist /nonexistent
    measure "peregrine-b1" "$PEREGRINE" serve --model "$MODEL" --device cpu --cpu-threads "$THREADS" \
        --max-batch 1 --port "$PORT" --dist /nonexistent
    measure "llama-server-np$SLOTS" "$LLAMA_SERVER" -m "$MODEL" -t "$THREADS" -tb "$THREADS" -np "$SLOTS" \
        -c $((SLOTS * 2048)) --port "$PORT" --host 127.0.0.1
done
