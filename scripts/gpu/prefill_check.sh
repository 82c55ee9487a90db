#!/usr/bin/env bash
# Batched prefill on the GPU host in one device call (no Rust there: build with
# scripts/gpu/build_prefill.sh, carry its folder): TTFT(512) of the four benchmark
# shapes batched and token by token, batched vs token-by-token logits and greedy
# tokens, compute-sanitizer memcheck with a multi-chunk prompt, and the quick
# correctness suite. Run from the repository root: bash $CARRY/scripts/gpu/prefill_check.sh
set -uo pipefail
C=${CARRY:-.carry/prefill}
out=${OUT:-gpu-logs}; mkdir -p "$out"
export PEREGRINE_CUBIN_CACHE=$PWD/$C/cubins NCCL_NVLS_ENABLE=0
for f in "$C/peregrine" "$C/gpu_check"; do [ -x "$f" ] || { echo "missing $f: run scripts/gpu/build_prefill.sh first"; exit 1; }; done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$out/gpu.txt"
ls /usr/local/cuda/lib64/libcublas*.so* /usr/local/lib/python3*/dist-packages/nvidia/cu13/lib/libcublas*.so* 2>/dev/null | head -4 | tee -a "$out/gpu.txt"
rc=0
step() { echo "== $1"; shift; timeout -s KILL "$@"; local r=$?; echo "exit $r"; [ $r = 0 ] || rc=1; }
step "prefill: batched vs token by token" "${PREFILL_TIMEOUT:-120}" "$C/gpu_check" prefill > "$out/prefill.log" 2>&1
sed -n '/==== summary ====/,$p' "$out/prefill.log"; grep -E "^error|panicked" "$out/prefill.log" | head -5
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
step "compute-sanitizer memcheck (tiny shape, 40-token prompt, 16-row chunks)" "${SAN_TIMEOUT:-90}" "$san" --tool memcheck --error-exitcode 9 "$C/gpu_check" sanitize > "$out/sanitize.log" 2>&1
grep -E "ERROR SUMMARY|sanitize run|Invalid" "$out/sanitize.log" | head -5
step "peregrine bench (TTFT 512 batched and token by token)" "${BENCH_TIMEOUT:-200}" "$C/peregrine-bench" --device cuda --shape "${SHAPES:-smollm2-135m,llama-3.2-1b,qwen2.5-coder-1.5b,smollm2-1.7b}" > "$out/bench.log" 2>&1
grep -vE "Writing" "$out/bench.log" | cut -c1-900
step "gpu_check correctness --quick" "${CHECK_TIMEOUT:-120}" "$C/gpu_check" correctness --quick > "$out/check.log" 2>&1
sed -n '/==== summary ====/,$p' "$out/check.log" | grep -E "FAIL|checks failed"
exit $rc
