#!/usr/bin/env bash
# Builds scripts/gpu/attn_micro.cu here (the NVRTC venv's nvcc, no GPU needed) into
# .carry/micro/: cycles of the decode attention ops alone (attend_range, attend_own) on
# 9 blocks of 512 threads, head_dim 64, n = 40 / 160 / 288 / 512, and their outputs
# compared. Then, from the repository root:
#   run(command=".carry/micro/attn_micro", carry=[".carry/micro"])
# PROBES=1 also builds attn_micro_probes (per-section stamps of attend_own; each stamp
# adds a global store to block 0's path, so its totals read high).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/env.sh
cu=$(ls -d "$PEREGRINE_CUDA_VENV"/lib/python3*/site-packages/nvidia/cu13 | head -n1)
mkdir -p .carry/micro
flags=(-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Ikernels -DPG_TRACE=0 -L"$cu/lib")
"$cu/bin/nvcc" "${flags[@]}" -o .carry/micro/attn_micro scripts/gpu/attn_micro.cu
[ "${PROBES:-0}" = 1 ] && "$cu/bin/nvcc" "${flags[@]}" -DPROBES -o .carry/micro/attn_micro_probes scripts/gpu/attn_micro.cu
echo "built .carry/micro"
