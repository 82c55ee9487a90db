// Micro-benchmark of one streamed matrix phase alone: y = W·x over 132 blocks × 512
// threads with the decode kernel's grid_rows (ops/matvec.cuh), for the shapes whose
// phases stream below the copy bandwidth in the kernel (SmolLM2-135M's LM head: a few
// row groups per warp). Each launch stamps %globaltimer at every block's start and end;
// a run's time is the last end minus the first start. Four copies of W rotate so no
// launch finds its rows in L2. Variants (op):
//   0 grid_rows as the kernel runs it;
//   1 the same loads without the arithmetic (XOR of the words): is it issue-bound?
//   2 each warp's next group requested from L2 (prefetch) before reducing this one;
//   3 block-contiguous rows: block b streams rows [b·R/G, (b+1)·R/G) warp-interleaved;
//   4 / 5 split-K: S = 2 / 4 warps of a block share a row group, each streaming K/S, the
//     partial sums added in warp order through shared memory (for phases with fewer
//     groups than warps);
//   6 the kernel's staged ring (stage_group, then warp_rows_dot_staged, 8 iterations);
//   7 split-K 2 with each half streamed through a 4-iteration cp.async ring per warp;
//   split S/B (split_rows.cuh, next to this file): block-contiguous rows, each row cut into S
//     K-segments, equal runs of segments per warp, B loads per lane in flight.
// Modes: (none) every op on the slow shapes; `lm` LM heads; `split` split segments; `tail`
// grid_rows on whole rounds of row groups against the gate/up shapes' partial last rounds.
// Built by scripts/gpu/stream_micro.sh; prints one line per (shape, op).
#include "common.cuh"
#include "ops/matvec.cuh"
#include "micro_bufs.cuh"
#include "split_rows.cuh"
#include <cstdio>
#include <vector>
#include <algorithm>
#include <string>
#include <cmath>

constexpr int THREADS = 512, WARPS = THREADS / 32;


template <int K, int NR>
__device__ __forceinline__ void rows_xor(const bf16_t* W, int row0, int rows, float (&acc)[NR]) {
  constexpr int CHUNKS = K / 8, ITERS = (CHUNKS + 31) / 32;
  unsigned a[NR];
#pragma unroll
  for (int r = 0; r < NR; ++r) a[r] = 0;
#pragma unroll ROW_UNROLL
  for (int it = 0; it < ITERS; ++it) {
    const int c = it * 32 + lane_id();
    if (CHUNKS % 32 == 0 || c < CHUNKS) {
#pragma unroll
      for (int r = 0; r < NR; ++r) {
        const uint4 w = ld_weight16(W + (size_t)min(row0 + r, rows - 1) * K + c * 8);
        a[r] ^= w.x ^ w.y ^ w.z ^ w.w;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < NR; ++r) acc[r] = warp_sum((float)(a[r] & 1023));
}

/// Split-K: warp w takes part w % S of group (w / S)·grid + block, K/S columns each.
template <int K, int NR, int S>
__device__ void split_rows(const bf16_t* W, int rows, const float* xs, float* y, float* part_s) {
  static_assert(K % (8 * S) == 0, "K splits into whole 16-byte words");
  constexpr int KS = K / S;
  const int groups = (rows + NR - 1) / NR, per_round = (WARPS / S) * gridDim.x;
  const int part = warp_id() % S;
  for (int base = 0; base < groups; base += per_round) {  // block-uniform trip count
    const int g = base + (warp_id() / S) * gridDim.x + blockIdx.x;
    float acc[NR];
    if (g < groups) {
      // Columns [part·KS, (part+1)·KS) of the group's rows: KS-wide rows K apart.
      warp_rows_dot<KS, NR, K>(W + part * KS, g * NR, rows, xs + part * KS, acc);
      if (lane_id() == 0)
        for (int r = 0; r < NR; ++r) part_s[warp_id() * NR + r] = acc[r];
    }
    __syncthreads();
    if (g < groups && part == 0 && lane_id() < NR && g * NR + lane_id() < rows) {
      float v = 0.f;
      for (int p = 0; p < S; ++p) v += part_s[(warp_id() + p) * NR + lane_id()];
      y[g * NR + lane_id()] = v;
    }
    __syncthreads();
  }
}

/// Split-K over 2 warps, each half of the group's rows through a ring of N iterations
/// (cp.async, one commit group per iteration, the kernel's ring scheme on a half row).
template <int K, int NR, int N>
__device__ void split_ring_rows(const bf16_t* W, int rows, const float* xs, float* y, float* part_s, uint4* ring) {
  constexpr int S = 2, KS = K / S, CHUNKS = KS / 8, ITERS = (CHUNKS + 31) / 32;
  const int groups = (rows + NR - 1) / NR, per_round = (WARPS / S) * gridDim.x;
  const int part = warp_id() % S;
  uint4* mine = ring + warp_id() * N * NR * 32;
  for (int base = 0; base < groups; base += per_round) {
    const int g = base + (warp_id() / S) * gridDim.x + blockIdx.x;
    const bool has = g < groups;
    auto issue = [&](int it) {
      const int c = it * 32 + lane_id();
      if (has && it < ITERS && (CHUNKS % 32 == 0 || c < CHUNKS))
        for (int r = 0; r < NR; ++r)
          cp_async16(mine + ((it % N) * NR + r) * 32 + lane_id(), W + (size_t)min(g * NR + r, rows - 1) * K + part * KS + c * 8);
      cp_async_commit();
    };
    for (int it = 0; it < N; ++it) issue(it);
    float acc[NR];
#pragma unroll
    for (int r = 0; r < NR; ++r) acc[r] = 0.f;
    for (int it = 0; it < ITERS; ++it) {
      cp_async_wait_group<N - 1>();
      const int c = it * 32 + lane_id();
      if (has && (CHUNKS % 32 == 0 || c < CHUNKS)) {
        const float4 xa = *reinterpret_cast<const float4*>(xs + part * KS + c * 8);
        const float4 xb = *reinterpret_cast<const float4*>(xs + part * KS + c * 8 + 4);
#pragma unroll
        for (int r = 0; r < NR; ++r) acc[r] += dot8(mine[((it % N) * NR + r) * 32 + lane_id()], xa, xb);
      }
      issue(it + N);
    }
    cp_async_wait_all();
#pragma unroll
    for (int r = 0; r < NR; ++r) acc[r] = warp_sum(acc[r]);
    if (has && lane_id() == 0)
      for (int r = 0; r < NR; ++r) part_s[warp_id() * NR + r] = acc[r];
    __syncthreads();
    if (has && part == 0 && lane_id() < NR && g * NR + lane_id() < rows)
      y[g * NR + lane_id()] = part_s[warp_id() * NR + lane_id()] + part_s[(warp_id() + 1) * NR + lane_id()];
    __syncthreads();
  }
}

template <int K, int NR>
__global__ void __launch_bounds__(THREADS, 1) stream(const bf16_t* W, int rows, const float* x, float* y, int op,
                                                     unsigned long long* stamps) {
  __shared__ float xs[K];
  const unsigned long long t0 = now_ns();
  for (int i = threadIdx.x; i < K; i += THREADS) xs[i] = x[i];
  __syncthreads();
  auto store = [&](int r, float v) { y[r] = v; };
  extern __shared__ uint4 dyn[];
  if (op == 0) {
    grid_rows<K, NR, WARPS>(W, rows, xs, store);
  } else if (op == 4 || op == 5) {
    float* part_s = reinterpret_cast<float*>(dyn);
    if constexpr (K % 32 == 0) {
      if (op == 4) split_rows<K, NR, 2>(W, rows, xs, y, part_s);
      else split_rows<K, NR, 4>(W, rows, xs, y, part_s);
    }
  } else if (op == 7) {
    if constexpr (K % 16 == 0) split_ring_rows<K, NR, 4>(W, rows, xs, y, reinterpret_cast<float*>(dyn), dyn + WARPS * NR);
  } else if (op == 6) {
    using St = RowStage<K, NR, 8>;
    uint4* slot = dyn + warp_id() * St::WORDS;
    if (block_has_rows<NR>(rows)) stage_rows<K, NR, WARPS, 8>(W, rows, slot);
    grid_rows<K, NR, WARPS, 8>(W, rows, xs, store, slot);
  } else {
    const int groups = (rows + NR - 1) / NR;
    int g0 = warp_id() * gridDim.x + blockIdx.x, step = WARPS * gridDim.x, end = groups;
    if (op == 3) {  // block-contiguous: this block's groups, warps interleaved
      const int per = (groups + gridDim.x - 1) / gridDim.x;
      g0 = blockIdx.x * per + warp_id();
      step = WARPS;
      end = min(groups, (int)(blockIdx.x + 1) * per);
    }
    for (int g = g0; g < end; g += step) {
      float acc[NR];
      if (op == 2 && g + step < end) {
        const bf16_t* next = W + (size_t)(g + step) * NR * K;
        for (int e = lane_id() * 64; e < NR * K && (g + step) * NR + e / K < rows; e += 32 * 64) prefetch_l2(next + e);
      }
      if (op == 1) rows_xor<K, NR>(W, g * NR, rows, acc);
      else warp_rows_dot<K, NR>(W, g * NR, rows, xs, acc);
      if (lane_id() == 0)
        for (int r = 0; r < NR; ++r)
          if (g * NR + r < rows) y[g * NR + r] = acc[r];
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    stamps[2 * blockIdx.x] = t0;
    stamps[2 * blockIdx.x + 1] = now_ns();
  }
}

template <int K, int S, int B>
__global__ void __launch_bounds__(THREADS, 1) stream_split(const bf16_t* W, int rows, const float* x, float* y,
                                                           unsigned long long* stamps) {
  __shared__ float xs[K];
  extern __shared__ float part[];
  const unsigned long long t0 = now_ns();
  for (int i = threadIdx.x; i < K; i += THREADS) xs[i] = x[i];
  __syncthreads();
  int r0, r1;
  split_row_range<2>(rows, blockIdx.x, gridDim.x, r0, r1);
  split_rows_partials<K, S, B, WARPS>(W, r0, r1, xs, part);
  __syncthreads();
  for (int r = r0 + threadIdx.x; r < r1; r += THREADS) y[r] = split_row_sum<S>(part, r - r0);
  __syncthreads();
  if (threadIdx.x == 0) {
    stamps[2 * blockIdx.x] = t0;
    stamps[2 * blockIdx.x + 1] = now_ns();
  }
}


/// Times stream_split<K, S, B> and checks every row's sum (all weights equal, x = 0.5).
template <int K, int S, int B>
void run_split(const char* name, int rows, int blocks) {
  Bufs b(K, rows, blocks);
  cudaMemset(b.y, 0, rows * sizeof(float));
  const int smem = 32 * 1024;
  cudaFuncSetAttribute(stream_split<K, S, B>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  const auto [med, lo] = b.time_us([&](const bf16_t* w) { stream_split<K, S, B><<<blocks, THREADS, smem>>>(w, rows, b.x, b.y, b.st); });
  printf("%-28s K %5d rows %6d split S %2d B %2d: %7.2f us (min %7.2f)  %.2f TB/s  %s\n", name, K, rows, S, B, med, lo,
         b.n * 2.0 / med / 1e6, b.check_sums(K, rows));
  if (cudaError_t e = cudaGetLastError()) printf("CUDA error %s\n", cudaGetErrorString(e));
}

/// `ops`: a bit per variant to run (default all).
template <int K, int NR>
void run(const char* name, int rows, int blocks, unsigned ops = 0xff) {
  Bufs b(K, rows, blocks);
  // op 6's slots, or op 7's 4-iteration rings, whichever is larger.
  const int ring = std::max(WARPS * RowStage<K, NR, 8>::WORDS, WARPS * 4 * NR * 32) * 16;
  const bool fits = ring + WARPS * NR * 16 + K * 4 <= 200 * 1024;
  const int smem = fits ? ring + WARPS * NR * 16 : WARPS * NR * 4;
  cudaFuncSetAttribute(stream<K, NR>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  for (int op = 0; op < 8; ++op) {
    if ((op >= 6 && !fits) || !(ops >> op & 1)) continue;
    const auto [med, lo] = b.time_us([&](const bf16_t* w) { stream<K, NR><<<blocks, THREADS, smem>>>(w, rows, b.x, b.y, op, b.st); });
    printf("%-28s K %5d rows %6d NR %d op %d: %7.2f us (min %7.2f)  %.2f TB/s\n", name, K, rows, NR, op, med, lo, b.n * 2.0 / med / 1e6);
  }
  if (cudaError_t e = cudaGetLastError()) printf("CUDA error %s\n", cudaGetErrorString(e));
}

int main(int argc, char** argv) {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  // `lm`: the LM heads of Qwen2.5-Coder-1.5B (K 1536) whole and at TP 2 (half the
  // vocabulary per rank), grid_rows and the staged ring, 2 / 4 / 8 rows per warp group:
  // the TP 2 kernel's LM head streams at ~1.9 TB/s (62 µs for 117 MB).
  if (argc > 1 && std::string(argv[1]) == "lm") {
    run<1536, 4>("qwen LM head", 151936, sms, 0x41);
    run<1536, 2>("qwen TP2 LM head", 75968, sms, 0x41);
    run<1536, 4>("qwen TP2 LM head", 75968, sms, 0x41);
    run<1536, 8>("qwen TP2 LM head", 75968, sms, 0x41);
    return 0;
  }
  // `tail`: grid_rows on whole rounds of row groups (every warp of the grid one group
  // per round) against the gate/up shapes' partial last rounds: what the tail costs.
  if (argc > 1 && std::string(argv[1]) == "tail") {
    const int round = 2 * WARPS * sms;  // rows of one round at NR 2
    for (int rows : {2 * round, 8960, 3 * round}) run<1536, 2>("K 1536 rounds", rows, sms, 0x1);
    for (int rows : {4 * round, 17920, 5 * round}) run<1536, 2>("K 1536 rounds", rows, sms, 0x1);
    for (int rows : {3 * round, 12288, 4 * round}) run<3072, 2>("K 3072 rounds", rows, sms, 0x1);
    return 0;
  }
  // `split`: only the split-segment variants against grid_rows on the TP shapes.
  if (argc > 1 && std::string(argv[1]) == "split") {
    run<1536, 2>("qwen TP2 gate/up", 8960, sms, 0x41);
    run_split<1536, 1, 8>("qwen TP2 gate/up", 8960, sms);
    run_split<1536, 2, 8>("qwen TP2 gate/up", 8960, sms);
    run_split<1536, 3, 8>("qwen TP2 gate/up", 8960, sms);
    run_split<1536, 3, 4>("qwen TP2 gate/up", 8960, sms);
    run_split<1536, 3, 12>("qwen TP2 gate/up", 8960, sms);
    run_split<1536, 6, 8>("qwen TP2 gate/up", 8960, sms);
    run<4480, 2>("qwen TP2 down", 1536, sms, 0x41);
    run_split<4480, 1, 8>("qwen TP2 down", 1536, sms);
    run_split<4480, 4, 8>("qwen TP2 down", 1536, sms);
    run_split<4480, 5, 8>("qwen TP2 down", 1536, sms);
    run_split<4480, 8, 8>("qwen TP2 down", 1536, sms);
    run_split<4480, 8, 12>("qwen TP2 down", 1536, sms);
    run_split<4480, 10, 8>("qwen TP2 down", 1536, sms);
    run<768, 2>("qwen TP2 o-proj (K 768)", 1536, sms, 0x41);
    run_split<768, 2, 8>("qwen TP2 o-proj (K 768)", 1536, sms);
    run<1536, 2>("qwen TP2 qkv", 1024, sms, 0x41);
    run_split<1536, 2, 8>("qwen TP2 qkv", 1024, sms);
    run<3072, 2>("dtp-2b TP2 gate/up", 12288, sms, 0x41);
    run_split<3072, 3, 8>("dtp-2b TP2 gate/up", 12288, sms);
    run<6144, 2>("dtp-2b TP2 down", 3072, sms, 0x41);
    run_split<6144, 8, 8>("dtp-2b TP2 down", 3072, sms);
    run<2048, 2>("llama gate/up", 16384, sms, 0x41);
    run_split<2048, 2, 8>("llama gate/up", 16384, sms);
    run<8192, 2>("llama down", 2048, sms, 0x41);
    run_split<8192, 8, 8>("llama down", 2048, sms);
    run_split<8192, 16, 8>("llama down", 2048, sms);
    return 0;
  }
  run<576, 4>("smollm2 LM head", 49152, sms);
  run<576, 2>("smollm2 LM head", 49152, sms);
  run<576, 8>("smollm2 LM head", 49152, sms);
  run<1536, 2>("qwen TP2 gate/up", 8960, sms);
  run<1536, 4>("qwen TP2 gate/up", 8960, sms);
  run<4480, 2>("qwen TP2 down", 1536, sms);
  run<4480, 4>("qwen TP2 down", 1536, sms);
  run<2048, 2>("llama gate/up", 16384, sms);
  run<2048, 4>("llama LM head", 128256, sms);
  return 0;
}
