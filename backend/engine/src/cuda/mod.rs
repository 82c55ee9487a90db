//! The CUDA runtime: the whole token loop in one persistent kernel per request
//! (kernels/decode.cu), launched through cudarc with the driver and NVRTC loaded at
//! run time, so the same binary runs with or without a GPU. Built without the
//! `cuda` feature, the same API exists and every constructor returns a clear error
//! (candle's dummy backend pattern).

pub mod layout;
pub mod quant;
mod run_stats;
pub mod trace;
pub mod tune;

#[cfg(feature = "cuda")]
pub mod cublas;
#[cfg(feature = "cuda")]
mod hung;
#[cfg(feature = "cuda")]
pub mod nvrtc;
#[cfg(feature = "cuda")]
pub mod prefill;
#[cfg(feature = "cuda")]
pub mod qcheck;
#[cfg(feature = "cuda")]
mod runtime;
#[cfg(feature = "cuda")]
pub use runtime::{compile_only, devices, measure_copy_bandwidth, tune_file_in, CudaRuntime, DEFAULT_STALL_TIMEOUT};

#[cfg(not(feature = "cuda"))]
mod stub;
#[cfg(not(feature = "cuda"))]
pub use stub::{compile_only, devices, measure_copy_bandwidth, tune_file_in, CudaRuntime};

pub use layout::KernelOptions;

/// A driver call's error as the engine's, naming what failed.
#[cfg(feature = "cuda")]
pub(crate) fn cuda_err(what: &str) -> impl Fn(cudarc::driver::DriverError) -> crate::error::Error + '_ {
    move |e| crate::error::Error::Cuda(format!("{what}: {e:?}"))
}
pub use run_stats::{PrefillSplit, RunStats};
