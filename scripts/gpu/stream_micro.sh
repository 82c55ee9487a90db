#!/usr/bin/env bash
# Builds scripts/gpu/stream_micro.cu here (the NVRTC venv's nvcc, no GPU needed) into
# .carry/micro/: one streamed matrix phase alone (grid_rows and variants) on the
# shapes that stream below the copy bandwidth in the kernel. Then, from the repository root:
#   run(command=".carry/micro/stream_micro", carry=[".carry/micro"])   (or tma_micro, wake_micro, pace_micro, layer_sim, fence_micro, l2pf_micro)
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/env.sh
cu=$(ls -d "$PEREGRINE_CUDA_VENV"/lib/python3*/site-packages/nvidia/cu13 | head -n1)
mkdir -p .carry/micro
flags=(-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Ikernels -Iscripts/gpu -DPG_TRACE=0 -DPG_UNROLL=4 -L"$cu/lib")
"$cu/bin/nvcc" "${flags[@]}" -o .carry/micro/stream_micro scripts/gpu/stream_micro.cu
# TMA bulk copies: streaming through shared memory and flag latency under copies in flight.
"$cu/bin/nvcc" "${flags[@]}" -o .carry/micro/tma_micro scripts/gpu/tma_micro.cu
# How late a phase's blocks wake after its last producer arrives (one counter vs alternatives).
"$cu/bin/nvcc" "${flags[@]}" -o .carry/micro/wake_micro scripts/gpu/wake_micro.cu
# A paced bulk-copy weight stream (bytes in flight vs bandwidth and poll latency) and the
# layer simulator built on it (Qwen TP 2 layer: register rows vs a producer/consumer ring).
"$cu/bin/nvcc" "${flags[@]}" -o .carry/micro/pace_micro scripts/gpu/pace_micro.cu
"$cu/bin/nvcc" "${flags[@]}" -o .carry/micro/layer_sim scripts/gpu/layer_sim.cu
# What a release fence costs with the SM's own copies, loads or stores in flight.
"$cu/bin/nvcc" "${flags[@]}" -o .carry/micro/fence_micro scripts/gpu/fence_micro.cu
# Bulk L2 prefetches: flag latency while they stream, and reading a phase after them.
"$cu/bin/nvcc" "${flags[@]}" -DPG_WEIGHT_EVICT_FIRST=1 -o .carry/micro/l2pf_micro scripts/gpu/l2pf_micro.cu
echo "built .carry/micro"
