//! One matrix times PG_ROWS_NV vectors in one pass (ops/matvec_rows.cuh), alone: the
//! apparatus that measures what an extra row of a step costs on a GPU, and checks that
//! each vector gets the bits a single-vector pass gives (backend/engine/src/cuda/rows_cost.rs).
//! Row groups go warp-major over the grid as in the decode kernel. Without the defines
//! (scripts/check-kernels.sh) the file is empty.
#ifdef PG_ROWS_K
#include "common.cuh"
#include "ops/matvec_rows.cuh"

constexpr int RC_K = PG_ROWS_K;
constexpr int RC_NV = PG_ROWS_NV;
constexpr int RC_NR = 2;
constexpr int RC_WARPS = 16;
/// The input vectors in shared memory (read by the host to size the launch).
extern "C" __constant__ u32 pg_rows_smem_bytes = RC_NV * RC_K * 4;

/// y[v][row] = W[row] · x[v] for every row and v < NV; x is `[NV][K]`, y `[NV][rows]`.
extern "C" __global__ void __launch_bounds__(RC_WARPS * WARP_SIZE, 1)
    pg_rows_cost(const bf16_t* w, int rows, const float* x, float* y) {
  extern __shared__ float4 rc_smem[];
  float* xs = reinterpret_cast<float*>(rc_smem);
  for (int i = threadIdx.x; i < RC_NV * RC_K; i += blockDim.x) xs[i] = x[i];
  __syncthreads();
  const int groups = (rows + RC_NR - 1) / RC_NR;
  for (int g = (int)(warp_id() * gridDim.x + blockIdx.x); g < groups; g += RC_WARPS * (int)gridDim.x) {
    float acc[RC_NV][RC_NR];
    warp_rows_dot_multi<RC_K, RC_NR, RC_NV, PG_UNROLL>(w, g * RC_NR, rows, xs, acc);
    if (lane_id() == 0) {
#pragma unroll
      for (int v = 0; v < RC_NV; ++v)
#pragma unroll
        for (int r = 0; r < RC_NR; ++r)
          if (g * RC_NR + r < rows) y[(size_t)v * rows + g * RC_NR + r] = acc[v][r];
    }
  }
}
#endif
