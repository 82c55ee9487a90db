//! The CUDA runtime: the whole token loop in one persistent kernel per request
//! (kernels/decode.cu), launched through cudarc with the driver and NVRTC loaded at
//! run time, so the same binary runs with or without a GPU. Built without the
//! `cuda` feature, the same API exists and every constructor returns a clear error
//! (candle's dummy backend pattern).

// Without the `cuda` feature only the stub runs: the kernel's contract (layout's
// defines, quant's repacking, the trace record) and the run statistics' fields then
// have no reader unless the measuring apparatus (`lab`) builds on them.
#[cfg_attr(not(any(feature = "cuda", feature = "lab")), allow(dead_code))]
pub mod layout;
#[cfg_attr(not(any(feature = "cuda", feature = "lab")), allow(dead_code, unused_imports))]
pub mod quant;
#[cfg_attr(not(any(feature = "cuda", feature = "lab")), allow(dead_code))]
mod run_stats;
#[cfg_attr(not(any(feature = "cuda", feature = "lab")), allow(dead_code))]
pub mod trace;
pub mod tune;

#[cfg(feature = "cuda")]
pub mod cublas;
#[cfg(feature = "cuda")]
mod hung;
#[cfg(feature = "cuda")]
pub mod nvrtc;
/// The quantized matrix-vector check kernel: the GPU tests', never the product's.
#[cfg(all(feature = "cuda", feature = "lab"))]
pub mod qcheck;
/// What an extra row of a step costs (kernels/rows_cost.cu): the measuring apparatus's.
#[cfg(all(feature = "cuda", feature = "lab"))]
pub mod rows_cost;
#[cfg(feature = "cuda")]
mod runtime;
#[cfg(feature = "cuda")]
pub use runtime::{devices, tune_file_in, CudaRuntime};
// Compile-only builds and the copy-bandwidth ceiling serve the measuring apparatus
// (CI's NVRTC check, benchmarks), which may also name the stall timeout; the product
// reaches none of them from outside the runtime.
#[cfg(all(feature = "cuda", feature = "lab"))]
pub use runtime::{compile_only, measure_copy_bandwidth, DEFAULT_STALL_TIMEOUT};

#[cfg(not(feature = "cuda"))]
mod stub;
#[cfg(not(feature = "cuda"))]
pub use stub::{devices, tune_file_in, CudaRuntime};
#[cfg(all(not(feature = "cuda"), feature = "lab"))]
pub use stub::{compile_only, measure_copy_bandwidth};

#[cfg(any(feature = "cuda", feature = "lab"))]
pub use crate::error::CudaError;
pub use layout::KernelOptions;

/// A driver call's error as the engine's, naming what failed.
#[cfg(feature = "cuda")]
pub(crate) fn cuda_err(what: &str) -> impl Fn(cudarc::driver::DriverError) -> crate::error::Error + '_ {
    move |source| CudaError::Driver { context: what.to_string(), source }.into()
}

/// A raw driver result as the engine's, naming what failed.
#[cfg(feature = "cuda")]
pub(crate) fn check(what: &str, r: cudarc::driver::sys::CUresult) -> crate::error::Result<()> {
    r.result().map_err(cuda_err(what))
}

/// An allocation's or upload's error as the engine's: running out of device memory
/// becomes [`CudaError::OutOfMemory`] with `what`, its `bytes` and the device's free
/// memory at that point, so a load that does not fit says what did not fit and by how much.
#[cfg(feature = "cuda")]
pub(crate) fn alloc_err(what: impl Into<String>, bytes: usize) -> impl FnOnce(cudarc::driver::DriverError) -> crate::error::Error {
    move |source| {
        let what = what.into();
        if source.0 != cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            return CudaError::Driver { context: what, source }.into();
        }
        // The failed call bound the allocating context, so this asks its device. A
        // failing query (or no driver to ask) still reports the allocation, with free
        // and total read as 0.
        // SAFETY: probing for the driver library by name has no preconditions.
        let driver = unsafe { cudarc::driver::sys::is_culib_present() };
        let (free, total) = if driver { cudarc::driver::result::mem_get_info().unwrap_or((0, 0)) } else { (0, 0) };
        CudaError::OutOfMemory { what, bytes: bytes as u64, free: free as u64, total: total as u64 }.into()
    }
}

pub use run_stats::RunStats;
/// The batched prefill's GPU time split: read only through the lab-only probes.
#[cfg(feature = "lab")]
pub use run_stats::PrefillSplit;
