//! The batched prefill of the prompt before the decode kernel starts: loading one
//! [`Prefill`] per rank (kernels.rs: its kernels, cuBLAS handle and chunk buffers), and
//! enqueueing it on one GPU or, under tensor parallelism, on every rank in lockstep
//! with the partials exchanged by peer copies.

mod kernels;

use self::kernels::{Exchange, PrefillOp, Profile};
pub(super) use self::kernels::{Prefill, PrefillWeights};

use cudarc::driver::{sys, CudaEvent};

use super::{cuda_err, CudaRuntime, Rank};
use crate::config::ModelConfig;
use crate::cuda::layout::{self, KernelOptions, XMode};
use crate::dtp::DtpSchedule;
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

/// The batched prefill of every rank (`shard`: one rank's shape; `dtp`: the DTP
/// schedule), or none where it is off or the shape needs the per-token path; a missing
/// cuBLAS or a failed compile is an error that says how to run without it.
pub(super) fn load_prefills(
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
            Prefill::new(&r.ctx, &r.stream, shard, options, paths, arch, kv_cap, Some((rank, tp, dtp))).map_err(|e| match e {
                Error::Cuda(e) => CudaError::context("batched prefill (--prefill tokens runs prompts token by token instead)", e).into(),
                other => other,
            })
        })
        .collect()
}

impl CudaRuntime {
    /// Enqueues the batched prefill of prompt positions `from`..P-2 (after `prepare`
    /// uploaded the tokens; the KV cache holds positions before `from`), so the kernels
    /// start at P-1; nothing when no position is left, or with the batched prefill off
    /// (the kernels then start at `from`).
    pub(super) fn enqueue_prefill(&mut self, from: usize, prompt_len: usize) -> Result<PrefillRun> {
        let n = prompt_len.saturating_sub(1);
        if !self.options.batched_prefill || from >= n || self.prefills.is_empty() {
            return Ok(PrefillRun { positions: from, ..PrefillRun::default() });
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
            self.prefills[0].enqueue(
                &r0.stream,
                &r0.prefill_weights(),
                r0.dptr(&r0.state.kv),
                r0.dptr(&r0.state.tokens),
                from,
                n,
                profile,
            )?;
        } else {
            self.enqueue_prefill_tp(from, n, &mut profile)?;
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
    fn enqueue_prefill_tp(&self, from: usize, n: usize, profile: Profile<'_, '_>) -> Result<()> {
        let layers = self.config.num_layers;
        for (c0, rows) in self.prefills[0].chunks(from, n) {
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
            return Err(CudaError::Mismatch(format!("prefill exchange: layer {l} adds layer {m}'s partials, which were never sent")).into());
        }
        self.each_rank(profile, |i, r, pf, p| {
            if let Some(m) = waits_on {
                r.wait_for_peers(i, &sent[at(m)], "wait for a peer's partials")?;
            }
            pf.enqueue_add_parts(&r.stream, l, kind, rows, p)
        })
    }
}
