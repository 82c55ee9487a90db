//! The enum-like engine flags as clap `ValueEnum`s: clap lists their values in `--help`
//! and rejects anything else before the engine sees it; each maps onto the engine's own
//! type (the engine itself does not depend on clap).

use peregrine_engine::{ActPrecision, CpuRuntimeKind, Device, GpuWeights, Isa, PrefillMode, ThreadsPolicy};

/// `--device`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum DeviceFlag {
    /// CUDA when a device is present, else the CPU.
    #[default]
    Auto,
    Cpu,
    #[value(alias = "gpu")]
    Cuda,
}

impl From<DeviceFlag> for Device {
    fn from(flag: DeviceFlag) -> Device {
        match flag {
            DeviceFlag::Auto => Device::Auto,
            DeviceFlag::Cpu => Device::Cpu,
            DeviceFlag::Cuda => Device::Cuda,
        }
    }
}

/// `--cpu-runtime`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum CpuRuntimeFlag {
    /// Packed quantized weights, SIMD kernels, every core.
    #[default]
    Fast,
    /// Float32, one op at a time: the reference for bisecting a mismatch.
    #[value(alias = "ref")]
    Reference,
}

impl From<CpuRuntimeFlag> for CpuRuntimeKind {
    fn from(flag: CpuRuntimeFlag) -> CpuRuntimeKind {
        match flag {
            CpuRuntimeFlag::Fast => CpuRuntimeKind::Fast,
            CpuRuntimeFlag::Reference => CpuRuntimeKind::Reference,
        }
    }
}

/// `--cpu-isa`: the highest instruction set the CPU kernels may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum IsaFlag {
    Portable,
    Avx2,
    Avx512,
}

impl From<IsaFlag> for Isa {
    fn from(flag: IsaFlag) -> Isa {
        match flag {
            IsaFlag::Portable => Isa::Portable,
            IsaFlag::Avx2 => Isa::Avx2,
            IsaFlag::Avx512 => Isa::Avx512Vnni,
        }
    }
}

/// `--cpu-act-bits`: activation precision of the fast CPU runtime's integer kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ActBitsFlag {
    #[default]
    #[value(name = "16")]
    Sixteen,
    #[value(name = "8")]
    Eight,
}

impl From<ActBitsFlag> for ActPrecision {
    fn from(flag: ActBitsFlag) -> ActPrecision {
        match flag {
            ActBitsFlag::Sixteen => ActPrecision::Int16,
            ActBitsFlag::Eight => ActPrecision::Int8,
        }
    }
}

/// `--prefill`: how the GPU runs a prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum PrefillFlag {
    /// cuBLAS GEMMs over the whole prompt before the persistent kernel.
    #[default]
    Batched,
    /// One persistent-kernel step per prompt token.
    Tokens,
}

impl From<PrefillFlag> for PrefillMode {
    fn from(flag: PrefillFlag) -> PrefillMode {
        match flag {
            PrefillFlag::Batched => PrefillMode::Batched,
            PrefillFlag::Tokens => PrefillMode::Tokens,
        }
    }
}

/// `--gpu-weights`: how the GPU holds the weight matrices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum GpuWeightsFlag {
    #[default]
    Bf16,
    Auto,
    Native,
    #[value(name = "q8_0")]
    Q8_0,
}

impl From<GpuWeightsFlag> for GpuWeights {
    fn from(flag: GpuWeightsFlag) -> GpuWeights {
        match flag {
            GpuWeightsFlag::Bf16 => GpuWeights::Bf16,
            GpuWeightsFlag::Auto => GpuWeights::Auto,
            GpuWeightsFlag::Native => GpuWeights::Native,
            GpuWeightsFlag::Q8_0 => GpuWeights::Q8_0,
        }
    }
}

/// `--threads`: `tune` or a multiple of 32 (the engine's parser says which are valid).
pub fn parse_threads(s: &str) -> Result<ThreadsPolicy, String> {
    s.parse::<ThreadsPolicy>().map_err(|e| e.to_string())
}
