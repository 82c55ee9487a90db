//! The quantized matrix-vector product alone (ops/qmatvec.cuh), for the GPU tests'
//! comparison against a float64 product on the host: y = W x for one matrix of `rows`
//! rows of K = PG_QCHECK_K elements in the format the tag says, the decode kernel's
//! row groups and lane order, one launch. Without the define (scripts/check-kernels.sh)
//! the file is empty.
#ifdef PG_QCHECK_K
#include "common.cuh"
#include "ops/qmatvec.cuh"

constexpr int QC_K = PG_QCHECK_K;
constexpr int QC_WARPS = 8;
/// The input floats, then their prepared chunks (read by the host).
extern "C" __constant__ u32 pg_qcheck_smem_bytes = QC_K * 4 + xq_bytes(QC_K);

extern "C" __global__ void __launch_bounds__(QC_WARPS * WARP_SIZE, 1)
    pg_qcheck(const unsigned char* w, u32 fmt, int rows, const float* x, float* y) {
  extern __shared__ float4 qc_smem[];
  float* xs = reinterpret_cast<float*>(qc_smem);
  for (int i = threadIdx.x; i < QC_K; i += blockDim.x) xs[i] = x[i];
  __syncthreads();
  unsigned char* xq = reinterpret_cast<unsigned char*>(xs + QC_K);
  qmat_grid_rows<QC_K, 2, QC_WARPS>(qmat1(w, fmt, rows), rows, xs, xq, [&](int r, float v) { y[r] = v; });
}
#endif
