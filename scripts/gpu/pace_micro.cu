// Micro-benchmark for a weight-streaming design the TP kernel does not have yet: one
// producer warp per SM streams the SM's weights through a shared-memory ring with TMA
// bulk copies, never more than P chunks in flight, while consumer warps read landed
// chunks. Session 8's tma_micro showed that copies in flight anywhere delay every SM's
// polls about in proportion to the bytes in flight; if a modest P already streams at the
// copy bandwidth, a kernel could keep HBM busy across its dependency waits (the ring
// fills while consumers wait) with polls only a little late.
// For each bytes-in-flight-per-SM setting: the stream's bandwidth (every block streams
// its share of 256 MB; last end minus first start) and the latency of a flag store on
// SM 0 seen by a poller on SM 1 ~5 µs into the stream (both SMs streaming too; their
// prober warps take no part in it). Checks every block's byte sum.
// Built by scripts/gpu/stream_micro.sh; run with `.carry/micro/pace_micro`.
#include "common.cuh"
#include "micro_bufs.cuh"
#include "bulk_copy.cuh"
#include "sync.cuh"
#include <cstdio>
#include <vector>

constexpr int THREADS = 512, WARPS = THREADS / 32;
constexpr int CONSUMERS = WARPS - 2;  // warp 0 produces, the last warp probes latency
constexpr int CH = 8192;              // bytes per chunk
constexpr int S = 24;                 // ring slots (192 KB)

/// stamps[2b], stamps[2b+1]: block b's stream start and end; probe[0] the store time on
/// SM 0, probe[1] when SM 1 saw it; sums[b] the block's sum of 32-bit words.
__global__ void __launch_bounds__(THREADS, 1) pace_kernel(const unsigned char* W, size_t per_block, int inflight, u32* flag,
                                                          int probe_ns, unsigned long long* stamps, unsigned long long* probe,
                                                          u32* sums) {
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ unsigned long long full[S], empty[S];
  __shared__ u32 part[CONSUMERS];
  if (threadIdx.x < S) {
    mbar_init(&full[threadIdx.x], 1);
    mbar_init(&empty[threadIdx.x], CONSUMERS);
  }
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  __syncthreads();
  const unsigned char* src = W + blockIdx.x * per_block;
  const int chunks = (int)(per_block / CH);
  const unsigned long long t0 = now_ns();
  const int w = warp_id(), lane = lane_id();
  if (w == 0) {
    if (lane == 0)
      for (int i = 0; i < chunks; ++i) {
        const int s = i % S;
        if (i >= S) mbar_wait(&empty[s], (u32)((i / S - 1) & 1));                       // slot free again
        if (i >= inflight) mbar_wait(&full[(i - inflight) % S], (u32)(((i - inflight) / S) & 1));  // pacing
        mbar_expect(&full[s], CH);
        bulk_copy(ring + (size_t)s * CH, src + (size_t)i * CH, CH, &full[s]);
      }
  } else if (w <= CONSUMERS) {
    u32 sum = 0;
    for (int i = 0; i < chunks; ++i) {
      const int s = i % S;
      mbar_wait(&full[s], (u32)((i / S) & 1));
      const uint4* words = reinterpret_cast<const uint4*>(ring + (size_t)s * CH);
      for (int k = (w - 1) * 32 + lane; k < CH / 16; k += CONSUMERS * 32) {
        const uint4 v = words[k];
        sum += v.x + v.y + v.z + v.w;
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[s]);
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) part[w - 1] = sum;
  } else if (lane == 0 && blockIdx.x < 2) {
    if (blockIdx.x == 0) {
      while (now_ns() - t0 < (unsigned long long)probe_ns) {
      }
      const unsigned long long ts = now_ns();
      asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(flag), "r"(1u) : "memory");
      probe[0] = ts;
    } else {
      u32 v = 0;
      while (v == 0) v = ld_acquire_gpu(flag);
      probe[1] = now_ns();
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    u32 t = 0;
    for (int c = 0; c < CONSUMERS; ++c) t += part[c];
    sums[blockIdx.x] = t;
    stamps[2 * blockIdx.x] = t0;
    stamps[2 * blockIdx.x + 1] = now_ns();
  }
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const size_t total = 256ull << 20, per_block = total / sms / CH * CH;
  unsigned char* w;
  u32 *flag, *sums;
  unsigned long long *stamps, *probe;
  cudaMalloc(&w, 2 * total);
  cudaMemset(w, 1, 2 * total);
  cudaMalloc(&flag, 4);
  cudaMalloc(&sums, sms * 4);
  cudaMalloc(&stamps, 2 * sms * 8);
  cudaMalloc(&probe, 16);
  const int smem = S * CH;
  cudaFuncSetAttribute(pace_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  // Expected sum of a block's 32-bit words (every byte 1), modulo 2^32.
  const u32 want = (u32)((per_block / 4) * 0x01010101ull);
  for (int chunks : {1, 2, 3, 4, 6, 8, 12, 16, 24}) {
    std::vector<double> bw, lat;
    bool ok = true;
    for (int r = 0; r < 24; ++r) {
      cudaMemset(flag, 0, 4);
      pace_kernel<<<sms, THREADS, smem>>>(w + (r % 2) * total, per_block, chunks, flag, 5000, stamps, probe, sums);
      std::vector<unsigned long long> st(2 * sms), pr(2);
      std::vector<u32> hs(sms);
      cudaMemcpy(st.data(), stamps, st.size() * 8, cudaMemcpyDeviceToHost);
      cudaMemcpy(pr.data(), probe, 16, cudaMemcpyDeviceToHost);
      cudaMemcpy(hs.data(), sums, sms * 4, cudaMemcpyDeviceToHost);
      if (r < 4) continue;
      unsigned long long lo = ~0ull, hi = 0;
      for (int b = 0; b < sms; ++b) lo = std::min(lo, st[2 * b]), hi = std::max(hi, st[2 * b + 1]), ok &= hs[b] == want;
      bw.push_back((double)per_block * sms / (hi - lo) / 1e3);  // TB/s
      lat.push_back(((long long)pr[1] - (long long)pr[0]) / 1e3);
    }
    std::sort(bw.begin(), bw.end());
    std::sort(lat.begin(), lat.end());
    printf("in flight per SM %3d KB (%2d chunks of 8 KB): stream %.2f TB/s (median of 20), flag seen after %.2f us (median; p90 %.2f) %s\n",
           chunks * CH / 1024, chunks, bw[bw.size() / 2], lat[lat.size() / 2], lat[lat.size() * 9 / 10], ok ? "sums ok" : "WRONG SUMS");
  }
  if (cudaError_t e = cudaGetLastError()) printf("CUDA error %s\n", cudaGetErrorString(e));
  return 0;
}
