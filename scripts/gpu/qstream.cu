//! Streaming rate of the decode kernel's matrix rows alone, per weight format, against a
//! plain read: one big matrix per launch, offsets rotating over a buffer larger than L2
//! so every launch reads HBM. The quantized rows run as qmat_grid_rows does (input
//! prepared once per block, ops/qdot.cuh) with G row groups of two per warp batch, and
//! are checked against a float64 product of the same rows on the host.
//! Build and run on the GPU host: scripts/gpu/qstream.sh
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>
#include "common.cuh"
#include "ops/qmatvec.cuh"

#ifndef QS_THREADS
#define QS_THREADS 512
#endif
constexpr int WARPS = QS_THREADS / 32;
constexpr int NR = 2;

/// G row groups of NR rows per warp batch, the decode kernel's group order.
template <u32 F, int K, int G>
__global__ void __launch_bounds__(QS_THREADS, 1) qrows(const unsigned char* w, int rows, const float* x, float* y) {
  extern __shared__ float4 smem[];
  float* xs = reinterpret_cast<float*>(smem);
  unsigned char* xq = reinterpret_cast<unsigned char*>(xs + K);
  for (int i = threadIdx.x; i < K; i += QS_THREADS) xs[i] = x[i];
  __syncthreads();
  q_prep_x<QS_THREADS, K>(xs, xq);
  __syncthreads();
  const int gw = warp_id() * gridDim.x + blockIdx.x, nw = WARPS * gridDim.x;
  const QSeg sg{F, w, 0, rows};
  for (int g = gw; g < rows / NR; g += G * nw) {
    int row0[G];
#pragma unroll
    for (int b = 0; b < G; ++b) row0[b] = min(g + b * nw, rows / NR - 1) * NR;
    float acc[G * NR];
    q_groups_dot<K, NR, G>(sg, row0, xs, xq, acc);
    if (lane_id() == 0)
#pragma unroll
      for (int i = 0; i < G * NR; ++i) y[row0[i / NR] + i % NR] = acc[i];
  }
}

/// The decode kernel's bf16 rows (grid_rows).
template <int K>
__global__ void __launch_bounds__(QS_THREADS, 1) bf16rows(const bf16_t* w, int rows, const float* x, float* y) {
  extern __shared__ float4 smem[];
  float* xs = reinterpret_cast<float*>(smem);
  for (int i = threadIdx.x; i < K; i += QS_THREADS) xs[i] = x[i];
  __syncthreads();
  grid_rows<K, NR, WARPS>(w, rows, xs, [&](int r, float v) { y[r] = v; });
}

/// Reads `words` 16-byte words, 4 per thread in flight.
__global__ void __launch_bounds__(QS_THREADS, 1) readloop(const uint4* w, size_t words, u32* out) {
  u32 a = 0;
  const size_t n = (size_t)gridDim.x * QS_THREADS;
  for (size_t i = (size_t)blockIdx.x * QS_THREADS + threadIdx.x; i < words; i += 4 * n) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = i + u * n < words ? ld_weight16(w + i + u * n) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < 4; ++u) a ^= v[u].x ^ v[u].w;
  }
  if (a == 0x12345678u) out[0] = a;
}

static unsigned char* g_buf;
static std::vector<unsigned char> g_host;
static size_t g_bytes;
static float *g_x, *g_y;
static std::vector<float> g_xh;
static int g_sms;

static void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    printf("%s: %s\n", what, cudaGetErrorString(e));
    exit(1);
  }
}

/// Mean µs per launch over 20 launches, each at the next offset of the buffer.
template <class L>
static float time_it(size_t mat_bytes, L launch) {
  const size_t slots = g_bytes / mat_bytes;
  for (int i = 0; i < 3; ++i) launch(g_buf + (i % slots) * mat_bytes);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a);
  const int n = 20;
  for (int i = 0; i < n; ++i) launch(g_buf + ((i + 3) % slots) * mat_bytes);
  cudaEventRecord(b);
  check(cudaEventSynchronize(b), "launches");
  float ms;
  cudaEventElapsedTime(&ms, a, b);
  return ms * 1000.f / n;
}

static void report(const char* name, size_t bytes, float us) { printf("%-28s %8.1f us %7.0f GB/s", name, us, bytes / us / 1e3); }

static double f16(unsigned bits) {
  const int e = (bits >> 10) & 31, m = bits & 1023;
  const double v = e == 0 ? std::ldexp((double)m, -24) : std::ldexp(1.0 + m / 1024.0, e - 15);
  return (bits & 0x8000) ? -v : v;
}

/// Element i of a repacked row (the layout of cuda/quant/format.rs), in float64.
static double element(u32 f, const unsigned char* row, int k, int i) {
  const int c = i / 32, g = (i % 32) / 4, e = i % 4, C = k / 32, S = k / 256;
  const int sg = (g - c) & 7;  // stored group of original group g
  auto u16 = [&](int off) { return (unsigned)row[off] | (unsigned)row[off + 1] << 8; };
  if (f == QF_Q8_0) return f16(u16(32 * C + 2 * c)) * ((int)row[32 * c + 4 * sg + e] - 128);
  const unsigned half = u16(16 * c + 2 * sg);
  const int code = (half >> (4 * e)) & 15;
  if (f == QF_Q4_0) return f16(u16(16 * C + 2 * c)) * (code - 8);
  if (f == QF_Q4_1) return f16(u16(16 * C + 4 * c)) * code + f16(u16(16 * C + 4 * c + 2));
  if (f == QF_Q4_K) {
    const int sb = 16 * C + 4 * (c / 8);
    const unsigned scm = u16(16 * C + 4 * S + 2 * c);
    return f16(u16(sb)) * (scm & 255) * code - f16(u16(sb + 2)) * (scm >> 8);
  }
  const int hi = (row[16 * C + 8 * c + sg] >> (2 * e)) & 3;
  const unsigned scs = u16(24 * C + 2 * S + 2 * c);
  const int sc = (signed char)(g < 4 ? scs & 255 : scs >> 8);
  return f16(u16(24 * C + 2 * (c / 8))) * sc * ((code | hi << 4) - 32);
}

/// Normwise relative error of the first `n` rows of the last product (matrix at offset 0).
static double rel_error(u32 f, int k, int n) {
  std::vector<float> y(n);
  check(cudaMemcpy(y.data(), g_y, n * 4, cudaMemcpyDeviceToHost), "download");
  double num = 0, den = 0;
  for (int r = 0; r < n; ++r) {
    const unsigned char* row = g_host.data() + (size_t)r * q_row_bytes(f, k);
    double ref = 0;
    for (int i = 0; i < k; ++i) ref += element(f, row, k, i) * g_xh[i];
    num += (y[r] - ref) * (y[r] - ref);
    den += ref * ref;
  }
  return std::sqrt(num / den);
}

template <u32 F, int K, int G>
static void run_q(const char* fname, int rows) {
  const size_t bytes = (size_t)rows * q_row_bytes(F, K);
  const int smem = K * 4 + xq_bytes(K);
  check(cudaFuncSetAttribute(qrows<F, K, G>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), "smem");
  const float us = time_it(bytes, [&](unsigned char* w) { qrows<F, K, G><<<g_sms, QS_THREADS, smem>>>(w, rows, g_x, g_y); });
  qrows<F, K, G><<<g_sms, QS_THREADS, smem>>>(g_buf, rows, g_x, g_y);
  char name[64];
  snprintf(name, sizeof name, "%s K%d %d rows/warp", fname, K, G * NR);
  report(name, bytes, us);
  printf("  err %.2e\n", rel_error(F, K, 256));
}

template <int K>
static void run_bf16(int rows) {
  const size_t bytes = (size_t)rows * K * 2;
  check(cudaFuncSetAttribute(bf16rows<K>, cudaFuncAttributeMaxDynamicSharedMemorySize, K * 4), "smem");
  const float us = time_it(bytes, [&](unsigned char* w) { bf16rows<K><<<g_sms, QS_THREADS, K * 4>>>((const bf16_t*)w, rows, g_x, g_y); });
  char name[64];
  snprintf(name, sizeof name, "bf16 K%d", K);
  report(name, bytes, us);
  printf("\n");
}

template <u32 F, int K>
static void formats(const char* fname, int rows) {
  run_q<F, K, 1>(fname, rows);
  run_q<F, K, 2>(fname, rows);
  run_q<F, K, 4>(fname, rows);
}

int main() {
  cudaDeviceProp p;
  check(cudaGetDeviceProperties(&p, 0), "device");
  g_sms = p.multiProcessorCount;
  g_bytes = (size_t)2 << 30;
  check(cudaMalloc(&g_buf, g_bytes), "alloc");
  g_host.resize(g_bytes);
  for (size_t i = 0; i < g_bytes; ++i) g_host[i] = (unsigned char)(i * 2654435761u >> 13);
  // Every f16 scale finite and moderate: the high byte of each pair below 0x3c.
  for (size_t i = 1; i < g_bytes; i += 2) g_host[i] &= 0x3b;
  check(cudaMemcpy(g_buf, g_host.data(), g_bytes, cudaMemcpyHostToDevice), "upload");
  check(cudaMalloc(&g_x, 8192 * 4), "alloc");
  check(cudaMalloc(&g_y, 262144 * 4), "alloc");
  g_xh.resize(8192);
  for (int i = 0; i < 8192; ++i) g_xh[i] = (float)((i * 37) % 101) / 101.f - 0.5f;
  check(cudaMemcpy(g_x, g_xh.data(), sizeof(float) * 8192, cudaMemcpyHostToDevice), "upload");
  printf("%s, %d SMs, %d threads per block\n", p.name, g_sms, QS_THREADS);
  {
    const size_t words = ((size_t)512 << 20) / 16;
    u32* out;
    check(cudaMalloc(&out, 4), "alloc");
    const float us = time_it(words * 16, [&](unsigned char* w) { readloop<<<g_sms, QS_THREADS>>>((const uint4*)w, words, out); });
    report("read loop (512 MB)", words * 16, us);
    printf("\n");
  }
  run_bf16<2048>(131072);
  run_bf16<8192>(32768);
  formats<QF_Q8_0, 2048>("q8_0", 131072);
  formats<QF_Q4_0, 2048>("q4_0", 131072);
  formats<QF_Q4_1, 2048>("q4_1", 131072);
  formats<QF_Q4_K, 2048>("q4_k", 131072);
  formats<QF_Q6_K, 2048>("q6_k", 131072);
  formats<QF_Q8_0, 8192>("q8_0", 32768);
  formats<QF_Q4_K, 8192>("q4_k", 32768);
  formats<QF_Q6_K, 8192>("q6_k", 32768);
  return 0;
}
