//! The CUDA API in a build without the `cuda` feature: same names, and every entry
//! point says how to get the real one.

#[cfg(feature = "lab")]
use super::PrefillSplit;
use super::RunStats;
use crate::config::ModelConfig;
use crate::cuda::layout::KernelOptions;
use crate::error::{CudaError, Result};
use crate::options::CudaOptions;
use crate::runtime::{BackendInfo, DecodeJob, Flow, RunEnd, Runtime};
use crate::sampling::Sampled;
use crate::weights::Weights;

fn disabled<T>() -> Result<T> {
    Err(CudaError::NotBuilt.into())
}

/// Always an error: no CUDA in this build.
pub fn devices() -> Result<Vec<String>> {
    disabled()
}

/// Always an error: no CUDA in this build.
#[cfg(feature = "lab")]
pub fn compile_only(
    _config: &ModelConfig,
    _options: &KernelOptions,
    _tp: usize,
    _dtp: Option<&crate::dtp::DtpSchedule>,
    _arch: &str,
    _cache: Option<&std::path::Path>,
) -> Result<usize> {
    disabled()
}

/// Cannot be constructed in this build.
pub struct CudaRuntime {
    config: ModelConfig,
}

impl CudaRuntime {
    #[cfg(feature = "lab")]
    pub fn new(
        _config: &ModelConfig,
        _weights: &Weights,
        _ordinals: &[usize],
        _cuda: &CudaOptions,
        _dtp: Option<crate::dtp::DtpSchedule>,
    ) -> Result<CudaRuntime> {
        disabled()
    }
    pub fn with_kernel(
        _config: &ModelConfig,
        _weights: &Weights,
        _ordinals: &[usize],
        _cuda: &CudaOptions,
        _options: KernelOptions,
        _dtp: Option<crate::dtp::DtpSchedule>,
    ) -> Result<CudaRuntime> {
        disabled()
    }
    #[cfg(feature = "lab")]
    pub fn tp(&self) -> usize {
        1
    }
    pub fn set_options(&mut self, _options: KernelOptions) -> Result<()> {
        disabled()
    }
    pub fn options(&self) -> &KernelOptions {
        unreachable!("a CudaRuntime cannot exist without the cuda feature")
    }
    pub fn batched_prefill(&self) -> bool {
        false
    }
    pub fn last_run(&self) -> &RunStats {
        unreachable!("a CudaRuntime cannot exist without the cuda feature")
    }
    #[cfg(feature = "lab")]
    pub fn streamed_bytes_per_token(&self) -> u64 {
        0
    }
    pub fn describe(&self) -> String {
        String::new()
    }
    pub fn kernel_identity(&self) -> String {
        String::new()
    }
    pub fn kernel_identity_before(_ordinals: &[usize], _config: &ModelConfig, _dtp: Option<&crate::dtp::DtpSchedule>) -> Result<String> {
        disabled()
    }
    pub fn tune_file(&self, _key: &str) -> Option<std::path::PathBuf> {
        None
    }
}

/// The measuring apparatus's hooks, as in the real runtime (`lab` only).
#[cfg(feature = "lab")]
impl CudaRuntime {
    pub fn set_prefill_profile(&mut self, _on: bool) {}
    pub fn last_prefill_split(&self) -> Option<&PrefillSplit> {
        None
    }
    pub fn set_debug_logits(&mut self, _on: bool) {}
    pub fn debug_logits(&self) -> &[Vec<f32>] {
        &[]
    }
    pub fn last_trace(&self) -> Option<&crate::cuda::trace::RawTrace> {
        None
    }
}

impl Runtime for CudaRuntime {
    fn config(&self) -> &ModelConfig {
        &self.config
    }
    fn backend(&self) -> BackendInfo {
        BackendInfo { kind: "cuda".into(), devices: Vec::new() }
    }
    fn generate(&mut self, _job: &DecodeJob<'_>, _on_token: &mut dyn FnMut(&Sampled) -> Flow) -> Result<RunEnd> {
        disabled()
    }
    fn score(&mut self, _tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        disabled()
    }
}

/// No measurements are kept in this build.
pub fn tune_file_in(_paths: &crate::options::CudaPaths, _key: &str) -> Option<std::path::PathBuf> {
    None
}

/// Always an error: no CUDA in this build.
#[cfg(feature = "lab")]
pub fn measure_copy_bandwidth(_ordinal: usize, _bytes: usize, _repeats: usize) -> Result<f64> {
    disabled()
}
