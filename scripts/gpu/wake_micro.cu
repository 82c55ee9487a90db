// Micro-benchmark: how late do the blocks of a phase wake after its last producer
// arrives? The TP kernel's trace shows the last of 126 waiting blocks waking 0.9–1.8 µs
// after the last arrival (the first after 0.1–0.5): every block polls one counter word.
// Every block arrives once (staggered over ~1 µs, as a phase's blocks finish) and then
// waits for all G arrivals, by one of:
//   counter    red.release.gpu add on one word, every block polls it (the kernel's block_wait);
//   broadcast  atom.add returns the count: the last arriver stores a flag into every
//              block's own 128-byte line, and each block polls only its line;
//   counter x4 the arrivals spread over 4 words (block % 4), pollers read all 4 (fewer
//              pollers per word, one more load per poll).
// Prints, per mode, the first / median / last wake after the last arrival (µs).
// Built by scripts/gpu/stream_micro.sh; run with `.carry/micro/wake_micro`.
#include "common.cuh"
#include "micro_bufs.cuh"
#include "sync.cuh"
#include <cstdio>
#include <vector>

constexpr int THREADS = 512;
constexpr int LINE_WORDS = 32;  // 128 bytes


/// out[2b] = block b's arrival time, out[2b + 1] its wake time (ns, global timer).
__global__ void __launch_bounds__(THREADS, 1) wake_kernel(u32* words, int mode, unsigned long long* out) {
  const int G = gridDim.x, b = blockIdx.x;
  if (threadIdx.x == 0) {
    // Stagger the arrivals: block b arrives ~ (b * 37 % G) * 8 ns after the start.
    const unsigned long long t0 = now_ns();
    while (now_ns() - t0 < (unsigned long long)((b * 37) % G) * 8) {
    }
    const unsigned long long ta = now_ns();
    if (mode == 0) {
      asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(words) : "memory");
      while (ld_acquire_gpu(words) < (u32)G) {
      }
    } else if (mode == 1) {
      u32 old;
      asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(words) : "memory");
      if (old == (u32)G - 1)
        for (int i = 0; i < G; ++i) asm volatile("st.release.gpu.global.u32 [%0], 1;" ::"l"(words + (i + 1) * LINE_WORDS) : "memory");
      while (ld_acquire_gpu(words + (b + 1) * LINE_WORDS) == 0) {
      }
    } else {
      asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(words + (b % 4) * LINE_WORDS) : "memory");
      while (ld_acquire_gpu(words) + ld_acquire_gpu(words + LINE_WORDS) + ld_acquire_gpu(words + 2 * LINE_WORDS) + ld_acquire_gpu(words + 3 * LINE_WORDS) < (u32)G) {
      }
    }
    out[2 * b] = ta;
    out[2 * b + 1] = now_ns();
  }
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const char* names[] = {"counter (one word)", "broadcast (a line per block)", "counter x4 (four words)"};
  u32* words;
  unsigned long long* out;
  const size_t nwords = (size_t)(sms + 2) * LINE_WORDS;
  cudaMalloc(&words, nwords * 4);
  cudaMalloc(&out, 2 * sms * sizeof(unsigned long long));
  for (int blocks : {126, sms}) {
    for (int mode = 0; mode < 3; ++mode) {
      std::vector<double> first, med, last;
      for (int r = 0; r < 60; ++r) {
        cudaMemset(words, 0, nwords * 4);
        wake_kernel<<<blocks, THREADS>>>(words, mode, out);
        std::vector<unsigned long long> h(2 * blocks);
        cudaMemcpy(h.data(), out, h.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost);
        if (r < 4) continue;
        unsigned long long last_arrival = 0;
        for (int b = 0; b < blocks; ++b) last_arrival = std::max(last_arrival, h[2 * b]);
        std::vector<double> w;
        for (int b = 0; b < blocks; ++b) w.push_back(((long long)h[2 * b + 1] - (long long)last_arrival) / 1e3);
        std::sort(w.begin(), w.end());
        first.push_back(w[0]), med.push_back(w[w.size() / 2]), last.push_back(w.back());
      }
      auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
      };
      printf("%3d blocks, %-30s: wake after the last arrival, medians of 56 runs: first %5.2f  median %5.2f  last %5.2f us\n", blocks,
             names[mode], median(first), median(med), median(last));
    }
  }
  if (cudaError_t e = cudaGetLastError()) printf("CUDA error %s\n", cudaGetErrorString(e));
  cudaFree(words), cudaFree(out);
  return 0;
}
