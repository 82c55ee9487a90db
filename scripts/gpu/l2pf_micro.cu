// Micro-benchmark: can the next phase's weights be pulled into L2 by bulk prefetches
// (cp.async.bulk.prefetch.L2: no registers, no shared memory, no completion to wait on)
// while the latency-bound part of a layer runs, without slowing its flag hops?
// Sessions 7-8 (tma_micro, pace_micro) found that copies into shared memory delay every
// SM's polls in proportion to the bytes in flight. A prefetch returns no data to the SM,
// so it might not; if it does not, a layer could stream HBM across its dependency waits.
// Part 1: one-way flag latency (ping-pong between SM 0 and SM 1, release store / acquire
// poll at gpu scope) while the other SMs stream 256 MB: nothing, register loads (the
// kernel's phases), bulk prefetches unpaced, and bulk prefetches paced to a rate.
// Part 2: how fast a phase reads an M-byte matrix (16-byte loads over the grid) cold from
// HBM, and after every block bulk-prefetched its share and waited W µs.
// Built by scripts/gpu/stream_micro.sh; run with `.carry/micro/l2pf_micro`.
#include "common.cuh"
#include "micro_bufs.cuh"
#include "sync.cuh"
#include <cstdio>
#include <vector>

constexpr int THREADS = 512;
constexpr u32 PF_CHUNK = 16384;  // bytes per bulk prefetch

__device__ __forceinline__ void bulk_prefetch_l2(const void* p, u32 bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}
__device__ __forceinline__ void st_release_gpu(u32* p, u32 v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

/// The block's sum of the words it read into sums[b] (so the loads cannot be dropped) and
/// its stamps: `start`, then now.
__device__ __forceinline__ void finish_block(u32 sum, unsigned long long start, u32* sums, unsigned long long* stamps) {
  __shared__ u32 part[THREADS / 32];
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane_id() == 0) part[warp_id()] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    u32 t = 0;
    for (int w = 0; w < THREADS / 32; ++w) t += part[w];
    sums[blockIdx.x] = t;
    stamps[2 * blockIdx.x] = start;
    stamps[2 * blockIdx.x + 1] = now_ns();
  }
}

/// Sum of the 32-bit words of v[0, n), the block's threads striding with U 16-byte loads in flight each.
template <int U>
__device__ __forceinline__ u32 read_words(const uint4* v, size_t n) {
  u32 sum = 0;
  for (size_t k = threadIdx.x; k < n; k += U * THREADS) {
    uint4 x[U];
#pragma unroll
    for (int u = 0; u < U; ++u) x[u] = k + u * THREADS < n ? ld_weight16(v + k + u * THREADS) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < U; ++u) sum += x[u].x + x[u].y + x[u].z + x[u].w;
  }
  return sum;
}

enum Traffic { NONE = 0, LOADS = 1, PREFETCH = 2, PREFETCH_PACED = 3, LOADS_L2 = 4 };

/// Blocks 0 and 1 ping-pong `trips` times starting 3 µs in (probe[0..1]: start, end);
/// blocks >= 2 stream their share of W as `traffic` says (stamps: start, end), summing
/// loaded words into sums[b] so the loads cannot be dropped.
__global__ void __launch_bounds__(THREADS, 1) ping_kernel(const unsigned char* W, size_t per_block, int traffic, u32 gap_ns,
                                                          u32* flags, int trips, unsigned long long* probe,
                                                          unsigned long long* stamps, u32* sums) {
  const unsigned long long t0 = now_ns();
  if (blockIdx.x < 2) {
    if (threadIdx.x != 0) return;
    while (now_ns() - t0 < 3000) {
    }
    u32* mine = flags + blockIdx.x * 32;
    u32* theirs = flags + (1 - blockIdx.x) * 32;
    const unsigned long long a = now_ns();
    for (u32 i = 1; i <= (u32)trips; ++i) {
      if (blockIdx.x == 0) {
        st_release_gpu(mine, i);
        while (ld_acquire_gpu(theirs) != i) {
        }
      } else {
        while (ld_acquire_gpu(theirs) != i) {
        }
        st_release_gpu(mine, i);
      }
    }
    if (blockIdx.x == 0) probe[0] = a, probe[1] = now_ns();
    return;
  }
  const unsigned char* src = W + (blockIdx.x - 2) * per_block;
  u32 sum = 0;
  if (traffic == LOADS || traffic == LOADS_L2) {
    // LOADS_L2: the block's first 1/16 of its share, 16 times over (L2-resident after the first pass).
    const uint4* v = reinterpret_cast<const uint4*>(src);
    const size_t n = per_block / 16;
    const size_t m = traffic == LOADS_L2 ? n / 16 : n;
    for (size_t j = 0; j < n; j += m) sum += read_words<4>(v, m);
  } else if ((traffic == PREFETCH || traffic == PREFETCH_PACED) && threadIdx.x == 0) {
    unsigned long long next = now_ns();
    for (size_t off = 0; off + PF_CHUNK <= per_block; off += PF_CHUNK) {
      if (traffic == PREFETCH_PACED) {
        while (now_ns() < next) {
        }
        next += gap_ns;
      }
      bulk_prefetch_l2(src + off, PF_CHUNK);
    }
  }
  finish_block(sum, t0, sums, stamps);
}

/// Every block: optionally bulk-prefetch its share of M into L2, spin until `wait_ns`
/// after its start, then read the share with 16-byte loads (stamps: read start, end).
template <int U>
__global__ void __launch_bounds__(THREADS, 1) read_kernel(const unsigned char* M, size_t per_block, int prefetch, u32 wait_ns,
                                                          unsigned long long* stamps, u32* sums) {
  const unsigned long long t0 = now_ns();
  const unsigned char* src = M + blockIdx.x * per_block;
  if (prefetch) {
    // Spread the prefetches over the block's warps' lane 0: one issuing thread per warp.
    const int w = warp_id();
    if (lane_id() == 0)
      for (size_t off = (size_t)w * PF_CHUNK; off + PF_CHUNK <= per_block; off += (size_t)(THREADS / 32) * PF_CHUNK)
        bulk_prefetch_l2(src + off, PF_CHUNK);
  }
  while (now_ns() - t0 < wait_ns) {
  }
  __syncthreads();
  const unsigned long long a = now_ns();
  const u32 sum = read_words<U>(reinterpret_cast<const uint4*>(src), per_block / 16);
  finish_block(sum, a, sums, stamps);
}

/// Reads `bytes` of `junk` so the next case starts with nothing of M in L2.
__global__ void flush_kernel(const uint4* junk, size_t n, u32* sink) {
  u32 s = 0;
  for (size_t k = blockIdx.x * blockDim.x + threadIdx.x; k < n; k += (size_t)gridDim.x * blockDim.x) s += junk[k].x;
  if (s == 0x12345678u) *sink = s;
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const size_t total = 256ull << 20, junk_bytes = 256ull << 20;
  unsigned char *w, *junk;
  u32 *flags, *sums;
  unsigned long long *stamps, *probe;
  cudaMalloc(&w, total);
  cudaMemset(w, 1, total);
  cudaMalloc(&junk, junk_bytes);
  cudaMemset(junk, 2, junk_bytes);
  cudaMalloc(&flags, 256);
  cudaMalloc(&sums, sms * 4);
  cudaMalloc(&stamps, 2 * sms * 8);
  cudaMalloc(&probe, 16);
  auto flush = [&] { flush_kernel<<<sms * 4, 256>>>(reinterpret_cast<const uint4*>(junk), junk_bytes / 16, sums); };
  auto span = [&](int first_block) {
    std::vector<unsigned long long> st(2 * sms);
    cudaMemcpy(st.data(), stamps, st.size() * 8, cudaMemcpyDeviceToHost);
    unsigned long long lo = ~0ull, hi = 0;
    for (int b = first_block; b < sms; ++b) lo = std::min(lo, st[2 * b]), hi = std::max(hi, st[2 * b + 1]);
    return (hi - lo) / 1e3;
  };

  // Part 1: flag latency under traffic.
  const size_t per_block = total / (sms - 2) / PF_CHUNK * PF_CHUNK;
  const int trips = 20;
  struct Case {
    const char* name;
    int traffic;
    u32 gap_ns;
  } cases[] = {{"nothing", NONE, 0},
               {"register loads (16 warps/SM)", LOADS, 0},
               {"register loads, L2-resident 16 MB read 16 times", LOADS_L2, 0},
               {"bulk prefetch, unpaced", PREFETCH, 0},
               {"bulk prefetch, 16 KB / 400 ns / SM (~5.3 TB/s)", PREFETCH_PACED, 400},
               {"bulk prefetch, 16 KB / 500 ns / SM (~4.3 TB/s)", PREFETCH_PACED, 500},
               {"bulk prefetch, 16 KB / 700 ns / SM (~3.0 TB/s)", PREFETCH_PACED, 700},
               {"bulk prefetch, 16 KB / 1000 ns / SM (~2.1 TB/s)", PREFETCH_PACED, 1000}};
  printf("Part 1: one-way flag latency SM0<->SM1 (ping-pong, %d round trips from 3 us in), %d other SMs streaming %zu MB\n", trips,
         sms - 2, (per_block * (sms - 2)) >> 20);
  for (const Case& c : cases) {
    std::vector<double> lat, dur;
    for (int r = 0; r < 14; ++r) {
      flush();
      cudaMemset(flags, 0, 256);
      ping_kernel<<<sms, THREADS>>>(w, per_block, c.traffic, c.gap_ns, flags, trips, probe, stamps, sums);
      unsigned long long pr[2];
      cudaMemcpy(pr, probe, 16, cudaMemcpyDeviceToHost);
      if (r < 4) continue;
      lat.push_back((double)(pr[1] - pr[0]) / 1e3 / (2 * trips));
      dur.push_back(span(2));
    }
    const double d = median(dur);
    printf("  %-48s one-way %.2f us (median of 10); traffic kernel span %.1f us (%.2f TB/s issued)\n", c.name, median(lat), d,
           per_block * (sms - 2) / d / 1e6);
  }

  // Part 2: reading a phase's matrix cold vs after bulk prefetch + wait.
  printf("Part 2: reading M bytes over %d blocks x %d threads, 16-byte evict-first loads, U per thread in flight (median of 10, L2 flushed before each)\n", sms,
         THREADS);
  const u32 want_word = 0x01010101u;
  for (int U : {4, 8, 16})
  for (size_t mb : {3, 6, 14, 28}) {
    const size_t pb = (mb << 20) / sms / PF_CHUNK * PF_CHUNK;
    for (auto [pf, wait] : std::vector<std::pair<int, u32>>{{0, 0}, {1, 0}, {1, 1000}, {1, 2000}, {1, 3000}, {1, 5000}, {1, 20000}}) {
      std::vector<double> us;
      bool ok = true;
      for (int r = 0; r < 14; ++r) {
        flush();
        if (U == 4) read_kernel<4><<<sms, THREADS>>>(w, pb, pf, wait, stamps, sums);
        else if (U == 8) read_kernel<8><<<sms, THREADS>>>(w, pb, pf, wait, stamps, sums);
        else read_kernel<16><<<sms, THREADS>>>(w, pb, pf, wait, stamps, sums);
        std::vector<u32> hs(sms);
        cudaMemcpy(hs.data(), sums, sms * 4, cudaMemcpyDeviceToHost);
        for (u32 s : hs) ok &= s == (u32)((pb / 4) * (size_t)want_word);
        if (r >= 4) us.push_back(span(0));
      }
      const double t = median(us);
      printf("  U %2d (%2d KB/SM) M %2zu MB  %-10s wait %5.1f us: read %.2f us (%.2f TB/s) %s\n", U, U * THREADS * 16 / 1024, (pb * sms) >> 20, pf ? "prefetched" : "cold",
             wait / 1e3, t, pb * sms / t / 1e6, ok ? "sums ok" : "WRONG SUMS");
    }
  }
  if (cudaError_t e = cudaGetLastError()) printf("CUDA error %s\n", cudaGetErrorString(e));
  return 0;
}
