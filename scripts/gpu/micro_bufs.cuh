//! What the micro-benchmarks next to this file share: the global timer, and one case's
//! buffers with its timing loop (the last block's end minus the first block's start,
//! stamped by every block of the timed kernel) and its sums check.
#pragma once
#include "common.cuh"
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/// Every row of a Bufs matrix sums to this times K (bf16 0x3c3c = 0.011475, x = 0.5).
constexpr float ROW_SUM_PER_K = 0.011474609375f * 0.5f;

/// One case's buffers: COPIES copies of a rows × K weight matrix (bf16 ≈ 0.0115
/// everywhere: finite sums), x = 0.5, y, and every block's start / end stamps.
constexpr int COPIES = 4, REPS = 40;
struct Bufs {
  bf16_t* w;
  float *x, *y;
  unsigned long long* st;
  size_t n;  // elements of one copy of W
  int blocks;
  Bufs(int K, int rows, int blocks_) : n((size_t)rows * K), blocks(blocks_) {
    cudaMalloc(&w, COPIES * n * sizeof(bf16_t));
    cudaMalloc(&x, K * sizeof(float));
    cudaMalloc(&y, rows * sizeof(float));
    cudaMalloc(&st, 2 * blocks * sizeof(unsigned long long));
    cudaMemset(w, 0x3c, COPIES * n * sizeof(bf16_t));
    std::vector<float> hx(K, 0.5f);
    cudaMemcpy(x, hx.data(), K * sizeof(float), cudaMemcpyHostToDevice);
  }
  ~Bufs() { cudaFree(w), cudaFree(x), cudaFree(y), cudaFree(st); }
  /// Median and minimum over REPS launches (the first 4 dropped) of the last block end
  /// minus the first block start, µs; `launch(r)` runs repetition r on copy r % COPIES.
  template <class Launch>
  std::pair<double, double> time_us(Launch launch) {
    std::vector<unsigned long long> hs(2 * blocks);
    std::vector<double> us;
    for (int r = 0; r < REPS; ++r) {
      launch(w + (r % COPIES) * n);
      cudaMemcpy(hs.data(), st, hs.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost);
      unsigned long long lo = ~0ull, hi = 0;
      for (int b = 0; b < blocks; ++b) lo = std::min(lo, hs[2 * b]), hi = std::max(hi, hs[2 * b + 1]);
      if (r >= 4) us.push_back((hi - lo) / 1e3);
    }
    std::sort(us.begin(), us.end());
    return {us[us.size() / 2], us[0]};
  }
  /// "sums ok" when every y[r] is the expected row sum, else "WRONG SUMS".
  const char* check_sums(int K, int rows) const {
    std::vector<float> hy(rows);
    cudaMemcpy(hy.data(), y, rows * sizeof(float), cudaMemcpyDeviceToHost);
    const float want = K * ROW_SUM_PER_K;
    for (float v : hy)
      if (fabsf(v - want) > 1e-3f * want) return "WRONG SUMS";
    return "sums ok";
  }
};
