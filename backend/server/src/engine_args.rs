//! The engine's options on the command line: each flag once, with its `PEREGRINE_*`
//! variable (clap's `env`, shown in `--help`), turned into one [`EngineOptions`]. This
//! is the only place that reads the environment for the engine.

use std::path::{Path, PathBuf};

use peregrine_engine::{CpuOptions, CudaOptions, CudaPaths, EngineOptions, ThreadsPolicy};

use crate::engine_flags::{parse_threads, ActBitsFlag, CpuRuntimeFlag, DeviceFlag, GpuWeightsFlag, IsaFlag, PrefillFlag};
use crate::error::{Error, Result};

/// Where the model comes from and where and how it runs (shared by every subcommand).
#[derive(Debug, Clone, clap::Args)]
pub struct ModelArgs {
    /// Model file (GGUF) or Hugging Face directory; default: the cached default model.
    #[arg(long, env = "PEREGRINE_MODEL")]
    pub model: Option<PathBuf>,
    /// Where the model runs: auto is CUDA when a device is present, else the CPU.
    #[arg(long, env = "PEREGRINE_DEVICE", value_enum, default_value_t = DeviceFlag::Auto)]
    pub device: DeviceFlag,
    /// Tensor-parallel degree: GPUs one model is split over (the bench's `--shape` takes a list, e.g. 1,2).
    #[arg(long, env = "PEREGRINE_TP", default_value = "1")]
    pub tp: String,
    /// CUDA devices to use, comma-separated (default: the first --tp); a device may repeat with --tp-share-gpu.
    #[arg(long, env = "PEREGRINE_GPUS")]
    pub gpus: Option<String>,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// How the CPU and CUDA runtimes are built.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct EngineArgs {
    /// CPU runtime: fast (packed quantized weights, SIMD) or reference (float32, for bisecting).
    #[arg(long, env = "PEREGRINE_CPU_RUNTIME", value_enum, default_value_t = CpuRuntimeFlag::Fast)]
    pub cpu_runtime: CpuRuntimeFlag,
    /// Threads of the fast CPU runtime (default: every core).
    #[arg(long, env = "PEREGRINE_CPU_THREADS")]
    pub cpu_threads: Option<usize>,
    /// Highest instruction set the CPU kernels may use (default: the best present).
    #[arg(long, env = "PEREGRINE_CPU_ISA", value_enum)]
    pub cpu_isa: Option<IsaFlag>,
    /// Activation precision of the fast CPU runtime's integer kernels, in bits.
    #[arg(long, env = "PEREGRINE_CPU_ACT_BITS", value_enum, default_value_t = ActBitsFlag::Sixteen)]
    pub cpu_act_bits: ActBitsFlag,
    /// GPU prompts: batched (cuBLAS GEMMs before the persistent kernel) or tokens (one kernel step per token).
    #[arg(long, env = "PEREGRINE_PREFILL", value_enum, default_value_t = PrefillFlag::Batched)]
    pub prefill: PrefillFlag,
    /// GPU weight matrices: bf16 (convert all; the fastest today), auto (quantized GGUF
    /// formats streamed as they are, others bf16), native (as auto, but refuse a matrix
    /// that cannot run natively), or q8_0 (quantize float matrices at load too; outputs
    /// change slightly).
    #[arg(long, env = "PEREGRINE_GPU_WEIGHTS", value_enum, default_value_t = GpuWeightsFlag::Bf16)]
    pub gpu_weights: GpuWeightsFlag,
    /// GPU threads per block: tune (measured at a shape's first load, then cached) or a multiple of 32.
    #[arg(long, env = "PEREGRINE_THREADS", default_value = "tune", value_parser = parse_threads)]
    pub threads: ThreadsPolicy,
    /// GPU KV-cache positions per request (default: the kernel's default, capped by the model's context).
    #[arg(long, env = "PEREGRINE_KV_POSITIONS")]
    pub kv_positions: Option<usize>,
    // The six switches below are for tests and experiments: accepted, hidden from `--help`.
    /// Let tensor-parallel ranks share one GPU (tests of TP and DTP on a single GPU; not for speed).
    #[arg(long, env = "PEREGRINE_TP_SHARE_GPU", hide = true)]
    pub tp_share_gpu: bool,
    /// Tensor parallelism: weights loaded evict-first from L2 (not yet measured on two GPUs).
    #[arg(long, env = "PEREGRINE_TP_EVICT_FIRST", hide = true)]
    pub tp_evict_first: bool,
    /// Tensor parallelism: the down phase streams while its input lands (not yet measured on two GPUs).
    #[arg(long, env = "PEREGRINE_TP_DOWN_WAVES", hide = true)]
    pub tp_down_waves: bool,
    /// Quantized GPU rows load their next chunks during the current ones' arithmetic (not yet measured).
    #[arg(long, env = "PEREGRINE_GPU_Q_PIPELINE", hide = true)]
    pub gpu_q_pipeline: bool,
    /// Constrained decoding on one GPU: the kernel masks each token's logits by the host's bitmap (not yet run on a GPU).
    #[arg(long, env = "PEREGRINE_GPU_GRAMMAR_MASK", hide = true)]
    pub gpu_grammar_mask: bool,
    /// Tensor-parallel ranks sharing one GPU (a Laneformer's lanes) run as one kernel (not yet run on a GPU).
    #[arg(long, env = "PEREGRINE_TP_ONE_LAUNCH", hide = true)]
    pub tp_one_launch: bool,
    /// Folder holding libnvrtc (searched first; then $CUDA_HOME and the toolkit folders).
    #[arg(long, env = "PEREGRINE_NVRTC_DIR")]
    pub nvrtc_dir: Option<PathBuf>,
    /// Folder holding libcublas and libcublasLt (searched first; then $CUDA_HOME, the toolkit, Python wheels).
    #[arg(long, env = "PEREGRINE_CUBLAS_DIR")]
    pub cublas_dir: Option<PathBuf>,
    /// Folder for compiled GPU kernels and thread choices (default: <cache>/cubins).
    #[arg(long, env = "PEREGRINE_CUBIN_CACHE")]
    pub cubin_cache: Option<PathBuf>,
}

/// `${XDG_CACHE_HOME:-~/.cache}/peregrine`, where the default model and the kernels are kept.
pub fn cache_root() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("peregrine"))
}

impl ModelArgs {
    /// The tensor-parallel degrees of `--tp` (a comma-separated list).
    pub fn tp_list(&self) -> Result<Vec<usize>> {
        self.tp
            .split(',')
            .map(|t| {
                t.trim().parse::<usize>().ok().filter(|&n| n >= 1).ok_or_else(|| Error::bad("tp", format!("`{t}` is not a degree ≥ 1")))
            })
            .collect()
    }

    /// The CUDA devices of a single-degree run (`serve`, `generate`, model benchmarks).
    pub fn gpus(&self) -> Result<Vec<usize>> {
        let tp = match self.tp_list()?.as_slice() {
            [one] => *one,
            _ => return Err(Error::bad("tp", "takes one degree here (a list only with the bench's --shape)")),
        };
        Ok(peregrine_engine::parse_gpus(tp, self.gpus.as_deref(), self.engine.tp_share_gpu)?)
    }

    /// The model path: `--model`, else the default model in the cache.
    pub fn model_path(&self) -> Result<PathBuf> {
        let models = cache_root().map(|r| r.join("models"));
        Ok(peregrine_engine::resolve_model_path(self.model.as_deref(), models.as_deref())?)
    }

    /// The engine options of a single-degree run.
    pub fn engine_options(&self) -> Result<EngineOptions> {
        Ok(EngineOptions { device: self.device.into(), gpus: self.gpus()?, cpu: self.engine.cpu_options()?, cuda: self.engine.cuda_options()? })
    }
}

impl EngineArgs {
    /// The CPU runtime's options.
    pub fn cpu_options(&self) -> Result<CpuOptions> {
        if self.cpu_threads == Some(0) {
            return Err(Error::bad("cpu-threads", "must be at least 1"));
        }
        Ok(CpuOptions {
            runtime: self.cpu_runtime.into(),
            threads: self.cpu_threads,
            isa_cap: self.cpu_isa.map(Into::into),
            act_precision: self.cpu_act_bits.into(),
        })
    }

    /// The CUDA runtime's options (library folders from the flags, then `$CUDA_HOME` /
    /// `$CUDA_PATH` and the standard places).
    pub fn cuda_options(&self) -> Result<CudaOptions> {
        let cuda_homes: Vec<PathBuf> =
            ["CUDA_HOME", "CUDA_PATH"].iter().filter_map(|v| std::env::var_os(v)).filter(|p| !p.is_empty()).map(PathBuf::from).collect();
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let cubin_cache = self.cubin_cache.clone().or_else(|| cache_root().map(|r| r.join("cubins")));
        let paths = CudaPaths::standard(self.nvrtc_dir.as_deref(), self.cublas_dir.as_deref(), &cuda_homes, home.as_deref(), cubin_cache);
        Ok(CudaOptions {
            prefill: self.prefill.into(),
            threads: self.threads,
            kv_positions: self.kv_positions,
            share_gpu: self.tp_share_gpu,
            tp_weights_evict_first: self.tp_evict_first,
            tp_down_waves: self.tp_down_waves,
            quant_pipeline: self.gpu_q_pipeline,
            grammar_mask: self.gpu_grammar_mask,
            one_launch: self.tp_one_launch,
            weights: self.gpu_weights.into(),
            diagnostics: Default::default(),
            paths,
        })
    }
}

/// The id the OpenAI API reports for a model path: its file (or folder) stem.
pub fn model_id(path: &Path) -> String {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into());
    name.strip_suffix(".gguf").map(str::to_string).unwrap_or(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use peregrine_engine::{ActPrecision, CpuRuntimeKind, GpuWeights, Isa, PrefillMode};

    fn args(tp: &str, gpus: Option<&str>) -> ModelArgs {
        ModelArgs { model: None, device: DeviceFlag::Cuda, tp: tp.into(), gpus: gpus.map(String::from), engine: EngineArgs::default() }
    }

    #[test]
    fn tp_takes_a_list_only_where_a_list_makes_sense() {
        assert_eq!(args("1,2", None).tp_list().expect("list"), vec![1, 2]);
        assert_eq!(args("2", Some("1,0")).gpus().expect("one degree"), vec![1, 0]);
        assert!(args("1,2", None).gpus().is_err(), "serve/generate take one degree");
        assert!(args("0", None).tp_list().is_err());
        assert!(args("two", None).tp_list().is_err());
    }

    /// The engine flags alone, parsed as the CLI parses them.
    #[derive(clap::Parser)]
    struct Flags {
        #[command(flatten)]
        engine: EngineArgs,
    }

    fn flags(args: &[&str]) -> std::result::Result<EngineArgs, String> {
        use clap::Parser;
        Flags::try_parse_from(std::iter::once("peregrine").chain(args.iter().copied())).map(|f| f.engine).map_err(|e| e.to_string())
    }

    #[test]
    fn engine_flags_become_options_or_clear_errors() {
        let e = flags(&[]).expect("defaults");
        assert_eq!(e.cpu_options().expect("defaults"), CpuOptions::default());
        let cuda = e.cuda_options().expect("defaults");
        assert_eq!((cuda.prefill, cuda.threads), (PrefillMode::Batched, ThreadsPolicy::Tuned));
        let fixed = flags(&["--threads", "448", "--prefill", "tokens"]).expect("fixed threads");
        let cuda = fixed.cuda_options().expect("fixed threads");
        assert_eq!((cuda.prefill, cuda.threads), (PrefillMode::Tokens, ThreadsPolicy::Fixed(448)));
        for (flag, value, needle) in [
            ("--threads", "100", "multiple of 32"),
            ("--prefill", "fast", "batched, tokens"),
            ("--cpu-act-bits", "4", "16, 8"),
            ("--cpu-isa", "sse9", "avx2"),
            ("--gpu-weights", "q3_k", "bf16, auto, native, q8_0"),
            ("--cpu-runtime", "turbo", "fast, reference"),
        ] {
            let err = flags(&[flag, value]).map(|_| ()).expect_err(flag);
            assert!(err.contains(needle), "{flag} {value}: {err}");
        }
        assert_eq!(e.cuda_options().expect("defaults").weights, GpuWeights::Bf16);
        for (value, want) in [("auto", GpuWeights::Auto), ("native", GpuWeights::Native), ("q8_0", GpuWeights::Q8_0)] {
            assert_eq!(flags(&["--gpu-weights", value]).expect(value).cuda_options().expect(value).weights, want);
        }
        let cpu = flags(&["--cpu-isa", "avx512", "--cpu-act-bits", "8", "--cpu-runtime", "ref"]).expect("cpu flags").cpu_options().expect("cpu");
        assert_eq!((cpu.isa_cap, cpu.act_precision, cpu.runtime), (Some(Isa::Avx512Vnni), ActPrecision::Int8, CpuRuntimeKind::Reference));
        let hidden = [flags(&["--tp-share-gpu", "--tp-evict-first", "--tp-down-waves", "--gpu-q-pipeline", "--gpu-grammar-mask", "--tp-one-launch"])
            .expect("hidden switches still parse")];
        let h = &hidden[0];
        assert!(h.tp_share_gpu && h.tp_evict_first && h.tp_down_waves && h.gpu_q_pipeline && h.gpu_grammar_mask && h.tp_one_launch);
        assert!(h.cuda_options().expect("hidden switches").one_launch);
    }
}
