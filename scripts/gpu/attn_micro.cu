// Micro-benchmark of the decode attention ops alone (no phase waits): cycles of one
// head's attend_range (v5, first pass staged) and attend_own (attn_own) on 9 blocks of
// 512 threads, head_dim 64, after their staged rows have landed. Built and run on the
// GPU host from the binary scripts/gpu/attn_micro.sh builds; prints one line per (op,
// positions), and whether attend_own matches attend_range (stale NaN patterns in the
// stage must not leak into the output).
#include "common.cuh"
__device__ long long g_probe[8];
#ifdef PROBES  // section stamps (each adds a global store to block 0's path)
#define OWN_PROBE(i) \
  if (threadIdx.x == 0 && blockIdx.x == 0) g_probe[i] = clock64();
#endif
#include "ops/attention.cuh"
#include "ops/attend_own.cuh"
#include <cstdio>
#include <vector>
#include <algorithm>

constexpr int THREADS = 512, HD = 64, REPS = 32, CAP = 600;
__device__ int blocks_total() { return gridDim.x; }

__global__ void __launch_bounds__(THREADS, 1) micro(const bf16_t* kc, const bf16_t* vc, int n, int op, long long* cycles, float* result) {
  extern __shared__ float4 smf[];
  float* sm = reinterpret_cast<float*>(smf);
  float* q_s = sm;
  float* kv_s = sm + HD;
  float* scratch = sm + 3 * HD;
  float* out = scratch + attn_scratch_floats<THREADS, HD>();
  uint4* stage = reinterpret_cast<uint4*>(out + HD);
  for (int i = threadIdx.x; i < 3 * HD; i += THREADS) sm[i] = 0.01f * (float)((i * 37 + blockIdx.x) % 17) - 0.08f;
  // The stage past the staged rows holds NaN patterns, as stale shared memory can.
  for (int i = threadIdx.x; i < 2 * CAP * HD / 8; i += THREADS) stage[i] = make_uint4(~0u, ~0u, ~0u, ~0u);
  __syncthreads();
  for (int r = 0; r < REPS; ++r) {
    if (op == 0) attend_stage<THREADS, HD>(kc, vc, 0, n - 1, stage);
    else own_stage<THREADS, HD>(kc, vc, n - 1, CAP, stage);
    cp_async_wait_all();
    __syncthreads();
    const long long t0 = clock64();
    if (op == 0) attend_range<THREADS, HD>(q_s, kv_s, kv_s + HD, true, kc, vc, 0, n - 1, nullptr, out, scratch, stage);
    else attend_own<THREADS, HD>(q_s, kv_s, n, CAP, stage, scratch, out);
    __syncthreads();
    const long long t1 = clock64();
    if (threadIdx.x == 0) cycles[blockIdx.x * REPS + r] = t1 - t0;
    if (threadIdx.x == 0 && blockIdx.x == 0 && op == 1 && r == REPS - 1)
      for (int i = 0; i < 5; ++i) cycles[blocks_total() * REPS + i] = g_probe[i] - t0;
    if (threadIdx.x < HD) result[blockIdx.x * HD + threadIdx.x] = out[threadIdx.x];
    __syncthreads();
  }
}

int main() {
  const int blocks = 9, maxn = 1024;
  std::vector<bf16_t> h(maxn * HD);
  for (size_t i = 0; i < h.size(); ++i) {
    float f = 0.02f * (float)((i * 7919) % 101) - 1.0f;
    unsigned u;
    memcpy(&u, &f, 4);
    h[i] = (bf16_t)(u >> 16);
  }
  bf16_t *kc, *vc;
  long long* cyc;
  float* res;
  cudaMalloc(&kc, h.size() * 2);
  cudaMalloc(&vc, h.size() * 2);
  cudaMalloc(&cyc, (blocks * REPS + 8) * 8);
  cudaMalloc(&res, blocks * HD * 4);
  cudaMemcpy(kc, h.data(), h.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(vc, h.data(), h.size() * 2, cudaMemcpyHostToDevice);
  const int smem = 200 * 1024;
  cudaFuncSetAttribute(micro, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  for (int n : {40, 160, 288, 512}) {
    std::vector<float> outs[2];
    for (int op = 0; op < 2; ++op) {
      micro<<<blocks, THREADS, smem>>>(kc, vc, n, op, cyc, res);
      cudaError_t e = cudaDeviceSynchronize();
      if (e != cudaSuccess) { printf("error %s\n", cudaGetErrorString(e)); return 1; }
      std::vector<long long> c(blocks * REPS + 8);
      cudaMemcpy(c.data(), cyc, c.size() * 8, cudaMemcpyDeviceToHost);
      outs[op].resize(blocks * HD);
      cudaMemcpy(outs[op].data(), res, outs[op].size() * 4, cudaMemcpyDeviceToHost);
      std::vector<long long> warm(c.begin() + 2, c.begin() + REPS);  // block 0, after 2 warm-up reps
      std::sort(warm.begin(), warm.end());
      printf("%-12s n=%4d: median %6lld cycles (%.2f us at 1.98 GHz), min %lld, max %lld, first %lld\n",
             op == 0 ? "attend_range" : "attend_own", n, warm[warm.size() / 2], warm[warm.size() / 2] / 1980.0, warm.front(), warm.back(), c[0]);
      if (op == 1) {
        printf("  attend_own sections (cycles after start, block 0 thread 0, last rep):");
        for (int i = 0; i < 5; ++i) printf(" %lld", c[blocks * REPS + i]);
        printf("\n");
      }
    }
    double d = 0, r = 0;
    for (float x : outs[1]) if (!(x == x)) { printf("  n=%d: attend_own output has NaN: FAIL\n", n); return 1; }
    for (size_t i = 0; i < outs[0].size(); ++i) { d = std::max(d, (double)fabsf(outs[0][i] - outs[1][i])); r = std::max(r, (double)fabsf(outs[0][i])); }
    printf("  n=%d: max |own - range| %.3e (max |out| %.3e)\n", n, d, r);
  }
  return 0;
}
