//! The one options value the engine takes: where it runs and how. The CLI builds it
//! once from its flags (each with its `PEREGRINE_*` variable); tests build it
//! explicitly. The engine itself reads no environment variable, so an exported
//! variable can never change what a test means.

use std::path::{Path, PathBuf};

use crate::cpu::act_quant::ActPrecision;
use crate::cpu::isa::Isa;
use crate::error::{Error, Result};

/// Where a runtime should run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    /// CUDA when a device is present, else the CPU.
    Auto,
    Cpu,
    Cuda,
}

impl std::str::FromStr for Device {
    type Err = Error;
    fn from_str(s: &str) -> Result<Device> {
        match s {
            "auto" => Ok(Device::Auto),
            "cpu" => Ok(Device::Cpu),
            "cuda" | "gpu" => Ok(Device::Cuda),
            other => Err(Error::InvalidRequest(format!("unknown device `{other}` (expected auto, cpu or cuda)"))),
        }
    }
}

/// The CPU runtimes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CpuRuntimeKind {
    /// Packed quantized weights, SIMD kernels, a thread team (the default).
    #[default]
    Fast,
    /// Every weight dequantized to f32, one thread, no tricks (bisecting, fidelity).
    Reference,
}

impl std::str::FromStr for CpuRuntimeKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<CpuRuntimeKind> {
        match s.trim() {
            "" | "fast" => Ok(CpuRuntimeKind::Fast),
            "reference" | "ref" => Ok(CpuRuntimeKind::Reference),
            other => Err(Error::InvalidRequest(format!("unknown CPU runtime `{other}` (expected fast or reference)"))),
        }
    }
}

/// How the CPU runtime is built.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CpuOptions {
    pub runtime: CpuRuntimeKind,
    /// Threads of the fast runtime's team (`None`: every available core).
    pub threads: Option<usize>,
    /// The highest instruction set the fast kernels may use (`None`: the best this CPU has).
    pub isa_cap: Option<Isa>,
    /// Activation precision of the fast runtime's integer kernels.
    pub act_precision: ActPrecision,
}

/// How prompts reach the KV cache on the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PrefillMode {
    /// Positions 0..P-2 as one batch (cuBLAS GEMMs) before the persistent kernel.
    #[default]
    Batched,
    /// Every prompt token as a step of the persistent kernel (a cross-check).
    Tokens,
}

impl std::str::FromStr for PrefillMode {
    type Err = Error;
    fn from_str(s: &str) -> Result<PrefillMode> {
        match s.trim() {
            "batched" => Ok(PrefillMode::Batched),
            "tokens" => Ok(PrefillMode::Tokens),
            other => Err(Error::InvalidRequest(format!("unknown prefill mode `{other}` (expected batched or tokens)"))),
        }
    }
}

/// How the GPU holds a model's weight matrices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GpuWeights {
    /// Every matrix converted to bf16 at load. The default while the quantized row loop
    /// streams fewer bytes but runs slower than the bf16 one (docs/benchmarks.md).
    #[default]
    Bf16,
    /// Each quantized GGUF matrix in its own format (Q8_0, Q4_0, Q4_1, Q4_K, Q6_K),
    /// dequantized in the kernel's registers; float matrices as bf16. A matrix that
    /// cannot run natively (a tensor-parallel column split off its block boundary, gate
    /// and up of different types) runs as bf16, with one log line naming it.
    Auto,
    /// As `Auto`, but a matrix that cannot run natively is an error.
    Native,
    /// Float matrices quantized to Q8_0 at load (changes outputs slightly); quantized
    /// GGUF matrices keep their own format.
    Q8_0,
}

impl std::str::FromStr for GpuWeights {
    type Err = Error;
    fn from_str(s: &str) -> Result<GpuWeights> {
        match s.trim() {
            "auto" => Ok(GpuWeights::Auto),
            "native" => Ok(GpuWeights::Native),
            "bf16" => Ok(GpuWeights::Bf16),
            "q8_0" => Ok(GpuWeights::Q8_0),
            other => Err(Error::InvalidRequest(format!("unknown GPU weight format `{other}` (expected auto, native, bf16 or q8_0)"))),
        }
    }
}

/// Threads per block of the persistent kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ThreadsPolicy {
    /// The cached choice for this shape, or measured at the first load (and cached).
    #[default]
    Tuned,
    /// This many, nothing measured.
    Fixed(u32),
}

impl std::str::FromStr for ThreadsPolicy {
    type Err = Error;
    fn from_str(s: &str) -> Result<ThreadsPolicy> {
        let s = s.trim();
        if s == "tune" || s == "auto" {
            return Ok(ThreadsPolicy::Tuned);
        }
        match s.parse::<u32>() {
            Ok(t) if (32..=1024).contains(&t) && t % 32 == 0 => Ok(ThreadsPolicy::Fixed(t)),
            _ => Err(Error::InvalidRequest(format!("threads per block `{s}`: expected `tune` or a multiple of 32 from 32 to 1024"))),
        }
    }
}

/// Checks that change how the GPU kernel runs without changing what it computes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diagnostics {
    /// Race hunting: random delays in the dependency waits of random blocks.
    pub chaos: bool,
    /// Tensor parallelism: the one rank whose kernel gets the chaos delays.
    pub chaos_rank: u32,
    /// Phase trace: timer stamps at every dependency wait and arrival of one step.
    pub trace: bool,
}

/// Folders the CUDA runtime loads its libraries from and keeps compiled kernels in.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CudaPaths {
    /// Folders searched for libnvrtc, in order (then the dynamic linker's own search).
    pub nvrtc_dirs: Vec<PathBuf>,
    /// Folders searched for libcublas and libcublasLt, in order.
    pub cublas_dirs: Vec<PathBuf>,
    /// Where compiled kernels (and the threads-per-block choices) are kept; `None`: nowhere.
    pub cubin_cache: Option<PathBuf>,
}

/// Toolkit library folders searched after the explicit ones and `$CUDA_HOME/lib64`.
const TOOLKIT_LIB_DIRS: &[&str] = &["/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib", "/usr/lib/x86_64-linux-gnu"];
/// Python library roots whose `python3*/{site,dist}-packages/nvidia/{cu13,cublas}/lib`
/// hold the wheels' copy of cuBLAS (PyTorch's CUDA 13 and CUDA 12 layouts).
const PYTHON_ROOTS: &[&str] = &["/usr/local/lib", "/usr/lib", "/opt/conda/lib"];

impl CudaPaths {
    /// The standard search: `nvrtc_dir` / `cublas_dir` first, then each of `cuda_homes`'
    /// `lib64`, the toolkit folders, and (cuBLAS) the Python wheels under the system
    /// roots and `home`/.local/lib; compiled kernels in `cubin_cache`.
    pub fn standard(
        nvrtc_dir: Option<&Path>,
        cublas_dir: Option<&Path>,
        cuda_homes: &[PathBuf],
        home: Option<&Path>,
        cubin_cache: Option<PathBuf>,
    ) -> CudaPaths {
        let toolkit: Vec<PathBuf> = cuda_homes.iter().map(|h| h.join("lib64")).chain(TOOLKIT_LIB_DIRS.iter().map(PathBuf::from)).collect();
        let nvrtc_dirs = nvrtc_dir.map(Path::to_path_buf).into_iter().chain(toolkit.iter().cloned()).collect();
        let mut roots: Vec<PathBuf> = PYTHON_ROOTS.iter().map(PathBuf::from).collect();
        roots.extend(home.map(|h| h.join(".local/lib")));
        let wheels = roots.iter().flat_map(|root| python_wheel_dirs(root));
        let cublas_dirs = cublas_dir.map(Path::to_path_buf).into_iter().chain(toolkit).chain(wheels).collect();
        CudaPaths { nvrtc_dirs, cublas_dirs, cubin_cache }
    }
}

impl CudaPaths {
    /// [`CudaPaths::standard`] from the variables the `peregrine` CLI reads
    /// (PEREGRINE_NVRTC_DIR, PEREGRINE_CUBLAS_DIR, CUDA_HOME / CUDA_PATH, HOME,
    /// PEREGRINE_CUBIN_CACHE, else ~/.cache/peregrine/cubins), looked up through `var`:
    /// the checks and benchmarks that have no CLI of their own use it.
    pub fn from_vars(var: &dyn Fn(&str) -> Option<PathBuf>) -> CudaPaths {
        let homes: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"].iter().filter_map(|v| var(v)).collect();
        let home = var("HOME");
        let cache = var("PEREGRINE_CUBIN_CACHE").or_else(|| home.as_ref().map(|h| h.join(".cache/peregrine/cubins")));
        CudaPaths::standard(var("PEREGRINE_NVRTC_DIR").as_deref(), var("PEREGRINE_CUBLAS_DIR").as_deref(), &homes, home.as_deref(), cache)
    }
}

/// `root`/python3*/{site,dist}-packages/nvidia/{cu13,cublas}/lib, for the Pythons present.
fn python_wheel_dirs(root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root) else { return Vec::new() };
    let mut pythons: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("python3")))
        .collect();
    pythons.sort();
    let mut dirs = Vec::new();
    for py in pythons {
        for pkgs in ["site-packages", "dist-packages"] {
            for sub in ["nvidia/cu13/lib", "nvidia/cublas/lib"] {
                dirs.push(py.join(pkgs).join(sub));
            }
        }
    }
    dirs
}

/// How the CUDA runtime is built.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CudaOptions {
    pub prefill: PrefillMode,
    pub threads: ThreadsPolicy,
    /// KV-cache positions per request (`None`: the kernel's default, capped by the model's context).
    pub kv_positions: Option<usize>,
    /// Tensor-parallel ranks may share one GPU (tests of TP and DTP on a single GPU).
    pub share_gpu: bool,
    /// Tensor parallelism: weights loaded evict-first from L2 (on one GPU always). Off
    /// until measured on two GPUs.
    pub tp_weights_evict_first: bool,
    /// Tensor parallelism: the down phase streams while its input lands (on one GPU
    /// always). Off until measured on two GPUs.
    pub tp_down_waves: bool,
    /// Quantized rows load their next chunks during the current ones' arithmetic. Off
    /// until measured on a GPU.
    pub quant_pipeline: bool,
    /// Constrained requests run on one GPU with the kernel masking each token's logits
    /// by a bitmap the host computes. Off until run on a GPU.
    pub grammar_mask: bool,
    /// Tensor-parallel ranks on one GPU (a Laneformer's lanes there) run as one kernel
    /// launch instead of one per rank. Off until run on a GPU.
    pub one_launch: bool,
    /// How the weight matrices are held on the GPU.
    pub weights: GpuWeights,
    pub diagnostics: Diagnostics,
    pub paths: CudaPaths,
}

/// Everything the engine needs to know about where and how it runs a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineOptions {
    pub device: Device,
    /// CUDA devices to use (several: tensor parallelism).
    pub gpus: Vec<usize>,
    pub cpu: CpuOptions,
    pub cuda: CudaOptions,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions { device: Device::Auto, gpus: vec![0], cpu: CpuOptions::default(), cuda: CudaOptions::default() }
    }
}

impl EngineOptions {
    /// The CPU with its defaults (what most tests run).
    pub fn cpu() -> EngineOptions {
        EngineOptions { device: Device::Cpu, ..EngineOptions::default() }
    }
}
