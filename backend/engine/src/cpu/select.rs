//! Which CPU runtime the engine builds: the fast one by default, the float32
//! reference when `PEREGRINE_CPU_RUNTIME=reference` (for bisecting and fidelity).

use crate::config::ModelConfig;
use crate::cpu::fast_runtime::{FastOptions, FastRuntime};
use crate::cpu::reference_runtime::ReferenceRuntime;
use crate::error::{Error, Result};
use crate::runtime::Runtime;
use crate::weights::Weights;

/// Environment variable naming the CPU runtime: `fast` (default) or `reference`.
pub const RUNTIME_ENV: &str = "PEREGRINE_CPU_RUNTIME";

/// The CPU runtimes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuRuntimeKind {
    /// Packed quantized weights, SIMD kernels, a thread team (the default).
    Fast,
    /// Every weight dequantized to f32, one thread, no tricks.
    Reference,
}

impl std::str::FromStr for CpuRuntimeKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<CpuRuntimeKind> {
        match s.trim() {
            "" | "fast" => Ok(CpuRuntimeKind::Fast),
            "reference" | "ref" => Ok(CpuRuntimeKind::Reference),
            other => Err(Error::InvalidRequest(format!("unknown CPU runtime `{other}` in {RUNTIME_ENV} (expected fast or reference)"))),
        }
    }
}

impl CpuRuntimeKind {
    /// The kind `PEREGRINE_CPU_RUNTIME` names (fast when unset).
    pub fn from_env() -> Result<CpuRuntimeKind> {
        std::env::var(RUNTIME_ENV).unwrap_or_default().parse()
    }
}

/// Builds the CPU runtime of `kind`; the fast one takes its options from the environment.
pub fn build_cpu_runtime(kind: CpuRuntimeKind, config: &ModelConfig, weights: &Weights) -> Result<Box<dyn Runtime>> {
    Ok(match kind {
        CpuRuntimeKind::Fast => Box::new(FastRuntime::new(config, weights, FastOptions::from_env())?),
        CpuRuntimeKind::Reference => Box::new(ReferenceRuntime::new(config, weights)?),
    })
}
