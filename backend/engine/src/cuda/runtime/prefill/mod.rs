//! The prefill part ([`BatchedPrefill`]): the batched prefill of the prompt before the
//! decode kernel starts. One [`Prefill`] per rank (kernels.rs: its kernels, cuBLAS
//! handle and chunk buffers), enqueued on one GPU or, under tensor parallelism, on every
//! rank in lockstep with the partials exchanged by peer copies; ranks that run as one
//! launch on one GPU (`one_launch`) instead enqueue on one stream in turn, each writing
//! its partials into shared slots, so no copy and no cross-stream wait is needed.

mod kernels;

use self::kernels::{Exchange, PrefillOp, Profile};
pub(super) use self::kernels::{Prefill, PrefillWeights};

use std::sync::Arc;

use cudarc::driver::{sys, CudaEvent, CudaStream};

use super::buffers::State;
use super::devices::{Devices, Gpu};
use super::weights::DeviceWeights;
use super::{cuda_err, CudaRuntime, Shape};
use crate::cuda::layout::{self, KernelOptions, XMode};
use crate::error::{CudaError, Error, Result};
use crate::options::CudaPaths;

/// What `enqueue_prefill` put on the stream: the positions the KV cache holds after it
/// (where the kernels start), and events to time them.
#[derive(Default)]
pub(super) struct PrefillRun {
    pub(super) positions: usize,
    pub(super) span: Option<(CudaEvent, CudaEvent)>,
    pub(super) ops: Vec<(PrefillOp, CudaEvent, CudaEvent)>,
}

/// The prefill part: every rank's batched prefill, or none where it is off or the
/// shape needs the per-token path.
pub(super) struct BatchedPrefill {
    pub(super) ranks: Vec<Prefill>,
    /// Every rank enqueues on rank 0's stream and shares rank 0's receive slots.
    pub(super) one_stream: bool,
}

impl BatchedPrefill {
    /// Every rank's batched prefill for `shape` with `options`, or none where it is off
    /// or the shape needs the per-token path; a missing cuBLAS or a failed compile is an
    /// error that says how to run without it.
    pub(super) fn load(devices: &Devices, shape: &Shape, options: &KernelOptions, paths: &CudaPaths) -> Result<BatchedPrefill> {
        if !options.batched_prefill || layout::prefill_shape(&shape.shard).is_err() {
            return Ok(BatchedPrefill { ranks: Vec::new(), one_stream: false });
        }
        let tp = devices.tp();
        let one_stream = layout::launch_ranks(options, tp) > 1;
        let mut ranks: Vec<Prefill> = Vec::with_capacity(tp);
        for (rank, g) in devices.gpus.iter().enumerate() {
            g.ctx.bind_to_thread().map_err(cuda_err("bind context"))?;
            let dtp = shape.dtp.as_ref();
            let (stream, shared) = match ranks.first() {
                Some(r0) if one_stream => (&devices.gpus[0].stream, r0.slots_base()),
                _ if one_stream => (&devices.gpus[0].stream, None),
                _ => (&g.stream, None),
            };
            let p = Prefill::new(&g.ctx, stream, &shape.shard, options, paths, &devices.arch, shape.kv_cap, Some((rank, tp, dtp)), shared)
                .map_err(|e| match e {
                    Error::Cuda(e) => CudaError::context("batched prefill (--prefill tokens runs prompts token by token instead)", e).into(),
                    other => other,
                })?;
            ranks.push(p);
        }
        Ok(BatchedPrefill { ranks, one_stream })
    }

    /// Whether no rank has a batched prefill.
    pub(super) fn is_empty(&self) -> bool {
        self.ranks.is_empty()
    }

    /// Chooses each rank's attention kernel (`KernelOptions::prefill_mma_attention`).
    pub(super) fn set_mma_attention(&mut self, on: bool) {
        for p in self.ranks.iter_mut() {
            p.set_mma_attention(on);
        }
    }

    /// One line for logs: how prompts run with `batched` (the option) on `tp` ranks.
    pub(super) fn describe(&self, batched: bool, tp: usize) -> String {
        match (self.ranks.first(), batched) {
            (Some(p), true) if tp > 1 && self.one_stream => format!("{} for every rank on one stream, partials in shared slots", p.describe()),
            (Some(p), true) if tp > 1 => format!("{} on every rank, partials exchanged by peer copies", p.describe()),
            (Some(p), true) => p.describe(),
            (_, false) => "prompt token by token in the persistent kernel".to_string(),
            (None, true) => "prompt token by token (shape unsupported by the batched prefill)".to_string(),
        }
    }
}

/// One rank's share of the parts a prefill reads, borrowed together.
struct RankParts<'a> {
    gpu: &'a Gpu,
    /// The stream its work goes on (rank 0's for every rank under `one_stream`).
    stream: &'a Arc<CudaStream>,
    weights: &'a DeviceWeights,
    state: &'a State,
    prefill: &'a Prefill,
}

impl CudaRuntime {
    /// Enqueues the batched prefill of prompt positions `from`..P-2 (after `prepare`
    /// uploaded the tokens; the KV cache holds positions before `from`), so the kernels
    /// start at P-1; nothing when no position is left, or with the batched prefill off
    /// (the kernels then start at `from`).
    pub(super) fn enqueue_prefill(&mut self, from: usize, prompt_len: usize) -> Result<PrefillRun> {
        let n = prompt_len.saturating_sub(1);
        if !self.shape.options.batched_prefill || from >= n || self.prefill.is_empty() {
            return Ok(PrefillRun { positions: from, ..PrefillRun::default() });
        }
        let one_stream = self.prefill.one_stream;
        let stream0 = &self.devices.gpus[0].stream;
        let ranks: Vec<RankParts<'_>> = (self.devices.gpus.iter().zip(&self.weights.ranks))
            .zip(self.buffers.ranks.iter().zip(&self.prefill.ranks))
            .map(|((gpu, weights), (state, prefill))| {
                let stream = if one_stream { stream0 } else { &gpu.stream };
                RankParts { gpu, stream, weights, state, prefill }
            })
            .collect();
        let r0 = &ranks[0];
        r0.prefill.check_positions(n)?;
        // cuBLAS runs in the thread's current context (the engine thread may not be
        // the one that created the runtime).
        r0.gpu.ctx.bind_to_thread().map_err(cuda_err("bind context"))?;
        let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let start = r0.gpu.stream.record_event(flags).map_err(cuda_err("event"))?;
        let mut ops = Vec::new();
        let mut profile = if self.probes.prefill_profile() { Some(&mut ops) } else { None };
        if ranks.len() == 1 {
            let g = r0.gpu;
            r0.prefill.enqueue(
                &g.stream,
                &r0.weights.prefill_weights(),
                g.dptr(&r0.state.kv),
                g.dptr(&r0.state.tokens),
                from,
                n,
                profile,
            )?;
        } else {
            enqueue_tp(&ranks, self.shape.config.num_layers, from, n, &mut profile, one_stream)?;
        }
        let g0 = ranks[0].gpu;
        g0.ctx.bind_to_thread().map_err(cuda_err("bind context"))?;
        let stop = g0.stream.record_event(flags).map_err(cuda_err("event"))?;
        Ok(PrefillRun { positions: n, span: Some((start, stop)), ops })
    }
}

/// Runs `f(rank index, rank, profile)` for every rank in order with the rank's context
/// current (cuBLAS enqueues in it); only rank 0's ops are profiled.
fn each_rank(
    ranks: &[RankParts<'_>],
    profile: Profile<'_, '_>,
    mut f: impl FnMut(usize, &RankParts<'_>, Profile<'_, '_>) -> Result<()>,
) -> Result<()> {
    let mut none = None;
    for (i, r) in ranks.iter().enumerate() {
        r.gpu.ctx.bind_to_thread().map_err(cuda_err("bind context"))?;
        f(i, r, if i == 0 { &mut *profile } else { &mut none })?;
    }
    Ok(())
}

/// The batched prefill under tensor parallelism: every rank's half-layers in turn, each
/// o / down half followed by the exchange of the partials (`exchange`). Rank 0's ops are
/// the profiled ones. `one_stream`: every rank's work is on one stream in this order and
/// the slots are shared, so the order alone makes each partial land before it is added.
fn enqueue_tp(ranks: &[RankParts<'_>], layers: usize, from: usize, n: usize, profile: Profile<'_, '_>, one_stream: bool) -> Result<()> {
    for (c0, rows) in ranks[0].prefill.chunks(from, n) {
        // Per (layer, exchange): every rank's event after its copies to the peers.
        let mut sent: Vec<Vec<CudaEvent>> = (0..2 * layers).map(|_| Vec::new()).collect();
        each_rank(ranks, profile, |_, r, p| {
            r.prefill.enqueue_embed(r.stream, &r.weights.prefill_weights(), r.gpu.dptr(&r.state.tokens), c0, rows, p)
        })?;
        for l in 0..layers {
            each_rank(ranks, profile, |_, r, p| {
                r.prefill.enqueue_attention(r.stream, &r.weights.prefill_weights(), l, r.gpu.dptr(&r.state.kv), c0, rows, p)
            })?;
            exchange(ranks, l, Exchange::O, rows, &mut sent, profile, one_stream)?;
            each_rank(ranks, profile, |_, r, p| r.prefill.enqueue_ffn(r.stream, &r.weights.prefill_weights(), l, rows, p))?;
            exchange(ranks, l, Exchange::Down, rows, &mut sent, profile, one_stream)?;
        }
        if ranks[0].prefill.slots_per_layer() && !one_stream {
            // DTP: a layer's slots are read up to `delay` layers after the peers wrote
            // them, after the last wait on those peers: no rank starts the next chunk
            // (and writes the slots again) before every rank is done with this one.
            let ends = ranks
                .iter()
                .map(|r| r.gpu.stream.record_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)).map_err(cuda_err("event")))
                .collect::<Result<Vec<_>>>()?;
            for (i, r) in ranks.iter().enumerate() {
                r.gpu.wait_for_peers(i, &ends, "wait for a peer's chunk")?;
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
/// rank's stream records after the add that read them. `one_stream`: the partials are
/// already in the shared slots and the stream's order is the only wait: just the adds.
fn exchange(
    ranks: &[RankParts<'_>],
    l: usize,
    kind: Exchange,
    rows: usize,
    sent: &mut [Vec<CudaEvent>],
    profile: Profile<'_, '_>,
    one_stream: bool,
) -> Result<()> {
    if one_stream {
        return each_rank(ranks, profile, |_, r, p| r.prefill.enqueue_add_parts(r.stream, l, kind, rows, p));
    }
    let bytes = ranks[0].prefill.part_bytes(rows);
    let (mode, late, send) = ranks[0].prefill.exchange_of(l);
    let at = |layer: usize| 2 * layer + kind as usize;
    if send {
        // (The copies are not profiled: the add that follows them is.)
        each_rank(ranks, &mut None, |i, r, _| {
            let src = r.prefill.part_slot(l, kind, i);
            for (p, peer) in ranks.iter().enumerate() {
                if p == i {
                    continue;
                }
                let dst = peer.prefill.part_slot(l, kind, i);
                // SAFETY: both slots are live allocations of `bytes` or more (chunk rows ≥
                // rows); the copy is ordered after this rank's GEMM on its stream and before
                // the peer's add by the event below.
                unsafe {
                    cudarc::driver::result::memcpy_peer_async(
                        peer.gpu.ctx.cu_ctx(),
                        dst,
                        r.gpu.ctx.cu_ctx(),
                        src,
                        bytes,
                        r.gpu.stream.cu_stream(),
                    )
                }
                .map_err(cuda_err("prefill peer copy"))?;
            }
            sent[at(l)].push(r.gpu.stream.record_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)).map_err(cuda_err("event"))?);
            Ok(())
        })?;
    }
    let waits_on = match mode {
        XMode::All => Some(l),
        _ => usize::try_from(late).ok(),
    };
    if let Some(m) = waits_on.filter(|&m| sent[at(m)].len() != ranks.len()) {
        return Err(CudaError::Mismatch(format!("prefill exchange: layer {l} adds layer {m}'s partials, which were never sent")).into());
    }
    each_rank(ranks, profile, |i, r, p| {
        if let Some(m) = waits_on {
            r.gpu.wait_for_peers(i, &sent[at(m)], "wait for a peer's partials")?;
        }
        r.prefill.enqueue_add_parts(r.stream, l, kind, rows, p)
    })
}
