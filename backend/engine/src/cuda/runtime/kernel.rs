//! The kernel part: the decode kernel compiled by NVRTC (or read from the cubin cache)
//! for every rank ([`Kernels`]), loaded, its launch shape read back from its constants,
//! and the argument block it takes.

use cudarc::driver::{sys, CudaFunction, DeviceRepr};

use super::devices::{Devices, Gpu};
use super::{cuda_err, Shape};
#[cfg(feature = "lab")]
use crate::config::ModelConfig;
use crate::cuda::layout::{self, Arg, KernelOptions};
use crate::cuda::nvrtc;
#[cfg(feature = "lab")]
use crate::dtp::DtpSchedule;
use crate::error::{CudaError, Result};
use crate::options::CudaPaths;

/// The kernel's arguments, one u64 per [`Arg`] slot.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct KernelArgs(pub(super) [u64; Arg::COUNT]);

// SAFETY: a plain array of u64, laid out exactly like the kernel's `struct Args`.
unsafe impl DeviceRepr for KernelArgs {}

impl KernelArgs {
    pub(super) fn set(&mut self, slot: Arg, v: u64) {
        self.0[slot.index()] = v;
    }
    pub(super) fn set_f32(&mut self, slot: Arg, v: f32) {
        self.0[slot.index()] = v.to_bits() as u64;
    }
}

/// The compiled kernel and its launch shape.
pub(super) struct Kernel {
    pub(super) func: CudaFunction,
    pub(super) smem_bytes: u32,
    pub(super) num_counters: usize,
    pub(super) partial_floats: usize,
    pub(super) exchange_words: usize,
    pub(super) rx_floats: usize,
    /// Events of one block's trace record (`pg_trace_events`).
    pub(super) trace_events: usize,
    pub(super) from_cache: bool,
}

/// Compiles the decode kernel, and the batched prefill's kernels where the shape
/// supports them, for `config` at tensor-parallel degree `tp` (DTP with a schedule)
/// without a GPU (CI's NVRTC check; precompiling a cache). Returns the cubins' total
/// size in bytes. The measuring apparatus's: the product compiles for its own device.
#[cfg(feature = "lab")]
pub fn compile_only(
    config: &ModelConfig,
    options: &KernelOptions,
    tp: usize,
    dtp: Option<&DtpSchedule>,
    arch: &str,
    cache: Option<&std::path::Path>,
) -> Result<usize> {
    let shard = layout::shard(config, tp).map_err(|e| CudaError::Unsupported(format!("unsupported tensor parallelism: {e}")))?;
    if let Some(why) = layout::unsupported(&shard, options) {
        return Err(CudaError::Unsupported(format!("unsupported shape: {why}")).into());
    }
    let smem = nvrtc::shared_per_block_of(arch);
    let mut bytes = nvrtc::cubin(cache, arch, &layout::defines_tp(&shard, options, tp, config.vocab_size, dtp, smem))?.0.len();
    if layout::prefill_shape(&shard).is_ok() {
        bytes += nvrtc::cubin_of(nvrtc::PREFILL_SOURCE, cache, arch, &layout::defines(&shard, options, smem))?.0.len();
    }
    Ok(bytes)
}

/// The kernel part: each rank's decode kernel, and where cubins are cached.
pub(super) struct Kernels {
    pub(super) ranks: Vec<Kernel>,
    /// Library folders and the kernel cache.
    pub(super) paths: CudaPaths,
}

impl Kernels {
    /// Compiles (or reads from the cache in `paths`) and loads every rank's kernel for
    /// `shape` with `options` (each rank's variant of them).
    pub(super) fn load(devices: &Devices, shape: &Shape, options: &KernelOptions, paths: CudaPaths) -> Result<Kernels> {
        let ranks = Self::compile(devices, shape, options, &paths)?;
        Ok(Kernels { ranks, paths })
    }

    /// Every rank's kernel for `options`, all or none (a failure changes nothing).
    pub(super) fn compile(devices: &Devices, shape: &Shape, options: &KernelOptions, paths: &CudaPaths) -> Result<Vec<Kernel>> {
        let tp = devices.tp();
        devices.gpus.iter().enumerate().map(|(i, g)| load_kernel(g, shape, &options.for_rank(i, tp), paths, tp, &devices.arch)).collect()
    }
}

fn load_kernel(gpu: &Gpu, shape: &Shape, options: &KernelOptions, paths: &CudaPaths, tp: usize, arch: &str) -> Result<Kernel> {
    let (ctx, stream, config, shard) = (&gpu.ctx, &gpu.stream, &shape.config, &shape.shard);
    let dtp = shape.dtp.as_ref();
    let offers = super::devices::shared_per_block(ctx)?;
    let defines = layout::defines_tp(shard, options, tp, config.vocab_size, dtp, offers);
    let (cubin, from_cache) = nvrtc::cubin(paths.cubin_cache.as_deref(), arch, &defines)?;
    let module = ctx.load_module(cudarc::nvrtc::Ptx::from_binary(cubin)).map_err(cuda_err("cuModuleLoadData"))?;
    let func = module.load_function(nvrtc::KERNEL_NAME).map_err(cuda_err("cuModuleGetFunction"))?;
    let read_u32 = |name: &str| -> Result<u32> {
        let view = module.get_global(name, stream).map_err(cuda_err("cuModuleGetGlobal"))?;
        let bytes = stream.clone_dtoh(&view).map_err(cuda_err("read kernel constant"))?;
        let arr: [u8; 4] = bytes
            .get(..4)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| CudaError::Mismatch(format!("kernel constant {name} is not a u32")))?;
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
        return Err(CudaError::Mismatch(format!(
            "kernel and host disagree on the tagged buffer: {tagged_words} words in the kernel, {} on the host",
            layout::tagged_words(shard)
        ))
        .into());
    }
    // The plan's regions that do not shrink with the budget (the main vector, the
    // residual, a quantized model's prepared input) can outgrow it on wide models.
    if smem_bytes as usize > offers {
        return Err(CudaError::SharedMemory { threads: options.threads, needs: smem_bytes, offers }.into());
    }
    func.set_attribute(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem_bytes as i32)
        .map_err(cuda_err("raise the kernel's shared-memory limit"))?;
    let per_sm =
        func.occupancy_max_active_blocks_per_multiprocessor(options.threads, smem_bytes as usize, None).map_err(cuda_err("occupancy"))?;
    if per_sm < 1 {
        return Err(CudaError::Unsupported(format!(
            "the decode kernel does not fit on an SM ({} threads, {smem_bytes} B shared)",
            options.threads
        ))
        .into());
    }
    Ok(Kernel { func, smem_bytes, num_counters, partial_floats, exchange_words, rx_floats, trace_events, from_cache })
}
