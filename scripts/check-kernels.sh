#!/usr/bin/env bash
# Compile-checks every kernels/**/*.cu for sm_90a (H200) with the pinned nvcc wheel,
# and rejects grid-wide barriers: the persistent kernel waits on exact dependencies only.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$(dirname "$0")/.."
nvcc=$(ls "$PEREGRINE_CUDA_VENV"/lib/python3*/site-packages/nvidia/cu13/bin/nvcc 2>/dev/null | head -n1)
[ -x "$nvcc" ] || die "nvcc not found; run scripts/setup.sh test"
if grep -rnE 'grid\.sync|this_grid|grid_group|cudaLaunchCooperativeKernel' kernels/; then
  die "grid-wide barriers are not allowed in kernels/ (see the lines above)"
fi
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
mapfile -t units < <(find kernels -name '*.cu' | sort)
[ ${#units[@]} -gt 0 ] || die "no kernels/**/*.cu found"
for cu in "${units[@]}"; do
  "$nvcc" -std=c++17 -gencode=arch=compute_90a,code=sm_90a -cubin -Ikernels \
    -o "$out/$(basename "$cu" .cu).cubin" "$cu" || die "nvcc failed on $cu"
  echo "ok  $cu"
done
echo "kernel compile check: ${#units[@]} file(s) compiled for sm_90a"
