//! The devices part: which GPUs are present, a context and stream per rank
//! ([`Devices`]), peer access between the ranks' GPUs, and the copy bandwidth a kernel
//! is judged against.

use std::sync::Arc;

use cudarc::driver::{sys, CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtr};

use super::buffers::Buffers;
use super::{check, cuda_err};
use crate::cuda::layout::PeerSlot;
use crate::cuda::nvrtc;
use crate::error::{CudaError, Result};

/// One rank's GPU: its context, the one stream the rank uses, and the device's facts.
pub(super) struct Gpu {
    pub(super) ctx: Arc<CudaContext>,
    pub(super) stream: Arc<CudaStream>,
    pub(super) name: String,
    /// The device's SM count (the grid is the smallest of the ranks').
    pub(super) sm_count: u32,
}

impl Gpu {
    /// The device address of `s` on this rank's stream.
    pub(super) fn dptr<T>(&self, s: &CudaSlice<T>) -> u64 {
        s.device_ptr(&self.stream).0
    }

    /// Makes this rank's stream wait for every event of `events` but its own (index `me`).
    pub(super) fn wait_for_peers(&self, me: usize, events: &[CudaEvent], what: &str) -> Result<()> {
        for (p, ev) in events.iter().enumerate() {
            if p != me {
                self.stream.wait(ev).map_err(cuda_err(what))?;
            }
        }
        Ok(())
    }
}

/// The devices part: every rank's GPU, their common architecture, and the launch grid.
pub(super) struct Devices {
    pub(super) gpus: Vec<Gpu>,
    /// The cubin target every rank compiles for.
    pub(super) arch: String,
    /// Blocks per launch: the smallest SM count of the GPUs in use.
    pub(super) grid: u32,
    /// Ranks share a GPU (`CudaOptions::share_gpu`): plain launches, since a cooperative one
    /// may wait for the whole device.
    pub(super) shared_gpu: bool,
}

impl Devices {
    /// A context and stream on each of `ordinals` (one per rank), after checking that
    /// each is present, listed once unless `share_gpu`, and free of a hung kernel; all
    /// must be of one architecture.
    pub(super) fn open(ordinals: &[usize], share_gpu: bool) -> Result<Devices> {
        let names = devices()?;
        for (i, &o) in ordinals.iter().enumerate() {
            if o >= names.len() {
                return Err(CudaError::NoDevice(format!("no CUDA device {o} ({} present)", names.len())).into());
            }
            if ordinals[..i].contains(&o) && !share_gpu {
                return Err(CudaError::Unsupported(format!("CUDA device {o} is listed twice")).into());
            }
        }
        crate::cuda::hung::check(ordinals).map_err(CudaError::NoDevice)?;
        let mut gpus = Vec::with_capacity(ordinals.len());
        let mut arch = String::new();
        let mut grid = u32::MAX;
        for (rank, &ordinal) in ordinals.iter().enumerate() {
            let (ctx, stream) = open_rank(ordinal)?;
            let (major, minor) = ctx.compute_capability().map_err(cuda_err("compute capability"))?;
            let a = nvrtc::arch_for(major, minor);
            if rank > 0 && a != arch {
                return Err(CudaError::Unsupported(format!("tensor parallelism needs GPUs of one architecture ({arch} and {a})")).into());
            }
            arch = a;
            let sm_count =
                ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).map_err(cuda_err("SM count"))? as u32;
            grid = grid.min(sm_count);
            gpus.push(Gpu { ctx, stream, name: names[ordinal].clone(), sm_count });
        }
        // Ranks sharing a GPU (test switch) split its SMs so all their blocks stay resident.
        let sharing = ordinals.iter().map(|o| ordinals.iter().filter(|p| *p == o).count()).max().unwrap_or(1) as u32;
        Ok(Devices { gpus, arch, grid: grid / sharing, shared_gpu: sharing > 1 })
    }

    /// Tensor-parallel degree (GPUs in use).
    pub(super) fn tp(&self) -> usize {
        self.gpus.len()
    }

    /// Whether every rank is on the same GPU.
    pub(super) fn on_one_gpu(&self) -> bool {
        self.gpus.iter().all(|g| g.ctx.ordinal() == self.gpus[0].ctx.ordinal())
    }

    /// The devices' names, one per rank.
    pub(super) fn names(&self) -> Vec<String> {
        self.gpus.iter().map(|g| g.name.clone()).collect()
    }

    /// Tensor parallelism: enables peer access between every pair of ranks, then gives
    /// every rank the table of all ranks' `PeerSlot` pointers into `buffers`.
    pub(super) fn connect_peers(&self, buffers: &mut Buffers) -> Result<()> {
        enable_peer_access(&self.gpus)?;
        let mut table: Vec<u64> = Vec::with_capacity(self.gpus.len() * PeerSlot::COUNT);
        for (g, st) in self.gpus.iter().zip(&buffers.ranks) {
            let mut slots = [0u64; PeerSlot::COUNT];
            slots[PeerSlot::Exchange.index()] = g.dptr(&st.exchange);
            slots[PeerSlot::Rx.index()] = g.dptr(&st.rx);
            slots[PeerSlot::Logits.index()] = g.dptr(&st.logits);
            slots[PeerSlot::Adj.index()] = g.dptr(&st.adj);
            table.extend_from_slice(&slots);
        }
        for (g, st) in self.gpus.iter().zip(buffers.ranks.iter_mut()) {
            g.stream.memcpy_htod(&table, &mut st.peers).map_err(cuda_err("upload peer table"))?;
        }
        Ok(())
    }
}

/// Names of the CUDA devices present, or why there are none (no driver, no device).
pub fn devices() -> Result<Vec<String>> {
    // SAFETY: probing for the driver library by name has no preconditions.
    if !unsafe { sys::is_culib_present() } {
        return Err(CudaError::Library("no CUDA driver (libcuda) found".into()).into());
    }
    let n = CudaContext::device_count().map_err(cuda_err("cuDeviceGetCount"))?;
    if n <= 0 {
        return Err(CudaError::NoDevice("no CUDA device present".into()).into());
    }
    (0..n as usize)
        .map(|i| {
            let ctx = CudaContext::new(i).map_err(cuda_err("cuCtxCreate"))?;
            ctx.name().map_err(cuda_err("cuDeviceGetName"))
        })
        .collect()
}

/// Shared memory one block of a kernel on `ctx`'s device may opt in to: the budget of
/// the decode kernel's shared-memory plan.
pub(crate) fn shared_per_block(ctx: &CudaContext) -> Result<usize> {
    let bytes = ctx
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        .map_err(cuda_err("shared memory per block"))?;
    Ok(bytes as usize)
}

/// What a kernel's speed depends on about the GPUs `ordinals`, known before any buffer
/// exists: their names, their architecture and the grid a runtime on them launches
/// (the smallest SM count, split between ranks that share a GPU).
pub(crate) fn placement(ordinals: &[usize]) -> Result<(Vec<String>, String, u32)> {
    let names = devices()?;
    let mut arch = String::new();
    let mut grid = u32::MAX;
    let mut used = Vec::new();
    for &o in ordinals {
        let name = names.get(o).ok_or_else(|| CudaError::NoDevice(format!("no CUDA device {o} ({} present)", names.len())))?;
        used.push(name.clone());
        let ctx = CudaContext::new(o).map_err(cuda_err("cuCtxCreate"))?;
        let (major, minor) = ctx.compute_capability().map_err(cuda_err("compute capability"))?;
        arch = crate::cuda::nvrtc::arch_for(major, minor);
        let sm_count =
            ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).map_err(cuda_err("SM count"))? as u32;
        grid = grid.min(sm_count);
    }
    let sharing = ordinals.iter().map(|o| ordinals.iter().filter(|p| *p == o).count()).max().unwrap_or(1) as u32;
    Ok((used, arch, grid / sharing))
}

/// A context on device `ordinal` and the one stream its rank uses.
fn open_rank(ordinal: usize) -> Result<(Arc<CudaContext>, Arc<CudaStream>)> {
    let ctx = CudaContext::new(ordinal).map_err(cuda_err("cuCtxCreate"))?;
    // SAFETY: each rank uses one stream and the host synchronises it before touching
    // any buffer, so cudarc's cross-stream event tracking is not needed (and it would
    // not see the raw pointers the kernel receives).
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx.new_stream().map_err(cuda_err("cuStreamCreate"))?;
    Ok((ctx, stream))
}

/// Enables peer access between every pair of `ranks`' contexts; a pair without it is an error.
fn enable_peer_access(ranks: &[Gpu]) -> Result<()> {
    for (i, a) in ranks.iter().enumerate() {
        for (j, b) in ranks.iter().enumerate() {
            if i == j || a.ctx.cu_device() == b.ctx.cu_device() {
                continue;
            }
            let mut can: std::ffi::c_int = 0;
            // SAFETY: both devices come from live contexts; `can` is a valid out-pointer.
            let r = unsafe { sys::cuDeviceCanAccessPeer(&mut can, a.ctx.cu_device(), b.ctx.cu_device()) };
            if r != sys::CUresult::CUDA_SUCCESS || can == 0 {
                return Err(CudaError::Unsupported(format!(
                    "GPU {} ({}) cannot access GPU {} ({}) as a peer ({r:?}); tensor parallelism needs peer access (NVLink or PCIe P2P)",
                    a.ctx.ordinal(),
                    a.name,
                    b.ctx.ordinal(),
                    b.name
                ))
                .into());
            }
            a.ctx.bind_to_thread().map_err(cuda_err("bind context"))?;
            // SAFETY: `b`'s context is live; enabling access from the current context (`a`).
            let r = unsafe { sys::cuCtxEnablePeerAccess(b.ctx.cu_ctx(), 0) };
            if r != sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
                check(&format!("cuCtxEnablePeerAccess {i}→{j}"), r)?;
            }
            // cudarc allocates from the device's memory pool (cuMemAllocAsync), which
            // context peer access does not cover: grant `a` access to `b`'s pool too.
            let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
            // SAFETY: `pool` is a valid out-pointer; the device is live.
            let r = unsafe { sys::cuDeviceGetMemPool(&mut pool, b.ctx.cu_device()) };
            check(&format!("cuDeviceGetMemPool {j}"), r)?;
            let desc = sys::CUmemAccessDesc {
                location: sys::CUmemLocation { type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: a.ctx.cu_device() },
                flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
            };
            // SAFETY: `pool` is `b`'s live pool and `desc` one valid descriptor.
            let r = unsafe { sys::cuMemPoolSetAccess(pool, &desc, 1) };
            check(&format!("cuMemPoolSetAccess {i}→{j}"), r)?;
        }
    }
    Ok(())
}

/// Device-to-device copy bandwidth (bytes read + written per second) of a `bytes`
/// buffer on device `ordinal`: the ceiling the decode kernel is judged against,
/// measured in the same process. Median of `repeats` copies timed with events. The
/// benchmarks' ceiling: the product never measures it.
#[cfg(feature = "lab")]
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
