//! [`Runtime`] on one CUDA GPU or several (tensor parallelism): weights uploaded once
//! as bf16, the persistent decode kernel (kernels/decode.cu) compiled by NVRTC for the
//! device, one launch per request and GPU, preceded on one GPU by the batched prefill of
//! the prompt (prefill/) unless `KernelOptions::batched_prefill` is off. The host
//! thread only polls the token ring in host-mapped memory, calls `on_token`, and raises
//! the stop flag when asked to stop.
//!
//! [`CudaRuntime`] is a composition of owned parts, each a type with its own state in
//! its own file: the GPUs and peer access ([`Devices`], devices.rs), the decode kernel
//! ([`Kernels`], kernel.rs), the weight shards ([`WeightShards`], weights.rs), each
//! rank's run buffers ([`Buffers`], buffers.rs), the batched prefill ([`BatchedPrefill`],
//! prefill/), and the host ring with stall detection ([`Launch`], launch.rs). One run
//! across them is run.rs; the measuring-only state is probes.rs. This file holds the
//! composition, its construction and the [`Runtime`] glue.

mod buffers;
mod devices;
mod grammar;
mod kernel;
mod launch;
mod prefill;
mod probes;
mod run;
mod weights;

use std::mem::ManuallyDrop;

use self::buffers::Buffers;
pub(crate) use self::devices::shared_per_block;
use self::devices::Devices;
pub use self::devices::devices;
#[cfg(feature = "lab")]
pub use self::devices::measure_copy_bandwidth;
#[cfg(feature = "lab")]
pub use self::kernel::compile_only;
use self::kernel::Kernels;
use self::launch::Launch;
#[cfg(feature = "lab")]
pub use self::launch::DEFAULT_STALL_TIMEOUT;
use self::prefill::BatchedPrefill;
use self::probes::Probes;
use self::run::PromptCache;
use self::weights::WeightShards;
use super::RunStats;
use crate::admission::check_fits;
use crate::config::ModelConfig;
use crate::cuda::layout::{self, Arg, KernelOptions};
use crate::cuda::nvrtc;
use crate::cuda::quant::WeightPlan;
pub(super) use crate::cuda::{alloc_err, check, cuda_err};
use crate::dtp::DtpSchedule;
use crate::error::{CudaError, Error, Result};
use crate::options::{CudaOptions, CudaPaths};
use crate::runtime::{BackendInfo, DecodeJob, Flow, RunEnd, Runtime};
use crate::sampling::Sampled;
use crate::weights::Weights;

/// What every part is built for: the model, each rank's share of it, the DTP schedule,
/// the kernel options in use and the KV cache's capacity.
pub(super) struct Shape {
    config: ModelConfig,
    /// Each rank's share of `config` (equal to it on one GPU).
    shard: ModelConfig,
    /// Delayed Tensor Parallelism's schedule (`None`: standard tensor parallelism or one GPU).
    dtp: Option<DtpSchedule>,
    options: KernelOptions,
    kv_cap: usize,
    /// Splits per head the partial-state buffer was sized for.
    alloc_splits: u32,
}

/// The persistent-kernel GPU runtime: one GPU, or tensor parallelism over several
/// (one persistent kernel per GPU, all-reduces inside the kernels over NVLink).
pub struct CudaRuntime {
    shape: Shape,
    devices: Devices,
    kernels: Kernels,
    // ManuallyDrop: after a hung run, freeing would block behind the kernel forever, so
    // a poisoned runtime leaks its device and pinned memory instead (see Drop).
    weights: ManuallyDrop<WeightShards>,
    buffers: ManuallyDrop<Buffers>,
    prefill: ManuallyDrop<BatchedPrefill>,
    launch: ManuallyDrop<Launch>,
    cache: PromptCache,
    last_run: RunStats,
    probes: Probes,
}

// The engine may build the runtime on one thread and run it on another.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<CudaRuntime>();
};

/// The text a kernel measurement is keyed by: the GPUs, the architecture, the grid, the
/// kernel sources, the shape and the parallelism (tune.rs adds the kernel options).
fn kernel_identity_of(names: &[String], arch: &str, grid: u32, config: &ModelConfig, dtp: Option<&DtpSchedule>) -> String {
    format!("{}|{arch}|grid {grid}|sources {:016x}|{config:?}|tp {}|{dtp:?}", names.join("+"), nvrtc::sources_hash(), names.len())
}

/// Where a load-time measurement keyed by `key` is kept: next to the cubins in `paths`.
pub fn tune_file_in(paths: &CudaPaths, key: &str) -> Option<std::path::PathBuf> {
    let h = nvrtc::fnv1a(&[key.as_bytes()]);
    paths.cubin_cache.as_ref().map(|d| d.join("tune").join(format!("threads-{h:016x}.txt")))
}

/// `one_launch` asked for ranks on several GPUs.
fn one_launch_needs_one_gpu() -> crate::error::Error {
    CudaError::Unsupported("one launch for every rank needs every rank on one GPU".into()).into()
}

impl CudaRuntime {
    /// Uploads `weights` to the GPUs `ordinals` (several: tensor parallelism, each GPU
    /// gets its shard and its own persistent kernel; with `dtp`, Delayed Tensor
    /// Parallelism with lanes = `ordinals`) and compiles the kernel `cuda` asks for.
    /// The tests' and benchmarks' entry point: the engine builds through [`Self::with_kernel`].
    #[cfg(feature = "lab")]
    pub fn new(
        config: &ModelConfig,
        weights: &Weights,
        ordinals: &[usize],
        cuda: &CudaOptions,
        dtp: Option<DtpSchedule>,
    ) -> Result<CudaRuntime> {
        Self::with_kernel(config, weights, ordinals, cuda, KernelOptions::from_cuda(cuda), dtp)
    }

    /// [`CudaRuntime::new`] with explicit kernel options (benchmarks and checks);
    /// `cuda` supplies the library and cache folders and whether ranks may share a GPU.
    pub fn with_kernel(
        config: &ModelConfig,
        weights: &Weights,
        ordinals: &[usize],
        cuda: &CudaOptions,
        mut options: KernelOptions,
        dtp: Option<DtpSchedule>,
    ) -> Result<CudaRuntime> {
        let tp = ordinals.len();
        if options.one_launch && ordinals.iter().any(|&o| o != ordinals[0]) {
            return Err(one_launch_needs_one_gpu());
        }
        // The weights' formats are part of the kernel the runtime compiles.
        let plan = WeightPlan::new(config, weights, cuda.weights, tp)?;
        for note in &plan.notes {
            eprintln!("GPU weights: {note}");
        }
        options.weight_formats = plan.layer_mask();
        options.lm_head_format = plan.lm_head.tag();
        if let Some(s) = &dtp {
            if s.lanes != tp || s.num_layers != config.num_layers {
                return Err(CudaError::Unsupported(format!(
                    "DTP schedule for {} lanes / {} layers on {tp} GPUs / {} layers",
                    s.lanes, s.num_layers, config.num_layers
                ))
                .into());
            }
        }
        let shard = layout::shard(config, tp).map_err(|e| CudaError::Unsupported(format!("unsupported tensor parallelism: {e}")))?;
        if let Some(why) = layout::unsupported(&shard, &options) {
            return Err(CudaError::Unsupported(format!("unsupported shape: {why}")).into());
        }
        let devices = Devices::open(ordinals, cuda.share_gpu)?;
        nvrtc::preload(&cuda.paths.nvrtc_dirs)?;
        let kv_cap = layout::kv_positions(config, &options);
        let alloc_splits = options.attn_max_splits;
        let shape = Shape { config: config.clone(), shard, dtp, options, kv_cap, alloc_splits };
        let kernels = Kernels::load(&devices, &shape, &shape.options, cuda.paths.clone())?;
        let weights = WeightShards::upload(&devices, &shape, weights, &plan)?;
        let mut buffers = Buffers::alloc(&devices, &kernels, &shape)?;
        if tp > 1 {
            devices.connect_peers(&mut buffers)?;
        }
        let prefill = BatchedPrefill::load(&devices, &shape, &shape.options, &kernels.paths)?;
        let launch = Launch::new(&devices.gpus[0].ctx, shape.options.ring)?;
        Ok(CudaRuntime {
            shape,
            devices,
            kernels,
            weights: ManuallyDrop::new(weights),
            buffers: ManuallyDrop::new(buffers),
            prefill: ManuallyDrop::new(prefill),
            launch: ManuallyDrop::new(launch),
            cache: PromptCache::default(),
            last_run: RunStats::default(),
            probes: Probes::new(),
        })
    }

    /// Tensor-parallel degree (GPUs in use).
    #[cfg(feature = "lab")]
    pub fn tp(&self) -> usize {
        self.devices.tp()
    }

    /// Recompiles the kernel with other variants, keeping weights and buffers
    /// (`kv_positions` and `ring` must stay as they are; other threads per block only
    /// where the new kernel's buffers fit the ones allocated).
    pub fn set_options(&mut self, mut options: KernelOptions) -> Result<()> {
        let current = &self.shape.options;
        // The uploaded weights fix their formats.
        options.weight_formats = current.weight_formats;
        options.lm_head_format = current.lm_head_format;
        if options.kv_positions != current.kv_positions
            || options.ring != current.ring
            || options.prefill_chunk != current.prefill_chunk
            || options.attn_max_splits > self.shape.alloc_splits
        {
            return Err(CudaError::Unsupported(
                "set_options cannot change kv_positions, ring or prefill_chunk, nor raise attn_max_splits".into(),
            )
            .into());
        }
        if let Some(why) = layout::unsupported(&self.shape.shard, &options) {
            return Err(CudaError::Unsupported(format!("unsupported shape: {why}")).into());
        }
        if options.one_launch && !self.devices.on_one_gpu() {
            return Err(one_launch_needs_one_gpu());
        }
        // Every rank's kernel first: a failure leaves the runtime as it was.
        let kernels = Kernels::compile(&self.devices, &self.shape, &options, &self.kernels.paths)?;
        if !self.buffers.fit(&kernels, self.devices.grid) {
            return Err(CudaError::Unsupported(format!(
                "a kernel with {} threads per block needs larger buffers than the runtime allocated for {}",
                options.threads, current.threads
            ))
            .into());
        }
        self.kernels.ranks = kernels;
        // One launch also puts every rank's prefill on one stream (prefill/mod.rs).
        let one_stream = layout::launch_ranks(&options, self.devices.tp()) > 1;
        if options.batched_prefill && (self.prefill.is_empty() || self.prefill.one_stream != one_stream) {
            *self.prefill = BatchedPrefill::load(&self.devices, &self.shape, &options, &self.kernels.paths)?;
        }
        self.prefill.set_mma_attention(options.prefill_mma_attention);
        self.shape.options = options;
        // Another kernel variant may round differently: its runs start from an empty cache.
        self.cache.tokens.clear();
        Ok(())
    }

    /// Whether `generate` runs prompts through the batched prefill.
    pub fn batched_prefill(&self) -> bool {
        self.shape.options.batched_prefill && !self.prefill.is_empty()
    }

    /// Timings of the last `generate`.
    pub fn last_run(&self) -> &RunStats {
        &self.last_run
    }

    /// Bytes each GPU must read from memory per token at least (its weights once): the
    /// benchmarks' bandwidth figure.
    #[cfg(feature = "lab")]
    pub fn streamed_bytes_per_token(&self) -> u64 {
        self.weights.streamed_bytes_per_token()
    }

    /// What a measurement of this runtime's kernels depends on besides its options:
    /// the GPUs, the architecture, the kernel sources, the shape and the parallelism.
    pub fn kernel_identity(&self) -> String {
        let d = &self.devices;
        kernel_identity_of(&d.names(), &d.arch, d.grid, &self.shape.config, self.shape.dtp.as_ref())
    }

    /// [`Self::kernel_identity`] of a runtime not built yet, on `ordinals`.
    pub fn kernel_identity_before(ordinals: &[usize], config: &ModelConfig, dtp: Option<&DtpSchedule>) -> Result<String> {
        let (names, arch, grid) = devices::placement(ordinals)?;
        Ok(kernel_identity_of(&names, &arch, grid, config, dtp))
    }

    /// Where a load-time measurement keyed by `key` is kept: next to the cubins.
    pub fn tune_file(&self, key: &str) -> Option<std::path::PathBuf> {
        tune_file_in(&self.kernels.paths, key)
    }

    /// Device, architecture, grid and kernel facts for logs and benchmarks.
    pub fn describe(&self) -> String {
        let (d, o) = (&self.devices, &self.shape.options);
        let k = &self.kernels.ranks[0];
        format!(
            "{} ({}, tp {}{}), grid {}×{} threads per GPU, {} B shared, kernel {} ({}); weights: {}; {}",
            d.names().join(" + "),
            d.arch,
            d.tp(),
            self.shape.dtp.as_ref().map_or(String::new(), |s| format!(", DTP delay {} early {}", s.delay, s.early_layers.name())),
            d.grid,
            o.threads,
            k.smem_bytes,
            if k.from_cache { "from cubin cache" } else { "compiled" },
            o.summary(),
            self.weights.formats,
            self.prefill.describe(o.batched_prefill, d.tp()),
        )
    }

    /// Options in use.
    pub fn options(&self) -> &KernelOptions {
        &self.shape.options
    }
}

impl Runtime for CudaRuntime {
    fn config(&self) -> &ModelConfig {
        &self.shape.config
    }

    fn backend(&self) -> BackendInfo {
        BackendInfo { kind: "cuda".into(), devices: self.devices.names() }
    }

    fn generate(&mut self, job: &DecodeJob<'_>, on_token: &mut dyn FnMut(&Sampled) -> Flow) -> Result<RunEnd> {
        self.decode(job, on_token)
    }

    fn reused_prefix(&self) -> usize {
        self.cache.reused
    }

    fn follows_grammars(&self) -> bool {
        // The kernel masks each token's logits only when built for it, on one GPU.
        self.shape.options.grammar_mask && self.devices.tp() == 1
    }

    fn score(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        check_fits(&self.shape.config, tokens.len(), 0)?;
        self.cache.tokens.clear();
        if tokens.len() > self.shape.kv_cap {
            return Err(Error::ContextOverflow { prompt: tokens.len(), max_tokens: 0, context: self.shape.kv_cap });
        }
        let run = self.prepare(tokens, |a| a.set(Arg::ScoreMode, 1), tokens.len())?;
        self.launch(&run.args)?;
        let logits = self.finish(run, tokens.len())?;
        // The scored rows are the caller's: the probes keep none of them.
        self.probes.keep_logits(Vec::new());
        Ok(logits)
    }
}

impl Drop for CudaRuntime {
    fn drop(&mut self) {
        if !self.launch.poisoned() {
            // SAFETY: dropped exactly once, here; nothing uses them afterwards.
            unsafe {
                ManuallyDrop::drop(&mut self.buffers);
                ManuallyDrop::drop(&mut self.weights);
                ManuallyDrop::drop(&mut self.prefill);
                ManuallyDrop::drop(&mut self.launch);
            }
        }
    }
}
