//! Batched prompt prefill on the tensor cores: prompt positions 0..P-2 run as a batch
//! of rows through cuBLAS GEMMs (bf16 in, f32 out) and the small kernels of
//! kernels/prefill.cu, chunk by chunk, all enqueued on the runtime's stream before the
//! persistent decode kernel, which then starts at step P-1 (`Arg::StartStep`) and
//! samples the first token as before. The per-layer order is the decode kernel's:
//! RMSNorm → q/k/v (+bias, RoPE, KV-cache write) → causal attention → o-proj + residual
//! → RMSNorm → gate/up → SwiGLU → down + residual; the residual stream stays f32.
//! Under tensor parallelism each rank runs its shard (its heads, FFN columns and KV
//! heads) and its o- and down-projection GEMMs write a partial into its own slot of the
//! receive buffer; the runtime copies the slot to the peers and each rank adds every
//! rank's partial in rank order (`enqueue_add_parts`), so every rank's residual holds
//! the same bits (mod.rs `enqueue_tp`).

use std::sync::Arc;

use cudarc::driver::{sys, CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg};

use crate::config::ModelConfig;
use crate::cuda::cublas::{self, Blas};
use crate::cuda::layout::{self, KernelOptions, LayerSlot, PrefillShape, XMode, PREFILL_ATTN_THREADS, PREFILL_ROW_THREADS};
use crate::cuda::nvrtc;
use crate::cuda::run_stats::PrefillSplit;
use crate::cuda::{alloc_err, cuda_err};
use crate::dtp::DtpSchedule;
use crate::error::{CudaError, Result};
use crate::options::CudaPaths;

/// Kinds of prefill work, for the GPU time split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrefillOp {
    /// cuBLAS GEMMs (q/k/v, o, gate/up, down).
    Gemm,
    /// Causal attention over the cache.
    Attention,
    /// Embedding, RMSNorm, bias + RoPE + KV write, SwiGLU.
    Rows,
}

/// Device pointers of the weights the prefill reads.
pub struct PrefillWeights<'a> {
    /// Per layer, the [`LayerSlot`] pointers (the same table the decode kernel reads).
    pub layers: &'a [[u64; LayerSlot::COUNT]],
    pub embed: u64,
    pub inv_freq: u64,
}

/// Which projection's partials a tensor-parallel exchange carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exchange {
    /// The o-projection (after attention).
    O = 0,
    /// The down-projection (after the FFN).
    Down = 1,
}

/// Tensor parallelism: this rank, the receive slots of the partials
/// `[slot layers][2 exchanges][tp ranks][chunk × hidden]` f32, and how each layer's
/// partials enter the residual. Standard TP reuses one slot layer (every layer
/// all-reduces before the next writes); DTP keeps one per layer (a layer's partials are
/// added `delay` layers later). Ranks on one GPU that share one stream (`one_launch`)
/// share rank 0's slots: each writes its own slot there and reads every rank's.
struct TpParts {
    rank: usize,
    tp: usize,
    slot_layers: usize,
    /// The slots this rank owns (None: it uses another rank's, at `base`).
    _slots: Option<CudaSlice<f32>>,
    /// Device address of the slots this rank writes and reads.
    base: u64,
    /// Per layer: (mode, layer whose other-lane partials it adds or -1, sends its own).
    table: Vec<(XMode, i64, bool)>,
    /// DTP's lane-local scale (√lanes).
    lane_scale: f32,
}

/// Prompt positions per chunk under DTP, whose receive slots are per layer
/// (layers × 2 × lanes × chunk × hidden floats per rank), so the chunk bounds their size.
const DTP_CHUNK: usize = 256;

/// Where the profiled events of a prefill go (None: not profiled).
pub type Profile<'a, 'b> = &'a mut Option<&'b mut Vec<(PrefillOp, CudaEvent, CudaEvent)>>;

/// Compiled prefill kernels, the cuBLAS handle and the chunk's activation buffers.
pub struct Prefill {
    blas: Blas,
    embed: CudaFunction,
    rmsnorm: CudaFunction,
    qkv_rope: CudaFunction,
    attention: CudaFunction,
    /// The tensor-core attention, where the shape has it.
    attention_mma: Option<CudaFunction>,
    /// Use `attention_mma` (option and shape both allow it).
    use_mma: bool,
    swiglu: CudaFunction,
    add_parts: CudaFunction,
    /// Tensor parallelism (None on one GPU).
    tp: Option<TpParts>,
    shape: PrefillShape,
    config: ModelConfig,
    kv_cap: usize,
    /// Rows per chunk.
    chunk: usize,
    /// Residual stream, f32 `[chunk × hidden]`.
    x: CudaSlice<f32>,
    /// GEMM input, bf16 `[chunk × max(hidden, q dims, ffn)]`.
    a: CudaSlice<u16>,
    /// q/k/v GEMM output, f32 `[chunk × (q + 2·kv dims)]`.
    qkv: CudaSlice<f32>,
    /// gate/up GEMM output (interleaved), f32 `[chunk × 2·ffn]`.
    gu: CudaSlice<f32>,
    /// Where cuBLAS was loaded from, chunking, and whether the cubin came from the cache.
    info: String,
}

impl Prefill {
    /// Compiles prefill.cu for `config` (a rank's shard under tensor parallelism), loads
    /// cuBLAS and allocates the chunk buffers. `tp`: (this rank, degree, DTP schedule)
    /// under tensor parallelism; the context must be current (cuBLAS binds to it).
    /// `shared_slots`: the address of another rank's receive slots to use instead of
    /// allocating its own (ranks sharing one GPU and one stream).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        ctx: &Arc<CudaContext>,
        stream: &Arc<CudaStream>,
        config: &ModelConfig,
        options: &KernelOptions,
        paths: &CudaPaths,
        arch: &str,
        kv_cap: usize,
        tp: Option<(usize, usize, Option<&DtpSchedule>)>,
        shared_slots: Option<u64>,
    ) -> Result<Prefill> {
        let shape = layout::prefill_shape(config).map_err(|why| CudaError::Unsupported(format!("batched prefill unsupported: {why}")))?;
        let blas_dir = cublas::preload(&paths.cublas_dirs)?;
        let blas = Blas::new(stream.clone())?;
        let cache = paths.cubin_cache.as_deref();
        let (cubin, from_cache) =
            nvrtc::cubin_of(nvrtc::PREFILL_SOURCE, cache, arch, &layout::defines(config, options, super::super::shared_per_block(ctx)?))?;
        let module = ctx.load_module(cudarc::nvrtc::Ptx::from_binary(cubin)).map_err(cuda_err("cuModuleLoadData (prefill)"))?;
        let load = |name: &str| module.load_function(name).map_err(cuda_err("cuModuleGetFunction (prefill)"));
        let c = config;
        let (qd, kvd) = (c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim);
        // DTP keeps every layer's partials for the chunk: smaller chunks bound that memory.
        let dtp = tp.and_then(|t| t.2);
        let chunk = options.prefill_chunk.min(if dtp.is_some() { DTP_CHUNK } else { usize::MAX }).min(kv_cap).max(1);
        let f32s = |n: usize| stream.alloc_zeros::<f32>(n.max(1)).map_err(alloc_err("a batched-prefill buffer", 4 * n.max(1)));
        let widest = c.hidden_size.max(qd).max(c.intermediate_size);
        Ok(Prefill {
            blas,
            embed: load("pg_pf_embed")?,
            rmsnorm: load("pg_pf_rmsnorm")?,
            qkv_rope: load("pg_pf_qkv_rope")?,
            attention: load("pg_pf_attention")?,
            attention_mma: if shape.mma { Some(load("pg_pf_attention_mma")?) } else { None },
            use_mma: shape.mma && options.prefill_mma_attention,
            swiglu: load("pg_pf_swiglu")?,
            add_parts: load("pg_pf_add_parts")?,
            tp: match tp {
                Some((rank, tp, _)) if tp > 1 => {
                    let slot_layers = if dtp.is_some() { c.num_layers } else { 1 };
                    let own = match shared_slots {
                        Some(_) => None,
                        None => Some(f32s(slot_layers * 2 * tp * chunk * c.hidden_size)?),
                    };
                    let base = match (&own, shared_slots) {
                        (Some(s), _) => s.device_ptr(stream).0,
                        (None, shared) => shared.unwrap_or_default(),
                    };
                    Some(TpParts {
                        rank,
                        tp,
                        slot_layers,
                        _slots: own,
                        base,
                        table: layout::exchange_table(c.num_layers, dtp),
                        lane_scale: (tp as f32).sqrt(),
                    })
                }
                _ => None,
            },
            shape,
            config: config.clone(),
            kv_cap,
            chunk,
            x: f32s(chunk * c.hidden_size)?,
            a: stream.alloc_zeros::<u16>(chunk * widest).map_err(alloc_err("a batched-prefill buffer", 2 * chunk * widest))?,
            qkv: f32s(chunk * (qd + 2 * kvd))?,
            gu: f32s(chunk * 2 * c.intermediate_size)?,
            info: format!(
                "cuBLAS from {}, {chunk}-row chunks, kernels {}",
                blas_dir.display(),
                if from_cache { "from cubin cache" } else { "compiled" }
            ),
        })
    }

    /// One line for logs and benchmarks.
    pub fn describe(&self) -> String {
        let on = if self.use_mma { "tensor cores" } else { "CUDA cores" };
        format!("batched prefill: {}, attention on {on} ({:?})", self.info, self.shape)
    }

    /// Chooses the attention kernel (`KernelOptions::prefill_mma_attention`); the
    /// tensor-core one only where the shape has it.
    pub fn set_mma_attention(&mut self, on: bool) {
        self.use_mma = on && self.attention_mma.is_some();
    }

    /// The chunks of a prefill of positions `from..n`: (first position, rows).
    pub fn chunks(&self, from: usize, n: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        (from..n).step_by(self.chunk).map(move |c0| (c0, self.chunk.min(n - c0)))
    }

    /// Enqueues prompt positions `from..n` on `stream` (tokens already on the device at
    /// `tokens`, the KV cache at `kv`, holding positions `0..from` already), writing
    /// their K/V rows into the cache. With
    /// `profile`, records an event pair around every op. One GPU only (tensor
    /// parallelism interleaves the ranks' halves of each layer with the exchanges).
    #[allow(clippy::too_many_arguments)]
    pub fn enqueue(
        &self,
        stream: &Arc<CudaStream>,
        w: &PrefillWeights<'_>,
        kv: u64,
        tokens: u64,
        from: usize,
        n: usize,
        mut profile: Option<&mut Vec<(PrefillOp, CudaEvent, CudaEvent)>>,
    ) -> Result<()> {
        self.check_positions(n)?;
        for (c0, rows) in self.chunks(from, n) {
            self.enqueue_embed(stream, w, tokens, c0, rows, &mut profile)?;
            for l in 0..w.layers.len() {
                self.enqueue_attention(stream, w, l, kv, c0, rows, &mut profile)?;
                self.enqueue_ffn(stream, w, l, rows, &mut profile)?;
            }
        }
        Ok(())
    }

    /// A prefill of `n` positions fits the KV cache.
    pub fn check_positions(&self, n: usize) -> Result<()> {
        if n > self.kv_cap {
            return Err(CudaError::Unsupported(format!("prefill of {n} positions exceeds the {}-position KV cache", self.kv_cap)).into());
        }
        Ok(())
    }

    /// Runs `run` on `stream`, between two recorded events when profiling.
    fn timed(stream: &Arc<CudaStream>, profile: Profile<'_, '_>, op: PrefillOp, run: impl FnOnce() -> Result<()>) -> Result<()> {
        let Some(events) = profile.as_deref_mut() else { return run() };
        let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let start = stream.record_event(flags).map_err(cuda_err("event"))?;
        run()?;
        let stop = stream.record_event(flags).map_err(cuda_err("event"))?;
        events.push((op, start, stop));
        Ok(())
    }

    /// Launches `func` with u64 arguments.
    fn launch(stream: &Arc<CudaStream>, func: &CudaFunction, cfg: LaunchConfig, args: &[u64], what: &str) -> Result<()> {
        let mut b = stream.launch_builder(func);
        for v in args {
            b.arg(v);
        }
        // SAFETY: every pointer argument addresses a live buffer of the size the
        // kernel was compiled for (chunk rows ≤ self.chunk, positions < kv_cap).
        unsafe { b.launch(cfg) }.map(|_| ()).map_err(cuda_err(what))
    }

    fn rows_cfg(rows: usize) -> LaunchConfig {
        LaunchConfig { grid_dim: (rows as u32, 1, 1), block_dim: (PREFILL_ROW_THREADS, 1, 1), shared_mem_bytes: 0 }
    }

    /// Grid over `total` elements for the element-wise kernels.
    fn elems_cfg(total: usize) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (total.div_ceil(PREFILL_ROW_THREADS as usize) as u32, 1, 1),
            block_dim: (PREFILL_ROW_THREADS, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn gemm(&self, wt: u64, input: u64, out: u64, rows: usize, n_out: usize, k: usize, beta: f32) -> Result<()> {
        // SAFETY: `wt` is an [n_out × k] bf16 weight, `input` the [rows × k] bf16
        // chunk buffer, `out` an f32 chunk buffer of ≥ rows × n_out (sized in `new`).
        unsafe { self.blas.gemm_bf16(wt, input, out, rows, n_out, k, beta) }
    }

    /// The residual stream of a chunk: the embedding rows of positions c0..c0+rows.
    pub fn enqueue_embed(
        &self,
        stream: &Arc<CudaStream>,
        w: &PrefillWeights<'_>,
        tokens: u64,
        c0: usize,
        rows: usize,
        profile: Profile<'_, '_>,
    ) -> Result<()> {
        let x = self.x.device_ptr(stream).0;
        Self::timed(stream, profile, PrefillOp::Rows, || {
            let mut b = stream.launch_builder(&self.embed);
            let c0u = c0 as u32;
            b.arg(&tokens).arg(&w.embed).arg(&x).arg(&c0u);
            // SAFETY: tokens holds ≥ c0 + rows ids < vocab (checked by the runtime); x has chunk × hidden floats.
            unsafe { b.launch(Self::rows_cfg(rows)) }.map(|_| ()).map_err(cuda_err("prefill embed"))
        })
    }

    /// Layer `l`'s attention half: RMSNorm → q/k/v (+bias, RoPE, KV-cache write) →
    /// causal (or windowed) attention → o-projection, added to the residual on one GPU, into this
    /// rank's partial slot under tensor parallelism (then `enqueue_add_parts`).
    #[allow(clippy::too_many_arguments)]
    pub fn enqueue_attention(
        &self,
        stream: &Arc<CudaStream>,
        w: &PrefillWeights<'_>,
        l: usize,
        kv: u64,
        c0: usize,
        rows: usize,
        profile: Profile<'_, '_>,
    ) -> Result<()> {
        let c = &self.config;
        let (d, hd) = (c.hidden_size, c.head_dim);
        let (qd, kvd) = (c.num_heads * hd, c.num_kv_heads * hd);
        let layer_kv_bytes = (2 * kvd * self.kv_cap * std::mem::size_of::<u16>()) as u64;
        let (x, qkv, a) = (self.x.device_ptr(stream).0, self.qkv.device_ptr(stream).0, self.a.device_ptr(stream).0);
        let lw = &w.layers[l];
        let kc = kv + l as u64 * layer_kv_bytes;
        Self::timed(stream, profile, PrefillOp::Rows, || {
            Self::launch(stream, &self.rmsnorm, Self::rows_cfg(rows), &[x, lw[LayerSlot::AttnNorm.index()], a], "prefill rmsnorm")
        })?;
        Self::timed(stream, profile, PrefillOp::Gemm, || self.gemm(lw[LayerSlot::Wqkv.index()], a, qkv, rows, qd + 2 * kvd, d, 0.0))?;
        Self::timed(stream, profile, PrefillOp::Rows, || {
            let mut b = stream.launch_builder(&self.qkv_rope);
            let c0u = c0 as u32;
            b.arg(&qkv).arg(&lw[LayerSlot::QkvBias.index()]).arg(&w.inv_freq).arg(&kc).arg(&c0u);
            // SAFETY: qkv holds rows × (q + 2 kv) floats; positions c0..c0+rows < kv_cap.
            unsafe { b.launch(Self::rows_cfg(rows)) }.map(|_| ()).map_err(cuda_err("prefill qkv rope"))
        })?;
        Self::timed(stream, profile, PrefillOp::Attention, || {
            let (func, per_block) = match (&self.attention_mma, self.use_mma) {
                (Some(f), true) => (f, self.shape.mma_queries_per_block as usize),
                _ => (&self.attention, self.shape.queries_per_block as usize),
            };
            let cfg = LaunchConfig {
                grid_dim: (rows.div_ceil(per_block) as u32, c.num_heads as u32, 1),
                block_dim: (PREFILL_ATTN_THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut b = stream.launch_builder(func);
            let (c0u, nu) = (c0 as u32, rows as u32);
            // A windowed layer's queries see their last `win` positions only (0: all).
            let win = c.sliding_window.of_layer(l).unwrap_or(0) as u32;
            b.arg(&qkv).arg(&kc).arg(&a).arg(&c0u).arg(&nu).arg(&win);
            // SAFETY: the cache holds positions 0..c0+rows of this layer (written above
            // and by earlier chunks); `a` holds rows × q dims bf16.
            unsafe { b.launch(cfg) }.map(|_| ()).map_err(cuda_err("prefill attention"))
        })?;
        let (out, beta) = self.projection_out(stream, l, Exchange::O);
        Self::timed(stream, profile, PrefillOp::Gemm, || self.gemm(lw[LayerSlot::Wo.index()], a, out, rows, d, qd, beta))
    }

    /// Layer `l`'s FFN half: RMSNorm → gate/up → SwiGLU → down-projection (added to the
    /// residual, or this rank's partial slot, as in `enqueue_attention`).
    pub fn enqueue_ffn(
        &self,
        stream: &Arc<CudaStream>,
        w: &PrefillWeights<'_>,
        l: usize,
        rows: usize,
        profile: Profile<'_, '_>,
    ) -> Result<()> {
        let c = &self.config;
        let (d, f) = (c.hidden_size, c.intermediate_size);
        let (x, gu, a) = (self.x.device_ptr(stream).0, self.gu.device_ptr(stream).0, self.a.device_ptr(stream).0);
        let lw = &w.layers[l];
        Self::timed(stream, profile, PrefillOp::Rows, || {
            Self::launch(stream, &self.rmsnorm, Self::rows_cfg(rows), &[x, lw[LayerSlot::FfnNorm.index()], a], "prefill rmsnorm")
        })?;
        Self::timed(stream, profile, PrefillOp::Gemm, || self.gemm(lw[LayerSlot::WgateUp.index()], a, gu, rows, 2 * f, d, 0.0))?;
        Self::timed(stream, profile, PrefillOp::Rows, || {
            let total = (rows * f) as u32;
            let mut b = stream.launch_builder(&self.swiglu);
            b.arg(&gu).arg(&a).arg(&total);
            // SAFETY: gu holds rows × 2·ffn floats, a rows × ffn bf16.
            unsafe { b.launch(Self::elems_cfg(rows * f)) }.map(|_| ()).map_err(cuda_err("prefill swiglu"))
        })?;
        let (out, beta) = self.projection_out(stream, l, Exchange::Down);
        Self::timed(stream, profile, PrefillOp::Gemm, || self.gemm(lw[LayerSlot::Wdown.index()], a, out, rows, d, f, beta))
    }

    /// Where an o / down GEMM writes: the residual (β = 1) on one GPU, this rank's
    /// partial slot (β = 0) under tensor parallelism.
    fn projection_out(&self, stream: &Arc<CudaStream>, layer: usize, kind: Exchange) -> (u64, f32) {
        match &self.tp {
            Some(t) => (self.part_slot(layer, kind, t.rank), 0.0),
            None => (self.x.device_ptr(stream).0, 1.0),
        }
    }

    /// Tensor parallelism: the device address of rank `slot`'s partial of layer `layer`'s
    /// exchange `kind` in this rank's receive buffer (rank `slot` copies its partial there).
    pub fn part_slot(&self, layer: usize, kind: Exchange, slot: usize) -> u64 {
        let t = self.tp.as_ref().expect("part_slot under tensor parallelism only");
        let floats = self.chunk * self.config.hidden_size;
        let index = ((layer % t.slot_layers) * 2 + kind as usize) * t.tp + slot;
        t.base + (index * floats * std::mem::size_of::<f32>()) as u64
    }

    /// Tensor parallelism: the device address of this rank's receive slots (for ranks
    /// that share them).
    pub fn slots_base(&self) -> Option<u64> {
        self.tp.as_ref().map(|t| t.base)
    }

    /// Tensor parallelism: layer `layer`'s (mode, layer whose other-lane partials it
    /// adds or -1, whether its own partials go to the other ranks).
    pub fn exchange_of(&self, layer: usize) -> (XMode, i64, bool) {
        self.tp.as_ref().expect("exchange_of under tensor parallelism only").table[layer]
    }

    /// Tensor parallelism: whether the receive slots are per layer (DTP), so a peer must not
    /// start the next chunk before this rank has read the current one's.
    pub fn slots_per_layer(&self) -> bool {
        self.tp.as_ref().is_some_and(|t| t.slot_layers > 1)
    }

    /// Bytes of one rank's partial of a `rows`-row chunk.
    pub fn part_bytes(&self, rows: usize) -> usize {
        rows * self.config.hidden_size * std::mem::size_of::<f32>()
    }

    /// Tensor parallelism: layer `layer`'s partials of `kind` into the residual, as its
    /// mode says (all-reduce in rank order, DTP lane-local or delayed; the peers' copies
    /// must be ordered before this on `stream`).
    pub fn enqueue_add_parts(
        &self,
        stream: &Arc<CudaStream>,
        layer: usize,
        kind: Exchange,
        rows: usize,
        profile: Profile<'_, '_>,
    ) -> Result<()> {
        let t = self.tp.as_ref().expect("enqueue_add_parts under tensor parallelism only");
        let x = self.x.device_ptr(stream).0;
        let (mode, late, _) = t.table[layer];
        let now = self.part_slot(layer, kind, 0);
        let late = if late >= 0 { self.part_slot(late as usize, kind, 0) } else { 0 };
        let total = rows * self.config.hidden_size;
        Self::timed(stream, profile, PrefillOp::Rows, || {
            let mut b = stream.launch_builder(&self.add_parts);
            let (n, stride, tot) = (t.tp as u32, (self.chunk * self.config.hidden_size) as u32, total as u32);
            let (mode, rank) = (mode as u32, t.rank as u32);
            b.arg(&x).arg(&now).arg(&late).arg(&n).arg(&stride).arg(&tot).arg(&mode).arg(&rank).arg(&t.lane_scale);
            // SAFETY: x holds rows × hidden floats, the slots tp × chunk × hidden each.
            unsafe { b.launch(Self::elems_cfg(total)) }.map(|_| ()).map_err(cuda_err("prefill add partials"))
        })
    }

    /// Sums the profiled event pairs by kind (after the stream finished them).
    pub fn split(events: &[(PrefillOp, CudaEvent, CudaEvent)]) -> Result<PrefillSplit> {
        let mut s = PrefillSplit::default();
        for (op, start, stop) in events {
            let ms = start.elapsed_ms(stop).map_err(cuda_err("event time"))? as f64;
            match op {
                PrefillOp::Gemm => s.gemm_ms += ms,
                PrefillOp::Attention => s.attention_ms += ms,
                PrefillOp::Rows => s.rows_ms += ms,
            }
        }
        Ok(s)
    }
}
