#!/usr/bin/env bash
# Builds and runs scripts/gpu/qstream.cu (the matrix rows' streaming rate per weight
# format) on the GPU host, with the host's nvcc, at 512 and 256 threads per block.
# usage (on the GPU host): scripts/gpu/qstream.sh [OUT-DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-${OUT:-/tmp}}
for t in 512 256; do
  nvcc -O3 -std=c++17 -arch=sm_90 -Ikernels -DQS_THREADS=$t -DPG_UNROLL=4 -DPG_QFMTS=62 -o "$out/qstream$t" scripts/gpu/qstream.cu &
done
wait
for t in 512 256; do "$out/qstream$t"; done
