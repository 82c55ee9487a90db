//! [`Runtime`] on one CUDA GPU or several (tensor parallelism): weights uploaded once
//! as bf16, the persistent decode kernel (kernels/decode.cu) compiled by NVRTC for the
//! device, one launch per request and GPU, preceded on one GPU by the batched prefill of
//! the prompt (prefill.rs) unless `KernelOptions::batched_prefill` is off. The host
//! thread only polls the token ring in host-mapped memory, calls `on_token`, and raises
//! the stop flag when asked to stop.

use std::mem::ManuallyDrop;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{
    sys, CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr, LaunchConfig, PinnedHostSlice,
    PushKernelArg,
};

use super::RunStats;
use crate::config::ModelConfig;
use crate::cpu::reference_runtime::check_fits;
use crate::cpu::rope;
use crate::cuda::layout::{self, ctl, end, rec, Arg, KernelOptions, LayerSlot, PeerSlot, XMode, MAX_DEVICE_STOP_TOKENS};
use crate::cuda::nvrtc;
use crate::cuda::prefill::{Exchange, Prefill, PrefillOp, PrefillWeights, Profile};
use crate::cuda::run_stats::PrefillSplit;
use crate::cuda::trace::{RawTrace, WORDS_PER_EVENT};
use crate::dtp::{DtpSchedule, ShardPlan};
use crate::error::{Error, Result};
use crate::options::{CudaOptions, CudaPaths};
use crate::runtime::{BackendInfo, DecodeJob, Flow, RunEnd, Runtime};
use crate::sampling::{Sampled, TokenLogprob, MAX_TOP_LOGPROBS};
use crate::tensor::Tensor;
use crate::weights::Weights;

/// Bits the receive slots hold until a peer's value lands (kernels/sync.cuh's
/// PEER_SENTINEL: a NaN no arithmetic produces).
const PEER_SENTINEL: u32 = 0xffff_ffff;

/// A run that publishes nothing for this long is reported as a hung kernel.
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Polls of the ring between yields of the host thread.
const SPINS_PER_YIELD: u32 = 256;
/// Sleep between stream-status polls while scoring (no tokens to stream).
const KERNEL_POLL_US: u64 = 50;
/// Polls of the ring between checks that the kernel is still running.
const STATUS_EVERY_SPINS: u32 = 4096;

fn cuda_err(what: &str) -> impl Fn(cudarc::driver::DriverError) -> Error + '_ {
    move |e| Error::Cuda(format!("{what}: {e:?}"))
}

/// The kernel's arguments, one u64 per [`Arg`] slot.
#[repr(C)]
#[derive(Clone, Copy)]
struct KernelArgs([u64; Arg::COUNT]);

// SAFETY: a plain array of u64, laid out exactly like the kernel's `struct Args`.
unsafe impl DeviceRepr for KernelArgs {}

impl KernelArgs {
    fn set(&mut self, slot: Arg, v: u64) {
        self.0[slot.index()] = v;
    }
    fn set_f32(&mut self, slot: Arg, v: f32) {
        self.0[slot.index()] = v.to_bits() as u64;
    }
}

/// Weight buffers on the device (kept alive for the pointers in the layer table).
struct DeviceWeights {
    _bf16: Vec<CudaSlice<u16>>,
    _f32: Vec<CudaSlice<f32>>,
    layer_table: CudaSlice<u64>,
    /// The same table on the host (the batched prefill enqueues per-layer work).
    layer_ptrs: Vec<[u64; LayerSlot::COUNT]>,
    embed: u64,
    lm_head: u64,
    final_norm: u64,
    inv_freq: u64,
    /// bf16 + f32 bytes the kernel streams per token (every matrix once, norms, LM head).
    streamed_bytes: u64,
}

/// Per-request state buffers of one rank.
struct State {
    kv: CudaSlice<u16>,
    x: CudaSlice<f32>,
    resid: CudaSlice<f32>,
    qkv: CudaSlice<f32>,
    attn: CudaSlice<f32>,
    attn_part: CudaSlice<f32>,
    act: CudaSlice<f32>,
    logits: CudaSlice<f32>,
    adj: CudaSlice<f32>,
    partials: CudaSlice<f32>,
    counters: CudaSlice<u32>,
    tokens: CudaSlice<u32>,
    seen: CudaSlice<u8>,
    stop_ids: CudaSlice<u32>,
    /// Tensor parallelism: the region peers write into (counters, LM messages, DTP's final h).
    exchange: CudaSlice<u32>,
    /// Tensor parallelism: receive slots of partial sums (sentinel-filled before each run).
    rx: CudaSlice<f32>,
    /// Tensor parallelism: every rank's `PeerSlot` pointers (filled once all ranks exist).
    peers: CudaSlice<u64>,
    /// The phases' tagged words (zeroed per run; [`layout::tagged_words_used`]).
    tagged: CudaSlice<u64>,
}

/// What `enqueue_prefill` put on the stream: positions, and events to time them.
#[derive(Default)]
struct PrefillRun {
    positions: usize,
    span: Option<(CudaEvent, CudaEvent)>,
    ops: Vec<(PrefillOp, CudaEvent, CudaEvent)>,
}

/// The compiled kernel and its launch shape.
struct Kernel {
    func: CudaFunction,
    smem_bytes: u32,
    num_counters: usize,
    partial_floats: usize,
    exchange_words: usize,
    rx_floats: usize,
    /// Events of one block's trace record (`pg_trace_events`).
    trace_events: usize,
    from_cache: bool,
}

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
}

// SAFETY: `host_ptr` points into `host`, which this struct owns; every use goes
// through `&mut self` or `&self` on the owning thread, and cudarc's handles are Send.
unsafe impl Send for CudaRuntime {}

/// Names of the CUDA devices present, or why there are none (no driver, no device).
pub fn devices() -> Result<Vec<String>> {
    // SAFETY: probing for the driver library by name has no preconditions.
    if !unsafe { sys::is_culib_present() } {
        return Err(Error::Cuda("no CUDA driver (libcuda) found".into()));
    }
    let n = CudaContext::device_count().map_err(cuda_err("cuDeviceGetCount"))?;
    if n <= 0 {
        return Err(Error::Cuda("no CUDA device present".into()));
    }
    (0..n as usize)
        .map(|i| {
            let ctx = CudaContext::new(i).map_err(cuda_err("cuCtxCreate"))?;
            ctx.name().map_err(cuda_err("cuDeviceGetName"))
        })
        .collect()
}

/// Compiles the decode kernel, and the batched prefill's kernels where the shape
/// supports them, for `config` at tensor-parallel degree `tp` (DTP with a schedule)
/// without a GPU (CI's NVRTC check; precompiling a cache). Returns the cubins' total
/// size in bytes.
pub fn compile_only(
    config: &ModelConfig,
    options: &KernelOptions,
    tp: usize,
    dtp: Option<&DtpSchedule>,
    arch: &str,
    cache: Option<&std::path::Path>,
) -> Result<usize> {
    let shard = layout::shard(config, tp).map_err(|e| Error::Cuda(format!("unsupported tensor parallelism: {e}")))?;
    if let Some(why) = layout::unsupported(&shard, options) {
        return Err(Error::Cuda(format!("unsupported shape: {why}")));
    }
    let mut bytes = nvrtc::cubin(cache, arch, &layout::defines_tp(&shard, options, tp, config.vocab_size, dtp))?.0.len();
    if layout::prefill_shape(&shard).is_ok() {
        bytes += nvrtc::cubin_of(nvrtc::PREFILL_SOURCE, cache, arch, &layout::defines(&shard, options))?.0.len();
    }
    Ok(bytes)
}

/// The batched prefill of every rank (`shard`: one rank's shape; `dtp`: the DTP
/// schedule), or none where it is off or the shape needs the per-token path; a missing
/// cuBLAS or a failed compile is an error that says how to run without it.
fn load_prefills(
    ranks: &[Rank],
    shard: &ModelConfig,
    options: &KernelOptions,
    paths: &CudaPaths,
    dtp: Option<&DtpSchedule>,
    arch: &str,
    kv_cap: usize,
) -> Result<Vec<Prefill>> {
    if !options.batched_prefill || layout::prefill_shape(shard).is_err() {
        return Ok(Vec::new());
    }
    let tp = ranks.len();
    ranks
        .iter()
        .enumerate()
        .map(|(rank, r)| {
            r.ctx.bind_to_thread().map_err(cuda_err("bind context"))?;
            Prefill::new(&r.ctx, &r.stream, shard, options, paths, arch, kv_cap, Some((rank, tp, dtp))).map_err(|e| {
                Error::Cuda(format!("batched prefill: {e} (--prefill tokens runs prompts token by token instead)"))
            })
        })
        .collect()
}

/// Rows `r0..r1` of a row-major matrix with `cols` columns.
fn rows_of(m: &[f32], cols: usize, r0: usize, r1: usize) -> Vec<f32> {
    m[r0 * cols..r1 * cols].to_vec()
}

/// Columns `c0..c1` of a row-major matrix with `cols` columns.
fn cols_of(m: &[f32], cols: usize, c0: usize, c1: usize) -> Vec<f32> {
    m.chunks_exact(cols).flat_map(|row| row[c0..c1].iter().copied()).collect()
}

/// Enables peer access between every pair of `ranks`' contexts; a pair without it is an error.
fn enable_peer_access(ranks: &[Rank]) -> Result<()> {
    for (i, a) in ranks.iter().enumerate() {
        for (j, b) in ranks.iter().enumerate() {
            if i == j || a.ctx.cu_device() == b.ctx.cu_device() {
                continue;
            }
            let mut can: std::ffi::c_int = 0;
            // SAFETY: both devices come from live contexts; `can` is a valid out-pointer.
            let r = unsafe { sys::cuDeviceCanAccessPeer(&mut can, a.ctx.cu_device(), b.ctx.cu_device()) };
            if r != sys::CUresult::CUDA_SUCCESS || can == 0 {
                return Err(Error::Cuda(format!(
                    "GPU {} ({}) cannot access GPU {} ({}) as a peer ({r:?}); tensor parallelism needs peer access (NVLink or PCIe P2P)",
                    a.ctx.ordinal(),
                    a.device_name,
                    b.ctx.ordinal(),
                    b.device_name
                )));
            }
            a.ctx.bind_to_thread().map_err(cuda_err("bind context"))?;
            // SAFETY: `b`'s context is live; enabling access from the current context (`a`).
            let r = unsafe { sys::cuCtxEnablePeerAccess(b.ctx.cu_ctx(), 0) };
            if r != sys::CUresult::CUDA_SUCCESS && r != sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
                return Err(Error::Cuda(format!("cuCtxEnablePeerAccess {i}→{j}: {r:?}")));
            }
            // cudarc allocates from the device's memory pool (cuMemAllocAsync), which
            // context peer access does not cover: grant `a` access to `b`'s pool too.
            let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
            // SAFETY: `pool` is a valid out-pointer; the device is live.
            let r = unsafe { sys::cuDeviceGetMemPool(&mut pool, b.ctx.cu_device()) };
            if r != sys::CUresult::CUDA_SUCCESS {
                return Err(Error::Cuda(format!("cuDeviceGetMemPool {j}: {r:?}")));
            }
            let desc = sys::CUmemAccessDesc {
                location: sys::CUmemLocation { type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: a.ctx.cu_device() },
                flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
            };
            // SAFETY: `pool` is `b`'s live pool and `desc` one valid descriptor.
            let r = unsafe { sys::cuMemPoolSetAccess(pool, &desc, 1) };
            if r != sys::CUresult::CUDA_SUCCESS {
                return Err(Error::Cuda(format!("cuMemPoolSetAccess {i}→{j}: {r:?}")));
            }
        }
    }
    Ok(())
}

fn to_bf16(values: &[f32]) -> Vec<u16> {
    values.iter().map(|&v| half::bf16::from_f32(v).to_bits()).collect()
}

fn expect_shape(t: &Tensor, shape: &[usize]) -> Result<()> {
    if t.shape != shape {
        return Err(Error::ShapeMismatch {
            path: "<weights>".into(),
            tensor: t.name.clone(),
            expected: shape.to_vec(),
            found: t.shape.clone(),
        });
    }
    Ok(())
}

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
        options: KernelOptions,
        dtp: Option<DtpSchedule>,
    ) -> Result<CudaRuntime> {
        let tp = ordinals.len();
        if let Some(s) = &dtp {
            if s.lanes != tp || s.num_layers != config.num_layers {
                return Err(Error::Cuda(format!(
                    "DTP schedule for {} lanes / {} layers on {tp} GPUs / {} layers",
                    s.lanes, s.num_layers, config.num_layers
                )));
            }
        }
        let shard = layout::shard(config, tp).map_err(|e| Error::Cuda(format!("unsupported tensor parallelism: {e}")))?;
        if let Some(why) = layout::unsupported(&shard, &options) {
            return Err(Error::Cuda(format!("unsupported shape: {why}")));
        }
        let names = devices()?;
        for (i, &o) in ordinals.iter().enumerate() {
            if o >= names.len() {
                return Err(Error::Cuda(format!("no CUDA device {o} ({} present)", names.len())));
            }
            if ordinals[..i].contains(&o) && !cuda.share_gpu {
                return Err(Error::Cuda(format!("CUDA device {o} is listed twice")));
            }
        }
        super::hung::check(ordinals).map_err(Error::Cuda)?;
        nvrtc::preload(&cuda.paths.nvrtc_dirs)?;
        let paths = cuda.paths.clone();
        let kv_cap = layout::kv_positions(config, &options);
        let mut ranks = Vec::with_capacity(tp);
        let mut arch = String::new();
        let mut grid = u32::MAX;
        for (rank, &ordinal) in ordinals.iter().enumerate() {
            let ctx = CudaContext::new(ordinal).map_err(cuda_err("cuCtxCreate"))?;
            // SAFETY: each rank uses one stream and the host synchronises it before touching
            // any buffer, so cudarc's cross-stream event tracking is not needed (and it would
            // not see the raw pointers the kernel receives).
            unsafe { ctx.disable_event_tracking() };
            let stream = ctx.new_stream().map_err(cuda_err("cuStreamCreate"))?;
            let (major, minor) = ctx.compute_capability().map_err(cuda_err("compute capability"))?;
            let a = nvrtc::arch_for(major, minor);
            if rank > 0 && a != arch {
                return Err(Error::Cuda(format!("tensor parallelism needs GPUs of one architecture ({arch} and {a})")));
            }
            arch = a;
            let sm_count =
                ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).map_err(cuda_err("SM count"))? as u32;
            grid = grid.min(sm_count);
            let rank_options = options.for_rank(rank, tp);
            let kernel = Self::load_kernel(&ctx, &stream, config, &shard, &rank_options, &paths, tp, dtp.as_ref(), &arch)?;
            let weights = Self::upload_weights(&stream, config, &shard, weights, rank, tp)?;
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
            enable_peer_access(&ranks)?;
            let mut table: Vec<u64> = Vec::with_capacity(tp * PeerSlot::COUNT);
            for r in &ranks {
                let mut slots = [0u64; PeerSlot::COUNT];
                slots[PeerSlot::Exchange.index()] = r.dptr(&r.state.exchange);
                slots[PeerSlot::Rx.index()] = r.dptr(&r.state.rx);
                slots[PeerSlot::Logits.index()] = r.dptr(&r.state.logits);
                slots[PeerSlot::Adj.index()] = r.dptr(&r.state.adj);
                table.extend_from_slice(&slots);
            }
            for r in ranks.iter_mut() {
                let stream = r.stream.clone();
                stream.memcpy_htod(&table, &mut r.state.peers).map_err(cuda_err("upload peer table"))?;
            }
        }
        let ctx0 = ranks[0].ctx.clone();
        let prefills = load_prefills(&ranks, &shard, &options, &paths, dtp.as_ref(), &arch, kv_cap)?;
        let words = ctl::WORDS + options.ring * rec::WORDS;
        // SAFETY: the buffer is zeroed below before the kernel or the host reads it.
        let mut host =
            unsafe { ctx0.alloc_pinned_with_flags::<u32>(words, sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE) }
                .map_err(cuda_err("cuMemHostAlloc"))?;
        let host_ptr = host.as_mut_ptr().map_err(cuda_err("pinned pointer"))?;
        // SAFETY: `host_ptr` addresses `words` u32 owned by `host`.
        unsafe { std::ptr::write_bytes(host_ptr, 0, words) };
        let mut host_dev: sys::CUdeviceptr = 0;
        ctx0.bind_to_thread().map_err(cuda_err("bind context"))?;
        // SAFETY: `host_ptr` is a live DEVICEMAP allocation of this context.
        let r = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut host_dev, host_ptr as *mut _, 0) };
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(Error::Cuda(format!("cuMemHostGetDevicePointer: {r:?}")));
        }
        let alloc_splits = options.attn_max_splits;
        Ok(CudaRuntime {
            alloc_splits,
            config: config.clone(),
            shard,
            dtp,
            options,
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
        })
    }

    /// Tensor-parallel degree (GPUs in use).
    pub fn tp(&self) -> usize {
        self.ranks.len()
    }

    #[allow(clippy::too_many_arguments)]
    fn load_kernel(
        ctx: &Arc<CudaContext>,
        stream: &Arc<CudaStream>,
        config: &ModelConfig,
        shard: &ModelConfig,
        options: &KernelOptions,
        paths: &CudaPaths,
        tp: usize,
        dtp: Option<&DtpSchedule>,
        arch: &str,
    ) -> Result<Kernel> {
        let defines = layout::defines_tp(shard, options, tp, config.vocab_size, dtp);
        let (cubin, from_cache) = nvrtc::cubin(paths.cubin_cache.as_deref(), arch, &defines)?;
        let module = ctx.load_module(cudarc::nvrtc::Ptx::from_binary(cubin)).map_err(cuda_err("cuModuleLoadData"))?;
        let func = module.load_function(nvrtc::KERNEL_NAME).map_err(cuda_err("cuModuleGetFunction"))?;
        let read_u32 = |name: &str| -> Result<u32> {
            let view = module.get_global(name, stream).map_err(cuda_err("cuModuleGetGlobal"))?;
            let bytes = stream.clone_dtoh(&view).map_err(cuda_err("read kernel constant"))?;
            let arr: [u8; 4] = bytes
                .get(..4)
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| Error::Cuda(format!("kernel constant {name} is not a u32")))?;
            Ok(u32::from_le_bytes(arr))
        };
        let smem_bytes = read_u32("pg_smem_bytes")?;
        let num_counters = read_u32("pg_num_counters")? as usize;
        let partial_floats = read_u32("pg_partial_floats")? as usize;
        let exchange_words = read_u32("pg_exchange_words")? as usize;
        let rx_floats = read_u32("pg_rx_floats")? as usize;
        let trace_events = read_u32("pg_trace_events")? as usize;
        // The host allocates the tagged buffer from layout::tagged_words; the kernel's own count must agree.
        let tagged_words = read_u32("pg_tagged_words")? as usize;
        if tp == 1 && tagged_words != layout::tagged_words(shard) {
            return Err(Error::Cuda(format!(
                "kernel and host disagree on the tagged buffer: {tagged_words} words in the kernel, {} on the host",
                layout::tagged_words(shard)
            )));
        }
        func.set_attribute(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem_bytes as i32)
            .map_err(cuda_err("raise the kernel's shared-memory limit"))?;
        let per_sm = func
            .occupancy_max_active_blocks_per_multiprocessor(options.threads, smem_bytes as usize, None)
            .map_err(cuda_err("occupancy"))?;
        if per_sm < 1 {
            return Err(Error::Cuda(format!(
                "the decode kernel does not fit on an SM ({} threads, {smem_bytes} B shared)",
                options.threads
            )));
        }
        Ok(Kernel { func, smem_bytes, num_counters, partial_floats, exchange_words, rx_floats, trace_events, from_cache })
    }

    /// Uploads rank `rank`'s shard (all of it on one GPU): its query heads' q rows, its
    /// KV heads' k/v rows, its FFN columns of gate/up (rows) and down (columns), its
    /// heads' o-projection columns and its vocabulary rows of the LM head; the
    /// embedding and norms whole.
    fn upload_weights(
        stream: &Arc<CudaStream>,
        c: &ModelConfig,
        sh: &ModelConfig,
        w: &Weights,
        rank: usize,
        tp: usize,
    ) -> Result<DeviceWeights> {
        let (d, f, hd) = (c.hidden_size, c.intermediate_size, c.head_dim);
        let (qd, kvd) = (c.num_heads * hd, c.num_kv_heads * hd);
        if w.layers.len() != c.num_layers {
            return Err(Error::Cuda(format!("{} layers of weights for a {}-layer config", w.layers.len(), c.num_layers)));
        }
        // This rank's query rows/columns, KV rows, FFN columns and vocabulary rows: the
        // split the CPU reference uses too (layout::shard checked it gives `sh`'s sizes).
        let plan = ShardPlan::new(c, tp)?;
        let lane = &plan.lanes[rank];
        let (q0, q1) = (lane.q_heads.start * hd, lane.q_heads.end * hd);
        let (k0, k1) = (lane.kv_heads.start * hd, lane.kv_heads.end * hd);
        let (f0, f1) = (lane.ffn.start, lane.ffn.end);
        let (v0, v1) = (lane.vocab.start, lane.vocab.end);
        debug_assert_eq!(
            (q1 - q0, k1 - k0, f1 - f0, v1 - v0),
            (sh.num_heads * hd, sh.num_kv_heads * hd, sh.intermediate_size, sh.vocab_size)
        );
        let mut bf16s: Vec<CudaSlice<u16>> = Vec::new();
        let mut f32s: Vec<CudaSlice<f32>> = Vec::new();
        let mut streamed: u64 = 0;
        let put_bf16 = |values: Vec<f32>, streamed_too: bool, bf16s: &mut Vec<CudaSlice<u16>>, streamed: &mut u64| -> Result<u64> {
            if streamed_too {
                *streamed += 2 * values.len() as u64;
            }
            let s = stream.clone_htod(&to_bf16(&values)).map_err(cuda_err("upload weights"))?;
            let p = s.device_ptr(stream).0;
            bf16s.push(s);
            Ok(p)
        };
        let put_f32 = |values: &[f32], f32s: &mut Vec<CudaSlice<f32>>| -> Result<u64> {
            let s = stream.clone_htod(values).map_err(cuda_err("upload weights"))?;
            let p = s.device_ptr(stream).0;
            f32s.push(s);
            Ok(p)
        };
        let mut table: Vec<u64> = Vec::with_capacity(c.num_layers * LayerSlot::COUNT);
        let mut layer_ptrs = Vec::with_capacity(c.num_layers);
        for l in &w.layers {
            expect_shape(&l.q, &[qd, d])?;
            expect_shape(&l.k, &[kvd, d])?;
            expect_shape(&l.v, &[kvd, d])?;
            expect_shape(&l.o, &[d, qd])?;
            expect_shape(&l.gate, &[f, d])?;
            expect_shape(&l.up, &[f, d])?;
            expect_shape(&l.down, &[d, f])?;
            let mut slots = [0u64; LayerSlot::COUNT];
            let mut qkv = rows_of(&l.q.to_f32()?, d, q0, q1);
            qkv.extend(rows_of(&l.k.to_f32()?, d, k0, k1));
            qkv.extend(rows_of(&l.v.to_f32()?, d, k0, k1));
            slots[LayerSlot::Wqkv.index()] = put_bf16(qkv, true, &mut bf16s, &mut streamed)?;
            if c.attention_bias {
                let mut b = Vec::with_capacity(q1 - q0 + 2 * (k1 - k0));
                for (t, (r0, r1)) in [(&l.q_bias, (q0, q1)), (&l.k_bias, (k0, k1)), (&l.v_bias, (k0, k1))] {
                    let t = t.as_ref().ok_or_else(|| Error::Cuda("attention_bias is set but a q/k/v bias is missing".into()))?;
                    b.extend_from_slice(&t.to_f32()?[r0..r1]);
                }
                slots[LayerSlot::QkvBias.index()] = put_f32(&b, &mut f32s)?;
            }
            slots[LayerSlot::Wo.index()] = put_bf16(cols_of(&l.o.to_f32()?, qd, q0, q1), true, &mut bf16s, &mut streamed)?;
            let (gate, up) = (l.gate.to_f32()?, l.up.to_f32()?);
            let mut gu = Vec::with_capacity(2 * (f1 - f0) * d);
            for j in f0..f1 {
                gu.extend_from_slice(&gate[j * d..(j + 1) * d]);
                gu.extend_from_slice(&up[j * d..(j + 1) * d]);
            }
            drop((gate, up));
            slots[LayerSlot::WgateUp.index()] = put_bf16(gu, true, &mut bf16s, &mut streamed)?;
            slots[LayerSlot::Wdown.index()] = put_bf16(cols_of(&l.down.to_f32()?, f, f0, f1), true, &mut bf16s, &mut streamed)?;
            slots[LayerSlot::AttnNorm.index()] = put_f32(&l.attn_norm.to_f32()?, &mut f32s)?;
            slots[LayerSlot::FfnNorm.index()] = put_f32(&l.ffn_norm.to_f32()?, &mut f32s)?;
            streamed += 4 * 2 * d as u64;
            table.extend_from_slice(&slots);
            layer_ptrs.push(slots);
        }
        expect_shape(&w.embed, &[c.vocab_size, d])?;
        let embed_f32 = w.embed.to_f32()?;
        let lm_head = match &w.lm_head {
            Some(t) => {
                expect_shape(t, &[c.vocab_size, d])?;
                Some(put_bf16(rows_of(&t.to_f32()?, d, v0, v1), true, &mut bf16s, &mut streamed)?)
            }
            // Tied and split: this rank's rows of the embedding as its own matrix.
            None if tp > 1 => Some(put_bf16(rows_of(&embed_f32, d, v0, v1), true, &mut bf16s, &mut streamed)?),
            None => {
                streamed += 2 * (c.vocab_size * d) as u64;
                None
            }
        };
        let embed = put_bf16(embed_f32, false, &mut bf16s, &mut streamed)?;
        let lm_head = lm_head.unwrap_or(embed);
        let final_norm = put_f32(&w.final_norm.to_f32()?, &mut f32s)?;
        let inv_freq = put_f32(&rope::inv_freq(c), &mut f32s)?;
        // The embedding row read per token.
        streamed += 2 * d as u64 + 4 * d as u64;
        let layer_table = stream.clone_htod(&table).map_err(cuda_err("upload layer table"))?;
        Ok(DeviceWeights {
            _bf16: bf16s,
            _f32: f32s,
            layer_table,
            layer_ptrs,
            embed,
            lm_head,
            final_norm,
            inv_freq,
            streamed_bytes: streamed,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn alloc_state(
        stream: &Arc<CudaStream>,
        full: &ModelConfig,
        c: &ModelConfig,
        options: &KernelOptions,
        kv_cap: usize,
        k: &Kernel,
        grid: u32,
        tp: usize,
    ) -> Result<State> {
        let (qd, kvd) = (c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim);
        let f32s = |n: usize| stream.alloc_zeros::<f32>(n.max(1)).map_err(cuda_err("cuMemAlloc"));
        let u32s = |n: usize| stream.alloc_zeros::<u32>(n.max(1)).map_err(cuda_err("cuMemAlloc"));
        Ok(State {
            kv: stream.alloc_zeros::<u16>(c.num_layers * 2 * kvd * kv_cap).map_err(cuda_err("KV cache"))?,
            x: f32s(c.hidden_size)?,
            resid: f32s(c.hidden_size)?,
            qkv: f32s(qd + 2 * kvd)?,
            attn: f32s(qd)?,
            attn_part: f32s(c.num_heads * options.attn_max_splits as usize * (c.head_dim + 2))?,
            act: f32s(c.intermediate_size)?,
            // The sampler sees the whole vocabulary on every rank.
            logits: f32s(full.vocab_size)?,
            adj: f32s(full.vocab_size)?,
            partials: f32s(grid as usize * k.partial_floats)?,
            counters: u32s(k.num_counters)?,
            tokens: u32s(kv_cap)?,
            seen: stream.alloc_zeros::<u8>(full.vocab_size).map_err(cuda_err("cuMemAlloc"))?,
            stop_ids: u32s(MAX_DEVICE_STOP_TOKENS)?,
            exchange: u32s(k.exchange_words)?,
            rx: f32s(k.rx_floats)?,
            peers: stream.alloc_zeros::<u64>(tp * PeerSlot::COUNT).map_err(cuda_err("cuMemAlloc"))?,
            // Allocated under TP too (a few MB at most): set_options may turn tp_down_waves on.
            tagged: stream.alloc_zeros::<u64>(layout::tagged_words(c)).map_err(cuda_err("cuMemAlloc"))?,
        })
    }

    /// Recompiles the kernel with other variants, keeping weights and buffers
    /// (`kv_positions` and `ring` must stay as they are; other threads per block only
    /// where the new kernel's buffers fit the ones allocated).
    pub fn set_options(&mut self, options: KernelOptions) -> Result<()> {
        if options.kv_positions != self.options.kv_positions
            || options.ring != self.options.ring
            || options.prefill_chunk != self.options.prefill_chunk
            || options.attn_max_splits > self.alloc_splits
        {
            return Err(Error::Cuda("set_options cannot change kv_positions, ring or prefill_chunk, nor raise attn_max_splits".into()));
        }
        let tp = self.ranks.len();
        if let Some(why) = layout::unsupported(&self.shard, &options) {
            return Err(Error::Cuda(format!("unsupported shape: {why}")));
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
                return Err(Error::Cuda(format!(
                    "a kernel with {} threads per block needs larger buffers than the runtime allocated for {}",
                    options.threads, self.options.threads
                )));
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
        let names: Vec<&str> = self.ranks.iter().map(|r| r.device_name.as_str()).collect();
        format!(
            "{}|{}|grid {}|sources {:016x}|{:?}|tp {}|{:?}",
            names.join("+"),
            self.arch,
            self.grid,
            nvrtc::sources_hash(),
            self.config,
            self.ranks.len(),
            self.dtp
        )
    }

    /// Where a load-time measurement keyed by `key` is kept: next to the cubins.
    pub fn tune_file(&self, key: &str) -> Option<std::path::PathBuf> {
        let h = nvrtc::fnv1a(&[key.as_bytes()]);
        self.paths.cubin_cache.as_ref().map(|d| d.join("tune").join(format!("threads-{h:016x}.txt")))
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
            "{} ({}, tp {}{}), grid {}×{} threads per GPU, {} B shared, kernel {} ({}); {prefill}",
            names.join(" + "),
            self.arch,
            self.ranks.len(),
            self.dtp.as_ref().map_or(String::new(), |s| format!(", DTP delay {} early {}", s.delay, s.early_layers.name())),
            self.grid,
            self.options.threads,
            k.smem_bytes,
            if k.from_cache { "from cubin cache" } else { "compiled" },
            self.options.summary()
        )
    }

    /// Options in use.
    pub fn options(&self) -> &KernelOptions {
        &self.options
    }

    fn host_word(&self, i: usize) -> u32 {
        // SAFETY: `i` is inside the mapping (callers use ctl/rec offsets); volatile
        // because the GPU writes it concurrently.
        unsafe { std::ptr::read_volatile(self.host_ptr.add(i)) }
    }

    fn set_host_word(&self, i: usize, v: u32) {
        // SAFETY: as in `host_word`; the kernel reads these words with volatile loads.
        unsafe { std::ptr::write_volatile(self.host_ptr.add(i), v) }
    }

    /// Common launch: uploads the tokens and `seen` to every rank, zeroes counters,
    /// exchange regions and control words, fills each rank's arguments. Returns after
    /// every rank's stream is idle, so no kernel can write into a peer's region
    /// before that peer's counters are zeroed.
    fn prepare(
        &mut self,
        prompt: &[u32],
        job_args: impl Fn(&mut KernelArgs),
        debug_rows: usize,
    ) -> Result<(Vec<KernelArgs>, Vec<CudaSlice<f32>>)> {
        if let Some(why) = &self.poisoned {
            return Err(Error::Cuda(format!("the GPU runtime is unusable after an earlier failure: {why}")));
        }
        let v = self.config.vocab_size;
        if let Some(&bad) = prompt.iter().find(|&&t| t as usize >= v) {
            return Err(Error::TokenOutOfRange { id: bad, vocab_size: v });
        }
        let mut seen = vec![0u8; v];
        prompt.iter().for_each(|&t| seen[t as usize] = 1);
        for i in 0..ctl::WORDS {
            self.set_host_word(i, 0);
        }
        let tp = self.ranks.len();
        let mut all_args = Vec::with_capacity(tp);
        let mut dbgs = Vec::new();
        let trace_step = prompt.len() + layout::TRACE_AFTER_PROMPT;
        let mut trace_buf = None;
        self.last_trace = None;
        for (rank, r) in self.ranks.iter_mut().enumerate() {
            let stream = r.stream.clone();
            let st = &mut *r.state;
            stream.memcpy_htod(&seen, &mut st.seen).map_err(cuda_err("upload seen"))?;
            let mut toks = st.tokens.slice_mut(..prompt.len());
            stream.memcpy_htod(prompt, &mut toks).map_err(cuda_err("upload prompt"))?;
            stream.memset_zeros(&mut st.counters).map_err(cuda_err("zero counters"))?;
            stream.memset_zeros(&mut st.exchange).map_err(cuda_err("zero exchange"))?;
            // Tag 0 is never a step's: last run's words must not pass for this run's.
            if layout::tagged_words_used(&self.options, tp) {
                stream.memset_zeros(&mut st.tagged).map_err(cuda_err("zero tagged words"))?;
            }
            // The receive slots start as the sentinel the kernel's peer loads wait past.
            let rx_len = st.rx.len();
            let filled = {
                let (rx_ptr, _guard) = st.rx.device_ptr_mut(&stream);
                // SAFETY: `rx_ptr` addresses `st.rx`'s live allocation of `rx_len` f32 on this stream's context.
                unsafe { sys::cuMemsetD32Async(rx_ptr, PEER_SENTINEL, rx_len, stream.cu_stream()) }
            };
            if filled != sys::CUresult::CUDA_SUCCESS {
                return Err(Error::Cuda(format!("fill receive slots: {filled:?}")));
            }
            if debug_rows > 0 {
                dbgs.push(stream.alloc_zeros::<f32>(debug_rows * self.shard.vocab_size).map_err(cuda_err("debug logits"))?);
            }
            let mut a = KernelArgs([0; Arg::COUNT]);
            let r = &*r;
            let st = &r.state;
            let w = &r.weights;
            a.set(Arg::Layers, r.dptr(&w.layer_table));
            a.set(Arg::Embed, w.embed);
            a.set(Arg::LmHead, w.lm_head);
            a.set(Arg::FinalNorm, w.final_norm);
            a.set(Arg::InvFreq, w.inv_freq);
            for (slot, buf) in [
                (Arg::X, &st.x),
                (Arg::Resid, &st.resid),
                (Arg::Qkv, &st.qkv),
                (Arg::Attn, &st.attn),
                (Arg::AttnPart, &st.attn_part),
                (Arg::Act, &st.act),
                (Arg::Logits, &st.logits),
                (Arg::Adj, &st.adj),
                (Arg::Partials, &st.partials),
            ] {
                a.set(slot, r.dptr(buf));
            }
            a.set(Arg::Kv, r.dptr(&st.kv));
            a.set(Arg::Counters, r.dptr(&st.counters));
            a.set(Arg::Tokens, r.dptr(&st.tokens));
            a.set(Arg::Seen, r.dptr(&st.seen));
            a.set(Arg::StopIds, r.dptr(&st.stop_ids));
            a.set(Arg::Peers, r.dptr(&st.peers));
            a.set(Arg::Rank, rank as u64);
            a.set(Arg::DebugLogits, dbgs.last().filter(|_| debug_rows > 0).map_or(0, |b| r.dptr(b)));
            a.set(Arg::Tagged, r.dptr(&st.tagged));
            if self.options.diagnostics.trace && rank == 0 {
                let words = self.grid as usize * r.kernel.trace_events * WORDS_PER_EVENT;
                let buf = stream.alloc_zeros::<u64>(words.max(1)).map_err(cuda_err("trace buffer"))?;
                a.set(Arg::Trace, r.dptr(&buf));
                a.set(Arg::TraceStep, trace_step as u64);
                trace_buf = Some((buf, trace_step));
            }
            // Only rank 0 talks to the host.
            if rank == 0 {
                a.set(Arg::HostCtl, self.host_dev);
                a.set(Arg::Ring, self.host_dev + (ctl::WORDS * std::mem::size_of::<u32>()) as u64);
            }
            a.set(Arg::NPrompt, prompt.len() as u64);
            a.set_f32(Arg::RepetitionPenalty, 1.0);
            job_args(&mut a);
            all_args.push(a);
        }
        for r in &self.ranks {
            r.stream.synchronize().map_err(cuda_err("prepare"))?;
        }
        self.trace_buf = trace_buf;
        Ok((all_args, dbgs))
    }

    /// Enqueues the batched prefill of prompt positions 0..P-2 (after `prepare` uploaded
    /// the tokens), so the kernels start at P-1; nothing for a 1-token prompt or with
    /// the batched prefill off.
    fn enqueue_prefill(&mut self, prompt_len: usize) -> Result<PrefillRun> {
        let n = prompt_len.saturating_sub(1);
        if !self.options.batched_prefill || n == 0 || self.prefills.is_empty() {
            return Ok(PrefillRun::default());
        }
        let r0 = &self.ranks[0];
        self.prefills[0].check_positions(n)?;
        // cuBLAS runs in the thread's current context (the engine thread may not be
        // the one that created the runtime).
        r0.ctx.bind_to_thread().map_err(cuda_err("bind context"))?;
        let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let start = r0.stream.record_event(flags).map_err(cuda_err("event"))?;
        let mut ops = Vec::new();
        let mut profile = if self.prefill_profile { Some(&mut ops) } else { None };
        if self.ranks.len() == 1 {
            self.prefills[0].enqueue(&r0.stream, &r0.prefill_weights(), r0.dptr(&r0.state.kv), r0.dptr(&r0.state.tokens), n, profile)?;
        } else {
            self.enqueue_prefill_tp(n, &mut profile)?;
        }
        let r0 = &self.ranks[0];
        r0.ctx.bind_to_thread().map_err(cuda_err("bind context"))?;
        let stop = r0.stream.record_event(flags).map_err(cuda_err("event"))?;
        Ok(PrefillRun { positions: n, span: Some((start, stop)), ops })
    }

    /// Runs `f(rank index, rank, its prefill, profile)` for every rank in order with the
    /// rank's context current (cuBLAS enqueues in it); only rank 0's ops are profiled.
    fn each_rank(&self, profile: Profile<'_, '_>, mut f: impl FnMut(usize, &Rank, &Prefill, Profile<'_, '_>) -> Result<()>) -> Result<()> {
        let mut none = None;
        for (i, (r, pf)) in self.ranks.iter().zip(self.prefills.iter()).enumerate() {
            r.ctx.bind_to_thread().map_err(cuda_err("bind context"))?;
            f(i, r, pf, if i == 0 { &mut *profile } else { &mut none })?;
        }
        Ok(())
    }

    /// The batched prefill under tensor parallelism: every rank's half-layers in turn, each
    /// o / down half followed by the exchange of the partials (`exchange_prefill`). Rank 0's
    /// ops are the profiled ones.
    fn enqueue_prefill_tp(&self, n: usize, profile: Profile<'_, '_>) -> Result<()> {
        let layers = self.config.num_layers;
        for (c0, rows) in self.prefills[0].chunks(n) {
            // Per (layer, exchange): every rank's event after its copies to the peers.
            let mut sent: Vec<Vec<CudaEvent>> = (0..2 * layers).map(|_| Vec::new()).collect();
            self.each_rank(profile, |_, r, pf, p| pf.enqueue_embed(&r.stream, &r.prefill_weights(), r.dptr(&r.state.tokens), c0, rows, p))?;
            for l in 0..layers {
                self.each_rank(profile, |_, r, pf, p| {
                    pf.enqueue_attention(&r.stream, &r.prefill_weights(), l, r.dptr(&r.state.kv), c0, rows, p)
                })?;
                self.exchange_prefill(l, Exchange::O, rows, &mut sent, profile)?;
                self.each_rank(profile, |_, r, pf, p| pf.enqueue_ffn(&r.stream, &r.prefill_weights(), l, rows, p))?;
                self.exchange_prefill(l, Exchange::Down, rows, &mut sent, profile)?;
            }
            if self.prefills[0].slots_per_layer() {
                // DTP: a layer's slots are read up to `delay` layers after the peers wrote
                // them, after the last wait on those peers: no rank starts the next chunk
                // (and writes the slots again) before every rank is done with this one.
                let ends = self
                    .ranks
                    .iter()
                    .map(|r| r.stream.record_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)).map_err(cuda_err("event")))
                    .collect::<Result<Vec<_>>>()?;
                for (i, r) in self.ranks.iter().enumerate() {
                    r.wait_for_peers(i, &ends, "wait for a peer's chunk")?;
                }
            }
        }
        Ok(())
    }

    /// One exchange of the prefill's partials (layer `l`, projection `kind`): where the
    /// layer sends, each rank copies its slot into every peer's receive buffer (peer
    /// copies on its own stream) and records an event; then each rank's stream waits for
    /// the peers' events of the partials it adds (this layer's for an all-reduce, an
    /// earlier layer's for DTP's delayed add) and adds them (`Prefill::enqueue_add_parts`).
    /// Standard TP reuses one set of slots for every layer: a peer's next copy into them
    /// follows, on the peer's stream, its wait for this rank's next exchange, which this
    /// rank's stream records after the add that read them.
    fn exchange_prefill(&self, l: usize, kind: Exchange, rows: usize, sent: &mut [Vec<CudaEvent>], profile: Profile<'_, '_>) -> Result<()> {
        let bytes = self.prefills[0].part_bytes(rows);
        let (mode, late, send) = self.prefills[0].exchange_of(l);
        let at = |layer: usize| 2 * layer + kind as usize;
        if send {
            // (The copies are not profiled: the add that follows them is.)
            self.each_rank(&mut None, |i, r, pf, _| {
                let src = pf.part_slot(&r.stream, l, kind, i);
                for (p, (peer, ppf)) in self.ranks.iter().zip(self.prefills.iter()).enumerate() {
                    if p == i {
                        continue;
                    }
                    let dst = ppf.part_slot(&peer.stream, l, kind, i);
                    // SAFETY: both slots are live allocations of `bytes` or more (chunk rows ≥
                    // rows); the copy is ordered after this rank's GEMM on its stream and before
                    // the peer's add by the event below.
                    unsafe {
                        cudarc::driver::result::memcpy_peer_async(peer.ctx.cu_ctx(), dst, r.ctx.cu_ctx(), src, bytes, r.stream.cu_stream())
                    }
                    .map_err(cuda_err("prefill peer copy"))?;
                }
                sent[at(l)].push(r.stream.record_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)).map_err(cuda_err("event"))?);
                Ok(())
            })?;
        }
        let waits_on = match mode {
            XMode::All => Some(l),
            _ => usize::try_from(late).ok(),
        };
        if let Some(m) = waits_on.filter(|&m| sent[at(m)].len() != self.ranks.len()) {
            return Err(Error::Cuda(format!("prefill exchange: layer {l} adds layer {m}'s partials, which were never sent")));
        }
        self.each_rank(profile, |i, r, pf, p| {
            if let Some(m) = waits_on {
                r.wait_for_peers(i, &sent[at(m)], "wait for a peer's partials")?;
            }
            pf.enqueue_add_parts(&r.stream, l, kind, rows, p)
        })
    }

    /// Launches every rank's kernel back to back (rank 0 first; each waits for the
    /// others inside the kernel).
    fn launch(&mut self, args: &[KernelArgs]) -> Result<()> {
        for (i, (r, a)) in self.ranks.iter().zip(args).enumerate() {
            let cfg = LaunchConfig {
                grid_dim: (self.grid, 1, 1),
                block_dim: (self.options.threads, 1, 1),
                shared_mem_bytes: r.kernel.smem_bytes,
            };
            let mut b = r.stream.launch_builder(&r.kernel.func);
            b.arg(a);
            // SAFETY: `a` holds pointers to live buffers of the sizes the kernel was
            // compiled for (peers' through enabled peer access); a cooperative launch
            // guarantees every block is resident, which the kernel's inter-block waits
            // need (it never uses a grid-wide barrier).
            let launched = if self.shared_gpu { unsafe { b.launch(cfg) }.map(|_| None) } else { unsafe { b.launch_cooperative(cfg) } };
            if let Err(e) = launched {
                let why = format!("launch decode kernel on rank {i}: {e:?}");
                if i > 0 {
                    // The ranks already launched wait for this one forever.
                    self.poisoned = Some(why.clone());
                }
                return Err(Error::Cuda(why));
            }
        }
        Ok(())
    }

    /// None while any rank's kernel runs and none failed; else the first failure, or
    /// success once every rank's kernel has ended.
    fn kernel_status(&self) -> Option<sys::CUresult> {
        let mut running = false;
        for r in &self.ranks {
            // SAFETY: querying a live stream of this context has no other preconditions.
            let status = unsafe { sys::cuStreamQuery(r.stream.cu_stream()) };
            match status {
                sys::CUresult::CUDA_ERROR_NOT_READY => running = true,
                sys::CUresult::CUDA_SUCCESS => {}
                failed => return Some(failed),
            }
        }
        if running {
            None
        } else {
            Some(sys::CUresult::CUDA_SUCCESS)
        }
    }

    /// A stall (`why`): the runtime is poisoned and every rank's device refuses new
    /// runtimes in this process (hung.rs: the stalled kernel holds every SM until exit).
    fn stalled(&mut self, why: String) -> Error {
        for r in &self.ranks {
            super::hung::mark(r.ctx.ordinal());
        }
        self.poisoned = Some(why.clone());
        Error::Cuda(why)
    }

    /// Waits for every rank's kernel to end without blocking in the driver, so a hung
    /// kernel becomes an error after [`DEFAULT_STALL_TIMEOUT`] instead of a hung thread.
    fn wait_kernel(&mut self) -> Result<()> {
        let started = Instant::now();
        loop {
            match self.kernel_status() {
                Some(sys::CUresult::CUDA_SUCCESS) => return Ok(()),
                None => {}
                Some(other) => {
                    let why = format!("the decode kernel failed: {other:?}");
                    self.poisoned = Some(why.clone());
                    return Err(Error::Cuda(why));
                }
            }
            if started.elapsed() > DEFAULT_STALL_TIMEOUT {
                return Err(self.stalled(format!("the decode kernel did not finish within {DEFAULT_STALL_TIMEOUT:?}")));
            }
            std::thread::sleep(Duration::from_micros(KERNEL_POLL_US));
        }
    }

    /// Waits for the kernels, then collects the debug logits: each run's row is the
    /// concatenation of the ranks' vocabulary shards.
    fn finish(&mut self, dbgs: Vec<CudaSlice<f32>>, rows: usize) -> Result<()> {
        self.wait_kernel()?;
        for r in &self.ranks {
            r.stream.synchronize().map_err(cuda_err("decode kernel"))?;
        }
        if let Some((buf, step)) = self.trace_buf.take() {
            let r = &self.ranks[0];
            let words = r.stream.clone_dtoh(&buf).map_err(cuda_err("read trace"))?;
            let layers = self.config.num_layers;
            let expected = crate::cuda::trace::events_for(layers);
            if r.kernel.trace_events != expected {
                return Err(Error::Cuda(format!(
                    "the kernel's trace has {} events per block, the host expects {expected}",
                    r.kernel.trace_events
                )));
            }
            self.last_trace = Some(RawTrace { blocks: self.grid as usize, layers, step, words });
        }
        self.last_logits.clear();
        if !dbgs.is_empty() {
            let vl = self.shard.vocab_size;
            let mut out = vec![Vec::with_capacity(self.config.vocab_size); rows];
            for (r, buf) in self.ranks.iter().zip(&dbgs) {
                let all = r.stream.clone_dtoh(&buf.slice(..rows * vl)).map_err(cuda_err("read debug logits"))?;
                for (row, chunk) in out.iter_mut().zip(all.chunks_exact(vl)) {
                    row.extend_from_slice(chunk);
                }
            }
            self.last_logits = out;
        }
        Ok(())
    }

    fn read_record(&self, t: usize) -> (Sampled, u64) {
        let base = ctl::WORDS + (t % self.options.ring) * rec::WORDS;
        let w = |i: usize| self.host_word(base + i);
        let n_top = (w(rec::NTOP) as usize).min(MAX_TOP_LOGPROBS);
        let top = (0..n_top).map(|k| TokenLogprob { id: w(rec::TOP_IDS + k), logprob: f32::from_bits(w(rec::TOP_LPS + k)) }).collect();
        let time = w(rec::TIME_LO) as u64 | (w(rec::TIME_HI) as u64) << 32;
        (Sampled { id: w(rec::ID), logprob: f32::from_bits(w(rec::LOGPROB)), top }, time)
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
        check_fits(&self.config, job.prompt.len(), job.max_tokens)?;
        job.sampling.validate()?;
        if job.prompt.len() + job.max_tokens > self.kv_cap {
            return Err(Error::ContextOverflow { prompt: job.prompt.len(), max_tokens: job.max_tokens, context: self.kv_cap });
        }
        if job.max_tokens == 0 {
            return Ok(RunEnd::Length);
        }
        // The batched prefill takes milliseconds, so the last chance to skip a run the
        // caller gave up is before launch; afterwards `on_token` stops it at token one
        // (the kernel reads the stop flag only at the LM head).
        if job.cancel.requested() {
            return Ok(RunEnd::Stopped);
        }
        let (device_stops, host_stops) = job.stop_tokens.split_at(job.stop_tokens.len().min(MAX_DEVICE_STOP_TOKENS));
        if !device_stops.is_empty() {
            for r in self.ranks.iter_mut() {
                let stream = r.stream.clone();
                let mut dst = r.state.stop_ids.slice_mut(..device_stops.len());
                stream.memcpy_htod(device_stops, &mut dst).map_err(cuda_err("upload stop ids"))?;
            }
        }
        let s = job.sampling;
        let debug_rows = if self.debug_logits { job.max_tokens } else { 0 };
        let started = Instant::now();
        let (mut args, dbg) = self.prepare(
            job.prompt,
            |a| {
                a.set(Arg::MaxTokens, job.max_tokens as u64);
                a.set(Arg::NStop, device_stops.len() as u64);
                a.set(Arg::TopLogprobs, job.top_logprobs.min(MAX_TOP_LOGPROBS) as u64);
                a.set_f32(Arg::RepetitionPenalty, s.repetition_penalty);
                a.set_f32(Arg::Temperature, s.temperature);
                a.set(Arg::TopK, s.top_k.min(u32::MAX as usize) as u64);
                a.set_f32(Arg::TopP, s.top_p);
                a.set_f32(Arg::MinP, s.min_p);
                a.set(Arg::Seed, s.seed);
                // Sampling and top log-probs read the whole vocabulary on every rank.
                a.set(Arg::Gather, u64::from(s.temperature != 0.0 || job.top_logprobs > 0));
            },
            debug_rows,
        )?;
        let prefill = self.enqueue_prefill(job.prompt.len())?;
        for a in args.iter_mut() {
            a.set(Arg::StartStep, prefill.positions as u64);
        }
        self.launch(&args)?;
        let mut stats = RunStats { prompt_tokens: job.prompt.len(), prefill_positions: prefill.positions, ..Default::default() };
        let mut next = 0usize;
        let mut outcome: Option<RunEnd> = None;
        let mut last_progress = Instant::now();
        let mut spins = 0u32;
        loop {
            let done = self.host_word(ctl::DONE) != 0;
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
            let published = self.host_word(ctl::PUBLISHED) as usize;
            while next < published {
                let (sampled, time) = self.read_record(next);
                stats.token_times_ns.push(time);
                if stats.first_token.is_none() {
                    stats.first_token = Some(started.elapsed());
                }
                next += 1;
                self.set_host_word(ctl::CONSUMED, next as u32);
                if outcome.is_some() {
                    continue; // generated after the host asked to stop: dropped
                }
                if host_stops.contains(&sampled.id) {
                    outcome = Some(RunEnd::StopToken);
                    self.set_host_word(ctl::STOP, 1);
                } else if on_token(&sampled) == Flow::Stop {
                    outcome = Some(RunEnd::Stopped);
                    self.set_host_word(ctl::STOP, 1);
                }
                last_progress = Instant::now();
            }
            if done && next >= published {
                break;
            }
            if spins.is_multiple_of(STATUS_EVERY_SPINS) && !done {
                // A kernel that faulted or returned without ending the run never sets DONE.
                let status = self.kernel_status();
                if let Some(status) = status.filter(|_| self.host_word(ctl::DONE) == 0) {
                    let why = if status == sys::CUresult::CUDA_SUCCESS {
                        "the decode kernel exited without ending the run".to_string()
                    } else {
                        format!("the decode kernel failed: {status:?}")
                    };
                    self.poisoned = Some(why.clone());
                    return Err(Error::Cuda(why));
                }
            }
            if last_progress.elapsed() > DEFAULT_STALL_TIMEOUT {
                self.set_host_word(ctl::STOP, 1);
                return Err(self.stalled(format!("the decode kernel published nothing for {DEFAULT_STALL_TIMEOUT:?} (token {next})")));
            }
            spins += 1;
            if spins.is_multiple_of(SPINS_PER_YIELD) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        let reason = self.host_word(ctl::REASON);
        self.finish(dbg, debug_rows.min(next + 1))?;
        if let Some((start, stop)) = &prefill.span {
            stats.prefill_gpu_ms = Some(start.elapsed_ms(stop).map_err(cuda_err("prefill event time"))? as f64);
        }
        if !prefill.ops.is_empty() {
            self.last_prefill_split = Some(Prefill::split(&prefill.ops)?);
        }
        stats.published = next;
        stats.total = started.elapsed();
        self.last_run = stats;
        if let Some(o) = outcome {
            return Ok(o);
        }
        match reason {
            end::LENGTH => Ok(RunEnd::Length),
            end::STOP_TOKEN => Ok(RunEnd::StopToken),
            end::STOPPED => Ok(RunEnd::Stopped),
            other => Err(Error::Cuda(format!("the decode kernel ended with unknown reason {other}"))),
        }
    }

    fn score(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        check_fits(&self.config, tokens.len(), 0)?;
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

/// Device-to-device copy bandwidth (bytes read + written per second) of a `bytes`
/// buffer on device `ordinal`: the ceiling the decode kernel is judged against,
/// measured in the same process. Median of `repeats` copies timed with events.
pub fn measure_copy_bandwidth(ordinal: usize, bytes: usize, repeats: usize) -> Result<f64> {
    devices()?;
    let ctx = CudaContext::new(ordinal).map_err(cuda_err("cuCtxCreate"))?;
    let stream = ctx.new_stream().map_err(cuda_err("cuStreamCreate"))?;
    let n = bytes / 4;
    // Random-ish contents: copies of zeros can be faster than copies of data.
    let host: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(0x9E37_79B9)).collect();
    let src = stream.clone_htod(&host).map_err(cuda_err("upload"))?;
    let mut dst = stream.alloc_zeros::<u32>(n).map_err(cuda_err("cuMemAlloc"))?;
    let mut times = Vec::with_capacity(repeats);
    for i in 0..repeats + 1 {
        let start = stream.record_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(cuda_err("event"))?;
        stream.memcpy_dtod(&src, &mut dst).map_err(cuda_err("cuMemcpyDtoD"))?;
        let stop = stream.record_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(cuda_err("event"))?;
        stop.synchronize().map_err(cuda_err("event sync"))?;
        let ms = start.elapsed_ms(&stop).map_err(cuda_err("event time"))?;
        if i > 0 {
            times.push(ms as f64);
        }
    }
    times.sort_by(|a, b| a.total_cmp(b));
    let ms = times[times.len() / 2];
    Ok(2.0 * (n * 4) as f64 / (ms * 1e-3))
}
