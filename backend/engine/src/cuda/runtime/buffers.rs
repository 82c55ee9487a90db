//! The buffers part: each rank's per-request device state ([`Buffers`]), the KV cache
//! among it.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};

use super::devices::Devices;
use super::kernel::{Kernel, Kernels};
use super::{alloc_err, Shape};
use crate::config::ModelConfig;
use crate::cuda::layout::{self, Arg, KernelOptions, PeerSlot, MAX_DEVICE_STOP_TOKENS};
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
    /// `grammar_mask`: the allowed-token bits of the token being sampled (copied per token).
    pub(super) grammar_bits: CudaSlice<u32>,
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
    /// `one_launch`: every rank's argument block, which the one launch reads (rank 0's is used).
    pub(super) rank_args: CudaSlice<u64>,
}

/// The buffers part: each rank's [`State`].
pub(super) struct Buffers {
    pub(super) ranks: Vec<State>,
}

impl Buffers {
    /// Every rank's state for `shape`, sized for its kernel in `kernels`.
    pub(super) fn alloc(devices: &Devices, kernels: &Kernels, shape: &Shape) -> Result<Buffers> {
        let tp = devices.tp();
        let ranks = devices
            .gpus
            .iter()
            .zip(&kernels.ranks)
            .map(|(g, k)| alloc_state(&g.stream, &shape.config, &shape.shard, &shape.options, shape.kv_cap, k, g.sm_count, tp))
            .collect::<Result<Vec<_>>>()?;
        Ok(Buffers { ranks })
    }

    /// Whether every rank's buffers fit kernel `k` on a grid of `grid` blocks (another
    /// threads per block changes the kernel's per-block buffers).
    pub(super) fn fit(&self, kernels: &[Kernel], grid: u32) -> bool {
        self.ranks.iter().zip(kernels).all(|(s, k)| {
            k.num_counters <= s.counters.len()
                && k.partial_floats * grid as usize <= s.partials.len()
                && k.exchange_words <= s.exchange.len()
                && k.rx_floats <= s.rx.len()
        })
    }
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
        grammar_bits: u32s(full.vocab_size.div_ceil(32))?,
        counts: u32s(full.vocab_size)?,
        stop_ids: u32s(MAX_DEVICE_STOP_TOKENS)?,
        exchange: u32s(k.exchange_words)?,
        rx: f32s(k.rx_floats)?,
        peers: stream.alloc_zeros::<u64>(tp * PeerSlot::COUNT).map_err(alloc_err("the peer table", 8 * tp * PeerSlot::COUNT))?,
        // Allocated under TP too (a few MB at most): set_options may turn tp_down_waves on.
        tagged: stream.alloc_zeros::<u64>(layout::tagged_words(c)).map_err(alloc_err("the tagged words", 8 * layout::tagged_words(c)))?,
        rank_args: stream.alloc_zeros::<u64>(tp * Arg::COUNT).map_err(alloc_err("the ranks' argument table", 8 * tp * Arg::COUNT))?,
    })
}
