// Micro-benchmark for the next step of the TP kernel (perf-notes "TMA bulk copies"): can
// weights stream through shared memory by TMA bulk copies (cp.async.bulk, issued by one
// lane, completion on an mbarrier) without slowing the flag polls and peer stores that the
// kernel's phases wait on? The per-thread cp.async staging of `tp_ahead` did slow them.
//   stream: y = W·x for Qwen2.5-Coder-1.5B's TP 2 gate/up and down shapes, every warp's
//     rows (grid_rows' groups) streamed through a ring of S stages of its own by bulk
//     copies, against grid_rows (16-byte loads into registers) in the same process;
//   poll: one block's flag store seen by another block's spinning load, µs, while 0, 96
//     or 192 KB of copies per SM are in flight (cp.async, 16 bytes per thread, or bulk
//     copies) on every block, or on every block but the storer and / or the poller.
// Built by scripts/gpu/stream_micro.sh; prints one line per case.
#include "common.cuh"
#include "ops/matvec.cuh"
#include "micro_bufs.cuh"
#include "bulk_copy.cuh"
#include "sync.cuh"
#include <algorithm>
#include <cstdio>
#include <vector>

constexpr int THREADS = 512, WARPS = THREADS / 32;

__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

/// Every warp streams its groups of NR rows (group g = warp·grid + block, as grid_rows)
/// through S stages of CH bytes: lane 0 keeps S bulk copies in flight; the lanes read
/// 16-byte words of a stage, each word within one row.
template <int K, int NR, int CH, int S>
__device__ void bulk_rows(const bf16_t* W, int rows, const float* xs, float* y, unsigned char* ring, unsigned long long* bars) {
  constexpr int GB = NR * K * 2;  // bytes of one group
  static_assert(GB % CH == 0 && CH % 16 == 0, "a group is whole stages of whole words");
  constexpr int CPG = GB / CH;  // stages per group
  const int lane = lane_id(), gw = warp_id() * gridDim.x + blockIdx.x, nw = WARPS * gridDim.x;
  const int groups = (rows + NR - 1) / NR;
  const int mine = gw < groups ? (groups - 1 - gw) / nw + 1 : 0;
  const int chunks = mine * CPG;
  auto src = [&](int i) { return reinterpret_cast<const unsigned char*>(W) + (size_t)(gw + (i / CPG) * nw) * GB + (size_t)(i % CPG) * CH; };
  if (lane == 0)
    for (int i = 0; i < S && i < chunks; ++i) {
      mbar_expect(&bars[i], CH);
      bulk_copy(ring + i * CH, src(i), CH, &bars[i]);
    }
  float acc[NR];
  for (int i = 0; i < chunks; ++i) {
    const int st = i % S;
    if (i % CPG == 0)
      for (int r = 0; r < NR; ++r) acc[r] = 0.f;
    mbar_wait(&bars[st], (i / S) & 1);
    const uint4* words = reinterpret_cast<const uint4*>(ring + st * CH);
    for (int w = lane; w < CH / 16; w += 32) {
      const int e = (i % CPG) * (CH / 2) + w * 8;  // element within the group
      const int r = e / K, c = e % K;
      const float d = dot8(words[w], *reinterpret_cast<const float4*>(xs + c), *reinterpret_cast<const float4*>(xs + c + 4));
#pragma unroll
      for (int q = 0; q < NR; ++q)
        if (q == r) acc[q] += d;
    }
    __syncwarp();
    if (lane == 0 && i + S < chunks) {
      fence_proxy_async();  // the generic reads of this stage before the async write
      mbar_expect(&bars[st], CH);
      bulk_copy(ring + st * CH, src(i + S), CH, &bars[st]);
    }
    if (i % CPG == CPG - 1) {
      const int g = gw + (i / CPG) * nw;
#pragma unroll
      for (int q = 0; q < NR; ++q) {
        const float v = warp_sum(acc[q]);
        if (lane == 0 && g * NR + q < rows) y[g * NR + q] = v;
      }
    }
  }
}

template <int K, int NR, int CH, int S>
__global__ void __launch_bounds__(THREADS, 1) stream_kernel(const bf16_t* W, int rows, const float* x, float* y, int op,
                                                            unsigned long long* stamps) {
  __shared__ float xs[K];
  __shared__ unsigned long long bars[WARPS * S];
  extern __shared__ __align__(128) unsigned char dyn[];
  const unsigned long long t0 = now_ns();
  for (int i = threadIdx.x; i < K; i += THREADS) xs[i] = x[i];
  if (threadIdx.x < WARPS * S) mbar_init(&bars[threadIdx.x]);
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  __syncthreads();
  if (op == 0) grid_rows<K, NR, WARPS>(W, rows, xs, [&](int r, float v) { y[r] = v; });
  else bulk_rows<K, NR, CH, S>(W, rows, xs, y, dyn + warp_id() * S * CH, bars + warp_id() * S);
  __syncthreads();
  if (threadIdx.x == 0) {
    stamps[2 * blockIdx.x] = t0;
    stamps[2 * blockIdx.x + 1] = now_ns();
  }
}

template <int K, int NR, int CH, int S>
void run_stream(const char* name, int rows, int blocks) {
  Bufs b(K, rows, blocks);
  const int smem = WARPS * S * CH;
  cudaFuncSetAttribute(stream_kernel<K, NR, CH, S>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  for (int op = 0; op < 2; ++op) {
    cudaMemset(b.y, 0, rows * sizeof(float));
    const auto [med, lo] =
        b.time_us([&](const bf16_t* w) { stream_kernel<K, NR, CH, S><<<blocks, THREADS, smem>>>(w, rows, b.x, b.y, op, b.st); });
    printf("%-22s K %5d rows %5d NR %d %3d blocks %-22s: %7.2f us (min %7.2f) %.2f TB/s %s\n", name, K, rows, NR, blocks,
           op == 0 ? "grid_rows (registers)" : "bulk ring", med, lo, b.n * 2.0 / med / 1e6, b.check_sums(K, rows));
    if (op == 1) printf("%48s stage %d B x %d per warp\n", "", CH, S);
  }
  if (cudaError_t e = cudaGetLastError()) printf("CUDA error %s\n", cudaGetErrorString(e));
}

// ---- poll latency under copies ------------------------------------------------------

/// Which blocks issue the copies: whether an SM's queue or the whole memory system's
/// delays a poll decides if blocks that only poll (a role split: some SMs stage the next
/// phase's weights, others run the latency-bound chain) would wake on time.
enum CopyWhere { EVERY_BLOCK, NOT_POLLER, NOT_STORER, NEITHER };
const char* where_name[] = {"every block", "all but the poller", "all but the storer", "neither storer nor poller"};

/// Block 0 stores the flag `delay_ns` after the start (the copies in full flight); block
/// 1's thread 0 spins on it. Meanwhile warps 1.. of the blocks `where` names issue
/// `bytes` of copies (mode 1 cp.async, 2 bulk) into shared memory from their own region
/// of `src` (mode 3: loads into registers). Block 0 records its store time, block 1 the time it saw the flag.
__global__ void __launch_bounds__(THREADS, 1) poll_kernel(const unsigned char* src, u32* flag, int mode, int where, int bytes,
                                                          int delay_ns, unsigned long long* out) {
  extern __shared__ __align__(128) unsigned char buf[];
  __shared__ unsigned long long bar;
  if (threadIdx.x == 0) mbar_init(&bar);
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  __syncthreads();
  const unsigned char* mine = src + (size_t)blockIdx.x * bytes;
  const bool skip = (blockIdx.x == 1 && (where == NOT_POLLER || where == NEITHER)) ||
                    (blockIdx.x == 0 && (where == NOT_STORER || where == NEITHER));
  const int m = skip ? 0 : mode;
  const unsigned long long t0 = now_ns();
  if (warp_id() > 0 && m == 1) {
    for (int off = (threadIdx.x - 32) * 16; off < bytes; off += (THREADS - 32) * 16)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(saddr(buf + off)), "l"(mine + off) : "memory");
    asm volatile("cp.async.commit_group;" ::: "memory");
  }
  if (m == 2 && threadIdx.x == 32) {
    mbar_expect(&bar, bytes);
    for (int off = 0; off < bytes; off += 16384) bulk_copy(buf + off, mine + off, 16384, &bar);
  }
  if (warp_id() > 0 && m == 3) {  // loads into registers, 8 per lane in flight (a matrix phase's stream)
    u32 sum = 0;
    const int stride = (THREADS - 32) * 16;
    for (int off = (threadIdx.x - 32) * 16; off < bytes; off += 8 * stride) {
      uint4 v[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = off + i * stride < bytes ? __ldcs(reinterpret_cast<const uint4*>(mine + off + i * stride)) : uint4{};
#pragma unroll
      for (int i = 0; i < 8; ++i) sum += v[i].x ^ v[i].w;
    }
    if (sum == 0x12345678u) buf[0] = 1;  // keeps the loads
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    while (now_ns() - t0 < (unsigned long long)delay_ns) {
    }
    const unsigned long long ts = now_ns();
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(flag), "r"(1u) : "memory");
    out[0] = ts;
  }
  if (blockIdx.x == 1 && threadIdx.x == 0) {
    u32 v = 0;
    while (v == 0) v = ld_acquire_gpu(flag);
    out[1] = now_ns();
  }
  if (warp_id() > 0 && m == 1) asm volatile("cp.async.wait_all;" ::: "memory");
  if (m == 2 && threadIdx.x == 32) mbar_wait(&bar, 0);
  __syncthreads();
}

void run_poll(int blocks) {
  constexpr int MAX_BYTES = 192 * 1024;
  unsigned char* src;
  u32* flag;
  unsigned long long* out;
  const size_t bytes = (size_t)blocks * MAX_BYTES * 4;
  cudaMalloc(&src, bytes);
  cudaMemset(src, 1, bytes);
  cudaMalloc(&flag, 4);
  cudaMalloc(&out, 16);
  cudaFuncSetAttribute(poll_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, MAX_BYTES);
  const char* names[] = {"no copies", "cp.async", "bulk", "loads"};
  struct Case { int mode, where, kb, delay_ns; };
  const Case cases[] = {{0, EVERY_BLOCK, 0, 1000},    {1, EVERY_BLOCK, 96, 1000}, {1, NOT_POLLER, 96, 1000},
                        {1, NOT_STORER, 96, 1000},    {1, NEITHER, 96, 1000},     {2, NEITHER, 96, 1000},
                        {1, EVERY_BLOCK, 192, 2000},  {1, NEITHER, 192, 2000},    {2, NEITHER, 192, 2000},
                        {3, EVERY_BLOCK, 192, 2000},  {3, NEITHER, 192, 2000}};
  for (const Case& c : cases) {
    std::vector<double> us;
    for (int r = 0; r < 60; ++r) {
      cudaMemset(flag, 0, 4);
      poll_kernel<<<blocks, THREADS, MAX_BYTES>>>(src + (size_t)(r % 4) * blocks * MAX_BYTES, flag, c.mode, c.where, c.kb * 1024,
                                                  c.delay_ns, out);
      unsigned long long h[2];
      cudaMemcpy(h, out, 16, cudaMemcpyDeviceToHost);
      if (r >= 4) us.push_back(((long long)h[1] - (long long)h[0]) / 1e3);
    }
    std::sort(us.begin(), us.end());
    printf("flag seen by another SM, %-9s %3d KB per SM in %-25s (store at %d ns): median %5.2f us (min %5.2f, p90 %5.2f)\n",
           names[c.mode], c.kb, where_name[c.where], c.delay_ns, us[us.size() / 2], us[0], us[us.size() * 9 / 10]);
  }
  if (cudaError_t e = cudaGetLastError()) printf("CUDA error %s\n", cudaGetErrorString(e));
  cudaFree(src), cudaFree(flag), cudaFree(out);
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  run_poll(sms);
  // Qwen2.5-Coder-1.5B at TP 2: gate/up (2 rows of 3 KB per group) and down (8,960-byte rows),
  // on every SM and on the 78 blocks tp_split 48 leaves the FFN (132 - 6 attention - 48):
  // can fewer SMs stream the FFN at the copy bandwidth with deeper rings?
  for (int blocks : {sms, 78}) {
    run_stream<1536, 2, 6144, 2>("qwen TP2 gate/up", 8960, blocks);
    run_stream<1536, 2, 3072, 4>("qwen TP2 gate/up", 8960, blocks);
    run_stream<1536, 2, 1536, 8>("qwen TP2 gate/up", 8960, blocks);
    run_stream<4480, 1, 4480, 2>("qwen TP2 down", 1536, blocks);
    run_stream<4480, 2, 4480, 3>("qwen TP2 down", 1536, blocks);
  }
  run_stream<2048, 2, 4096, 3>("llama gate/up", 16384, sms);
  return 0;
}
