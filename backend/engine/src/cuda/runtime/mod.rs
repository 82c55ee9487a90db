//! [`Runtime`] on one CUDA GPU or several (tensor parallelism): weights uploaded once
//! as bf16, the persistent decode kernel (kernels/decode.cu) compiled by NVRTC for the
//! device, one launch per request and GPU, preceded on one GPU by the batched prefill of
//! the prompt (prefill/) unless `KernelOptions::batched_prefill` is off. The host
//! thread only polls the token ring in host-mapped memory, calls `on_token`, and raises
//! the stop flag when asked to stop.
//!
//! This file holds the runtime's state, its construction and the [`Runtime`] glue; each
//! submodule owns one job: the GPUs and peer access (devices), the kernel (kernel), the
//! weight shards (weights), a run's buffers (buffers), the batched prefill across ranks
//! (prefill), and one run of the kernel with the host's token loop (launch).

mod buffers;
mod devices;
mod kernel;
mod launch;
mod prefill;
mod weights;

use std::mem::ManuallyDrop;
use std::sync::Arc;

use cudarc::driver::{sys, CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtr, PinnedHostSlice};

use self::buffers::{alloc_host_ring, State};
pub(crate) use self::devices::shared_per_block;
pub use self::devices::{devices, measure_copy_bandwidth};
pub use self::kernel::compile_only;
use self::kernel::Kernel;
pub use self::launch::DEFAULT_STALL_TIMEOUT;
use self::prefill::{load_prefills, Prefill, PrefillWeights};
use self::weights::DeviceWeights;
use super::RunStats;
use crate::admission::check_fits;
use crate::config::ModelConfig;
use crate::cuda::layout::{self, ctl, rec, Arg, KernelOptions};
use crate::cuda::nvrtc;
use crate::cuda::quant::WeightPlan;
use crate::cuda::run_stats::PrefillSplit;
use crate::cuda::trace::RawTrace;
pub(super) use crate::cuda::{alloc_err, check, cuda_err};
use crate::dtp::DtpSchedule;
use crate::error::{CudaError, Error, Result};
use crate::options::{CudaOptions, CudaPaths};
use crate::runtime::{BackendInfo, DecodeJob, Flow, RunEnd, Runtime};
use crate::sampling::Sampled;
use crate::weights::Weights;

/// One GPU of the run: its context, stream, kernel, weight shard and buffers.
struct Rank {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    device_name: String,
    kernel: Kernel,
    // ManuallyDrop: after a hung run, freeing would block behind the kernel forever,
    // so a poisoned runtime leaks its device memory instead (see Drop).
    weights: ManuallyDrop<DeviceWeights>,
    state: ManuallyDrop<State>,
}

impl Rank {
    fn dptr<T>(&self, s: &CudaSlice<T>) -> u64 {
        s.device_ptr(&self.stream).0
    }

    /// The weight pointers the batched prefill reads.
    fn prefill_weights(&self) -> PrefillWeights<'_> {
        let w = &self.weights;
        PrefillWeights { layers: &w.layer_ptrs, embed: w.embed, inv_freq: w.inv_freq }
    }

    /// Makes this rank's stream wait for every event of `events` but its own (index `me`).
    fn wait_for_peers(&self, me: usize, events: &[CudaEvent], what: &str) -> Result<()> {
        for (p, ev) in events.iter().enumerate() {
            if p != me {
                self.stream.wait(ev).map_err(cuda_err(what))?;
            }
        }
        Ok(())
    }
}

/// The persistent-kernel GPU runtime: one GPU, or tensor parallelism over several
/// (one persistent kernel per GPU, all-reduces inside the kernels over NVLink).
pub struct CudaRuntime {
    config: ModelConfig,
    /// Each rank's share of `config` (equal to it on one GPU).
    shard: ModelConfig,
    /// Delayed Tensor Parallelism's schedule (`None`: standard tensor parallelism or one GPU).
    dtp: Option<DtpSchedule>,
    options: KernelOptions,
    /// The weight matrices' formats, as the load log says them.
    weight_formats: String,
    /// Library folders and the kernel cache.
    paths: CudaPaths,
    ranks: Vec<Rank>,
    arch: String,
    /// Blocks per launch: the smallest SM count of the GPUs in use.
    grid: u32,
    /// Ranks share a GPU (`CudaOptions::share_gpu`): plain launches, since a cooperative one
    /// may wait for the whole device.
    shared_gpu: bool,
    kv_cap: usize,
    /// Splits per head the partial-state buffer was sized for.
    alloc_splits: u32,
    /// The batched prefill, one per rank (compiled when `options.batched_prefill` is on
    /// and the shard's shape supports it, see layout::prefill_shape; empty otherwise).
    prefills: ManuallyDrop<Vec<Prefill>>,
    /// Record per-op GPU times of the next prefills (see `last_prefill_split`).
    prefill_profile: bool,
    last_prefill_split: Option<PrefillSplit>,
    /// Host-mapped control words then the token ring (owns what `host_ptr` points into); rank 0 writes it.
    host: ManuallyDrop<PinnedHostSlice<u32>>,
    host_ptr: *mut u32,
    host_dev: u64,
    debug_logits: bool,
    last_logits: Vec<Vec<f32>>,
    last_run: RunStats,
    /// `trace`: the current run's stamp buffer (rank 0) and traced step, then the read-back stamps.
    trace_buf: Option<(CudaSlice<u64>, usize)>,
    last_trace: Option<RawTrace>,
    /// Set when a run hung: the kernel may still occupy the device.
    poisoned: Option<String>,
    /// The tokens whose keys and values every rank's KV cache holds (prompt reuse).
    cached: Vec<u32>,
    /// Prompt tokens the last `generate` took from `cached`.
    reused: usize,
}

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

// SAFETY: `host_ptr` points into `host`, which this struct owns; every use goes
// through `&mut self` or `&self` on the owning thread, and cudarc's handles are Send.
unsafe impl Send for CudaRuntime {}

impl CudaRuntime {
    /// Uploads `weights` to the GPUs `ordinals` (several: tensor parallelism, each GPU
    /// gets its shard and its own persistent kernel; with `dtp`, Delayed Tensor
    /// Parallelism with lanes = `ordinals`) and compiles the kernel `cuda` asks for.
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
        let names = devices()?;
        for (i, &o) in ordinals.iter().enumerate() {
            if o >= names.len() {
                return Err(CudaError::NoDevice(format!("no CUDA device {o} ({} present)", names.len())).into());
            }
            if ordinals[..i].contains(&o) && !cuda.share_gpu {
                return Err(CudaError::Unsupported(format!("CUDA device {o} is listed twice")).into());
            }
        }
        super::hung::check(ordinals).map_err(CudaError::NoDevice)?;
        nvrtc::preload(&cuda.paths.nvrtc_dirs)?;
        let paths = cuda.paths.clone();
        let kv_cap = layout::kv_positions(config, &options);
        let mut ranks = Vec::with_capacity(tp);
        let mut arch = String::new();
        let mut grid = u32::MAX;
        for (rank, &ordinal) in ordinals.iter().enumerate() {
            let (ctx, stream) = devices::open_rank(ordinal)?;
            let (major, minor) = ctx.compute_capability().map_err(cuda_err("compute capability"))?;
            let a = nvrtc::arch_for(major, minor);
            if rank > 0 && a != arch {
                return Err(CudaError::Unsupported(format!("tensor parallelism needs GPUs of one architecture ({arch} and {a})")).into());
            }
            arch = a;
            let sm_count =
                ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).map_err(cuda_err("SM count"))? as u32;
            grid = grid.min(sm_count);
            let rank_options = options.for_rank(rank, tp);
            let kernel = Self::load_kernel(&ctx, &stream, config, &shard, &rank_options, &paths, tp, dtp.as_ref(), &arch)?;
            let weights = Self::upload_weights(&stream, config, &shard, weights, rank, tp, &plan)?;
            let state = Self::alloc_state(&stream, config, &shard, &options, kv_cap, &kernel, sm_count, tp)?;
            ranks.push(Rank {
                ctx,
                stream,
                device_name: names[ordinal].clone(),
                kernel,
                weights: ManuallyDrop::new(weights),
                state: ManuallyDrop::new(state),
            });
        }
        // Ranks sharing a GPU (test switch) split its SMs so all their blocks stay resident.
        let sharing = ordinals.iter().map(|o| ordinals.iter().filter(|p| *p == o).count()).max().unwrap_or(1) as u32;
        grid /= sharing;
        if tp > 1 {
            devices::connect_peers(&mut ranks)?;
        }
        let ctx0 = ranks[0].ctx.clone();
        let prefills = load_prefills(&ranks, &shard, &options, &paths, dtp.as_ref(), &arch, kv_cap)?;
        let words = ctl::WORDS + options.ring * rec::WORDS;
        let (host, host_ptr, host_dev) = alloc_host_ring(&ctx0, words)?;
        let alloc_splits = options.attn_max_splits;
        Ok(CudaRuntime {
            alloc_splits,
            config: config.clone(),
            shard,
            dtp,
            options,
            weight_formats: plan.describe(),
            paths,
            ranks,
            arch,
            grid,
            shared_gpu: sharing > 1,
            kv_cap,
            prefills: ManuallyDrop::new(prefills),
            prefill_profile: false,
            last_prefill_split: None,
            host: ManuallyDrop::new(host),
            host_ptr,
            host_dev,
            debug_logits: false,
            last_logits: Vec::new(),
            last_run: RunStats::default(),
            trace_buf: None,
            last_trace: None,
            poisoned: None,
            cached: Vec::new(),
            reused: 0,
        })
    }

    /// Tensor-parallel degree (GPUs in use).
    pub fn tp(&self) -> usize {
        self.ranks.len()
    }

    /// Recompiles the kernel with other variants, keeping weights and buffers
    /// (`kv_positions` and `ring` must stay as they are; other threads per block only
    /// where the new kernel's buffers fit the ones allocated).
    pub fn set_options(&mut self, mut options: KernelOptions) -> Result<()> {
        // The uploaded weights fix their formats.
        options.weight_formats = self.options.weight_formats;
        options.lm_head_format = self.options.lm_head_format;
        if options.kv_positions != self.options.kv_positions
            || options.ring != self.options.ring
            || options.prefill_chunk != self.options.prefill_chunk
            || options.attn_max_splits > self.alloc_splits
        {
            return Err(CudaError::Unsupported(
                "set_options cannot change kv_positions, ring or prefill_chunk, nor raise attn_max_splits".into(),
            )
            .into());
        }
        let tp = self.ranks.len();
        if let Some(why) = layout::unsupported(&self.shard, &options) {
            return Err(CudaError::Unsupported(format!("unsupported shape: {why}")).into());
        }
        // Every rank's kernel first: a failure leaves the runtime as it was.
        let mut kernels = Vec::with_capacity(tp);
        for (i, r) in self.ranks.iter().enumerate() {
            let ro = options.for_rank(i, tp);
            let k = Self::load_kernel(&r.ctx, &r.stream, &self.config, &self.shard, &ro, &self.paths, tp, self.dtp.as_ref(), &self.arch)?;
            // The kernel's per-block buffers depend on its threads per block.
            let s = &r.state;
            if k.num_counters > s.counters.len()
                || k.partial_floats * self.grid as usize > s.partials.len()
                || k.exchange_words > s.exchange.len()
                || k.rx_floats > s.rx.len()
            {
                return Err(CudaError::Unsupported(format!(
                    "a kernel with {} threads per block needs larger buffers than the runtime allocated for {}",
                    options.threads, self.options.threads
                ))
                .into());
            }
            kernels.push(k);
        }
        for (r, k) in self.ranks.iter_mut().zip(kernels) {
            r.kernel = k;
        }
        if options.batched_prefill && self.prefills.is_empty() {
            *self.prefills = load_prefills(&self.ranks, &self.shard, &options, &self.paths, self.dtp.as_ref(), &self.arch, self.kv_cap)?;
        }
        for p in self.prefills.iter_mut() {
            p.set_mma_attention(options.prefill_mma_attention);
        }
        self.options = options;
        // Another kernel variant may round differently: its runs start from an empty cache.
        self.cached.clear();
        Ok(())
    }

    /// Records per-op GPU times of each batched prefill (an event pair per op; costs a
    /// little host time per op, so it is off by default).
    pub fn set_prefill_profile(&mut self, on: bool) {
        self.prefill_profile = on;
    }

    /// GPU time by kind of the last profiled batched prefill.
    pub fn last_prefill_split(&self) -> Option<&PrefillSplit> {
        self.last_prefill_split.as_ref()
    }

    /// Whether `generate` runs prompts through the batched prefill.
    pub fn batched_prefill(&self) -> bool {
        self.options.batched_prefill && !self.prefills.is_empty()
    }

    /// Records every LM-head run's raw logits (tests compare them with the CPU).
    pub fn set_debug_logits(&mut self, on: bool) {
        self.debug_logits = on;
    }

    /// Raw logits of each step of the last run (with [`set_debug_logits`](Self::set_debug_logits)).
    pub fn debug_logits(&self) -> &[Vec<f32>] {
        &self.last_logits
    }

    /// The phase trace of the last run (with `KernelOptions::trace`; rank 0's blocks),
    /// or None when tracing is off or the run ended before the traced step.
    pub fn last_trace(&self) -> Option<&RawTrace> {
        self.last_trace.as_ref()
    }

    /// Timings of the last `generate`.
    pub fn last_run(&self) -> &RunStats {
        &self.last_run
    }

    /// Bytes each GPU must read from memory per token at least (its weights once).
    pub fn streamed_bytes_per_token(&self) -> u64 {
        self.ranks.iter().map(|r| r.weights.streamed_bytes).max().unwrap_or(0)
    }

    /// What a measurement of this runtime's kernels depends on besides its options:
    /// the GPUs, the architecture, the kernel sources, the shape and the parallelism.
    pub fn kernel_identity(&self) -> String {
        let names: Vec<String> = self.ranks.iter().map(|r| r.device_name.clone()).collect();
        kernel_identity_of(&names, &self.arch, self.grid, &self.config, self.dtp.as_ref())
    }

    /// [`Self::kernel_identity`] of a runtime not built yet, on `ordinals`.
    pub fn kernel_identity_before(ordinals: &[usize], config: &ModelConfig, dtp: Option<&DtpSchedule>) -> Result<String> {
        let (names, arch, grid) = devices::placement(ordinals)?;
        Ok(kernel_identity_of(&names, &arch, grid, config, dtp))
    }

    /// Where a load-time measurement keyed by `key` is kept: next to the cubins.
    pub fn tune_file(&self, key: &str) -> Option<std::path::PathBuf> {
        tune_file_in(&self.paths, key)
    }

    /// Device, architecture, grid and kernel facts for logs and benchmarks.
    pub fn describe(&self) -> String {
        let names: Vec<&str> = self.ranks.iter().map(|r| r.device_name.as_str()).collect();
        let k = &self.ranks[0].kernel;
        let prefill = match (self.prefills.first(), self.options.batched_prefill) {
            (Some(p), true) if self.ranks.len() > 1 => format!("{} on every rank, partials exchanged by peer copies", p.describe()),
            (Some(p), true) => p.describe(),
            (_, false) => "prompt token by token in the persistent kernel".to_string(),
            (None, true) => "prompt token by token (shape unsupported by the batched prefill)".to_string(),
        };
        format!(
            "{} ({}, tp {}{}), grid {}×{} threads per GPU, {} B shared, kernel {} ({}); weights: {}; {prefill}",
            names.join(" + "),
            self.arch,
            self.ranks.len(),
            self.dtp.as_ref().map_or(String::new(), |s| format!(", DTP delay {} early {}", s.delay, s.early_layers.name())),
            self.grid,
            self.options.threads,
            k.smem_bytes,
            if k.from_cache { "from cubin cache" } else { "compiled" },
            self.options.summary(),
            self.weight_formats
        )
    }

    /// Options in use.
    pub fn options(&self) -> &KernelOptions {
        &self.options
    }
}

impl Runtime for CudaRuntime {
    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn backend(&self) -> BackendInfo {
        BackendInfo { kind: "cuda".into(), devices: self.ranks.iter().map(|r| r.device_name.clone()).collect() }
    }

    fn generate(&mut self, job: &DecodeJob<'_>, on_token: &mut dyn FnMut(&Sampled) -> Flow) -> Result<RunEnd> {
        self.decode(job, on_token)
    }

    fn reused_prefix(&self) -> usize {
        self.reused
    }

    fn score(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        check_fits(&self.config, tokens.len(), 0)?;
        self.cached.clear();
        if tokens.len() > self.kv_cap {
            return Err(Error::ContextOverflow { prompt: tokens.len(), max_tokens: 0, context: self.kv_cap });
        }
        let (args, dbg) = self.prepare(tokens, |a| a.set(Arg::ScoreMode, 1), tokens.len())?;
        self.launch(&args)?;
        self.finish(dbg, tokens.len())?;
        Ok(std::mem::take(&mut self.last_logits))
    }
}

impl Drop for CudaRuntime {
    fn drop(&mut self) {
        if self.poisoned.is_none() {
            // SAFETY: dropped exactly once, here; nothing uses them afterwards.
            unsafe {
                for r in self.ranks.iter_mut() {
                    ManuallyDrop::drop(&mut r.state);
                    ManuallyDrop::drop(&mut r.weights);
                }
                ManuallyDrop::drop(&mut self.prefills);
                ManuallyDrop::drop(&mut self.host);
            }
        }
    }
}
