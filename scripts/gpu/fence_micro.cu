// Micro-benchmark: does a block's release (the fence before its counter arrival) wait for
// the weight copies its own SM has in flight? layer_sim's ring design sees 2–3 µs from a
// phase's last end to the next phase's first wake (0.7 µs without a producer warp); the
// arrival there is a red.release issued while the producer warp has bulk copies in flight.
// Each block: warps 1.. keep `kb` KB of copies (bulk, cp.async) or loads in flight, or
// store `kb` KB; warp 0's lane 0, 1 µs in, times a fence.acq_rel.gpu (what a release
// costs the issuing thread) and then a red.release.gpu + an acquire load of the same word.
// Prints medians over 40 launches of block 0's times.
// Built by scripts/gpu/stream_micro.sh; run with `.carry/micro/fence_micro`.
#include "common.cuh"
#include "micro_bufs.cuh"
#include "bulk_copy.cuh"
#include "sync.cuh"
#include <cstdio>
#include <vector>

constexpr int THREADS = 512;
enum Traffic { NONE, BULK, CP_ASYNC, LOADS, STORES };

__global__ void __launch_bounds__(THREADS, 1) fence_kernel(unsigned char* src, int traffic, int bytes, u32* word,
                                                           unsigned long long* out) {
  extern __shared__ __align__(128) unsigned char buf[];
  __shared__ unsigned long long bar;
  if (threadIdx.x == 0) mbar_init(&bar);
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  __syncthreads();
  unsigned char* mine = src + (size_t)blockIdx.x * bytes;
  const unsigned long long t0 = now_ns();
  if (traffic == BULK && threadIdx.x == 32) {
    mbar_expect(&bar, bytes);
    for (int off = 0; off < bytes; off += 8192) bulk_copy(buf + off, mine + off, 8192, &bar);
  }
  if (traffic == CP_ASYNC && threadIdx.x >= 32) {
    for (int off = (threadIdx.x - 32) * 16; off < bytes; off += (THREADS - 32) * 16)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(saddr(buf + off)), "l"(mine + off) : "memory");
    asm volatile("cp.async.commit_group;" ::: "memory");
  }
  u32 sum = 0;
  if ((traffic == LOADS || traffic == STORES) && threadIdx.x >= 32) {
    for (int off = (threadIdx.x - 32) * 16; off < bytes; off += (THREADS - 32) * 16) {
      uint4* p = reinterpret_cast<uint4*>(mine + off);
      if (traffic == LOADS) {
        const uint4 v = __ldcs(p);
        sum += v.x;
      } else {
        __stcs(p, make_uint4(off, 1, 2, 3));
      }
    }
  }
  if (threadIdx.x == 0) {
    while (now_ns() - t0 < 1000) {
    }
    const unsigned long long a = now_ns();
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
    const unsigned long long b = now_ns();
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(word + blockIdx.x * 32) : "memory");
    const u32 v = ld_acquire_gpu(word + blockIdx.x * 32);
    const unsigned long long c = now_ns();
    if (blockIdx.x == 0) out[0] = b - a, out[1] = c - b, out[2] = v;
  }
  if (traffic == CP_ASYNC && threadIdx.x >= 32) asm volatile("cp.async.wait_all;" ::: "memory");
  if (traffic == BULK && threadIdx.x == 32) mbar_wait(&bar, 0);
  if (sum == 0x12345678u) buf[0] = 1;
  __syncthreads();
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  constexpr int MAX = 192 * 1024;
  unsigned char* src;
  u32* word;
  unsigned long long* out;
  cudaMalloc(&src, (size_t)sms * MAX * 2);
  cudaMalloc(&word, sms * 32 * 4);
  cudaMalloc(&out, 24);
  cudaFuncSetAttribute(fence_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, MAX);
  const char* names[] = {"nothing", "bulk copies", "cp.async", "loads (one each)", "stores"};
  struct Case { int traffic, kb; };
  const Case cases[] = {{NONE, 0}, {BULK, 32}, {BULK, 96}, {BULK, 192}, {CP_ASYNC, 32}, {CP_ASYNC, 96}, {CP_ASYNC, 192}, {LOADS, 96}, {STORES, 32}, {STORES, 96}};
  for (const Case& c : cases) {
    std::vector<double> f, r;
    for (int i = 0; i < 44; ++i) {
      cudaMemset(word, 0, sms * 32 * 4);
      fence_kernel<<<sms, THREADS, MAX>>>(src + (i % 2) * (size_t)sms * MAX, c.traffic, c.kb * 1024, word, out);
      unsigned long long h[3];
      cudaMemcpy(h, out, 24, cudaMemcpyDeviceToHost);
      if (i < 4) continue;
      f.push_back(h[0] / 1e3), r.push_back(h[1] / 1e3);
    }
    std::sort(f.begin(), f.end());
    std::sort(r.begin(), r.end());
    printf("%-17s %3d KB per SM in flight: fence.acq_rel.gpu %.2f us, red.release + acquire load %.2f us (medians)\n", names[c.traffic],
           c.kb, f[f.size() / 2], r[r.size() / 2]);
  }
  if (cudaError_t e = cudaGetLastError()) printf("CUDA error %s\n", cudaGetErrorString(e));
  return 0;
}
