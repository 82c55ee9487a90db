//! RMSNorm of one vector by one block (placeholder op until the persistent kernel
//! lands; matches transformers' LlamaRMSNorm in float32).
#include "common.cuh"

extern "C" __global__ void rmsnorm_f32(const float* __restrict__ x, const float* __restrict__ w,
                                       float* __restrict__ y, int n, float eps) {
  __shared__ float partial[32];
  float acc = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) acc += x[i] * x[i];
  acc = warp_sum(acc);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < (blockDim.x >> 5) ? partial[threadIdx.x] : 0.f;
    v = warp_sum(v);
    if (threadIdx.x == 0) partial[0] = rsqrtf(v / n + eps);
  }
  __syncthreads();
  const float scale = partial[0];
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = x[i] * scale * w[i];
}
