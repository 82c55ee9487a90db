//! Which CPU runtime the engine builds: the fast one by default, the float32
//! reference when the options ask for it (for bisecting and fidelity).

use crate::config::ModelConfig;
use crate::cpu::fast_runtime::{FastOptions, FastRuntime};
use crate::cpu::reference_runtime::ReferenceRuntime;
use crate::error::Result;
use crate::options::{CpuOptions, CpuRuntimeKind};
use crate::runtime::Runtime;
use crate::weights::Weights;

/// Builds the CPU runtime `options` name.
pub fn build_cpu_runtime(options: &CpuOptions, config: &ModelConfig, weights: &Weights) -> Result<Box<dyn Runtime>> {
    Ok(match options.runtime {
        CpuRuntimeKind::Fast => Box::new(FastRuntime::new(config, weights, FastOptions::from_options(options))?),
        CpuRuntimeKind::Reference => Box::new(ReferenceRuntime::new(config, weights)?),
    })
}
