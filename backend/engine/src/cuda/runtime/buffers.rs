//! Buffers a run works in: each rank's per-request device state, and the host-mapped
//! control words and token ring that rank 0 shares with the host.

use std::sync::Arc;

use cudarc::driver::{sys, CudaContext, CudaSlice, CudaStream, PinnedHostSlice};

use super::kernel::Kernel;
use super::{alloc_err, check, cuda_err, CudaRuntime};
use crate::config::ModelConfig;
use crate::cuda::layout::{self, KernelOptions, PeerSlot, MAX_DEVICE_STOP_TOKENS};
use crate::error::Result;

/// Per-request state buffers of one rank.
pub(super) struct State {
    pub(super) kv: CudaSlice<u16>,
    pub(super) x: CudaSlice<f32>,
    pub(super) resid: CudaSlice<f32>,
    pub(super) qkv: CudaSlice<f32>,
    pub(super) attn: CudaSlice<f32>,
    pub(super) attn_part: CudaSlice<f32>,
    pub(super) act: CudaSlice<f32>,
    pub(super) logits: CudaSlice<f32>,
    pub(super) adj: CudaSlice<f32>,
    pub(super) partials: CudaSlice<f32>,
    pub(super) counters: CudaSlice<u32>,
    pub(super) tokens: CudaSlice<u32>,
    pub(super) seen: CudaSlice<u8>,
    /// `logit_bias` per token (uploaded by runs that have one).
    pub(super) logit_bias: CudaSlice<f32>,
    /// How often each token was generated (zeroed by runs with OpenAI penalties).
    pub(super) counts: CudaSlice<u32>,
    pub(super) stop_ids: CudaSlice<u32>,
    /// Tensor parallelism: the region peers write into (counters, LM messages, DTP's final h).
    pub(super) exchange: CudaSlice<u32>,
    /// Tensor parallelism: receive slots of partial sums (sentinel-filled before each run).
    pub(super) rx: CudaSlice<f32>,
    /// Tensor parallelism: every rank's `PeerSlot` pointers (filled once all ranks exist).
    pub(super) peers: CudaSlice<u64>,
    /// The phases' tagged words (zeroed per run; [`layout::tagged_words_used`]).
    pub(super) tagged: CudaSlice<u64>,
}

impl CudaRuntime {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn alloc_state(
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
        let f32s = |n: usize| stream.alloc_zeros::<f32>(n.max(1)).map_err(alloc_err("a run's f32 buffer", 4 * n.max(1)));
        let u32s = |n: usize| stream.alloc_zeros::<u32>(n.max(1)).map_err(alloc_err("a run's u32 buffer", 4 * n.max(1)));
        let kv_elems = c.num_layers * 2 * kvd * kv_cap;
        Ok(State {
            kv: stream.alloc_zeros::<u16>(kv_elems).map_err(alloc_err(format!("the KV cache ({kv_cap} positions)"), 2 * kv_elems))?,
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
            seen: stream.alloc_zeros::<u8>(full.vocab_size).map_err(alloc_err("the seen-token flags", full.vocab_size))?,
            logit_bias: f32s(full.vocab_size)?,
            counts: u32s(full.vocab_size)?,
            stop_ids: u32s(MAX_DEVICE_STOP_TOKENS)?,
            exchange: u32s(k.exchange_words)?,
            rx: f32s(k.rx_floats)?,
            peers: stream.alloc_zeros::<u64>(tp * PeerSlot::COUNT).map_err(alloc_err("the peer table", 8 * tp * PeerSlot::COUNT))?,
            // Allocated under TP too (a few MB at most): set_options may turn tp_down_waves on.
            tagged: stream
                .alloc_zeros::<u64>(layout::tagged_words(c))
                .map_err(alloc_err("the tagged words", 8 * layout::tagged_words(c)))?,
        })
    }
}

/// The host-mapped control words then the token ring (`words` u32, zeroed) in `ctx0`:
/// the allocation, its host pointer and the device address the kernel writes through.
pub(super) fn alloc_host_ring(ctx0: &Arc<CudaContext>, words: usize) -> Result<(PinnedHostSlice<u32>, *mut u32, u64)> {
    // SAFETY: the buffer is zeroed below before the kernel or the host reads it.
    let mut host = unsafe { ctx0.alloc_pinned_with_flags::<u32>(words, sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE) }
        .map_err(alloc_err("the host-mapped token ring", 4 * words))?;
    let host_ptr = host.as_mut_ptr().map_err(cuda_err("pinned pointer"))?;
    // SAFETY: `host_ptr` addresses `words` u32 owned by `host`.
    unsafe { std::ptr::write_bytes(host_ptr, 0, words) };
    let mut host_dev: sys::CUdeviceptr = 0;
    ctx0.bind_to_thread().map_err(cuda_err("bind context"))?;
    // SAFETY: `host_ptr` is a live DEVICEMAP allocation of this context.
    let r = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut host_dev, host_ptr as *mut _, 0) };
    check("cuMemHostGetDevicePointer", r)?;
    Ok((host, host_ptr, host_dev))
}
