//! Batched prompt prefill on the tensor cores: prompt positions 0..P-2 run as a batch
//! of rows through cuBLAS GEMMs (bf16 in, f32 out) and the small kernels of
//! kernels/prefill.cu, chunk by chunk, all enqueued on the runtime's stream before the
//! persistent decode kernel, which then starts at step P-1 (`Arg::StartStep`) and
//! samples the first token as before. The per-layer order is the decode kernel's:
//! RMSNorm → q/k/v (+bias, RoPE, KV-cache write) → causal attention → o-proj + residual
//! → RMSNorm → gate/up → SwiGLU → down + residual; the residual stream stays f32.

use std::sync::Arc;

use cudarc::driver::{sys, CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg};

use crate::config::ModelConfig;
use crate::cuda::cublas::{self, Blas};
use crate::cuda::layout::{self, KernelOptions, LayerSlot, PrefillShape, PREFILL_ATTN_THREADS, PREFILL_ROW_THREADS};
use crate::cuda::nvrtc;
use crate::cuda::run_stats::PrefillSplit;
use crate::error::{Error, Result};

fn cuda_err(what: &str) -> impl Fn(cudarc::driver::DriverError) -> Error + '_ {
    move |e| Error::Cuda(format!("{what}: {e:?}"))
}

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
    /// Compiles prefill.cu for `config`, loads cuBLAS and allocates the chunk buffers.
    pub fn new(
        ctx: &Arc<CudaContext>,
        stream: &Arc<CudaStream>,
        config: &ModelConfig,
        options: &KernelOptions,
        arch: &str,
        kv_cap: usize,
    ) -> Result<Prefill> {
        let shape = layout::prefill_shape(config).map_err(|why| Error::Cuda(format!("batched prefill unsupported: {why}")))?;
        let blas_dir = cublas::preload()?;
        let blas = Blas::new(stream.clone())?;
        let (cubin, from_cache) = nvrtc::cubin_of(nvrtc::PREFILL_SOURCE, arch, &layout::defines(config, options))?;
        let module = ctx.load_module(cudarc::nvrtc::Ptx::from_binary(cubin)).map_err(cuda_err("cuModuleLoadData (prefill)"))?;
        let load = |name: &str| module.load_function(name).map_err(cuda_err("cuModuleGetFunction (prefill)"));
        let c = config;
        let (qd, kvd) = (c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim);
        let chunk = options.prefill_chunk.min(kv_cap).max(1);
        let f32s = |n: usize| stream.alloc_zeros::<f32>(n.max(1)).map_err(cuda_err("cuMemAlloc (prefill)"));
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
            shape,
            config: config.clone(),
            kv_cap,
            chunk,
            x: f32s(chunk * c.hidden_size)?,
            a: stream.alloc_zeros::<u16>(chunk * widest).map_err(cuda_err("cuMemAlloc (prefill)"))?,
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

    /// Enqueues prompt positions `0..n` on `stream` (tokens already on the device at
    /// `tokens`, the KV cache at `kv`), writing their K/V rows into the cache. With
    /// `profile`, records an event pair around every op.
    pub fn enqueue(
        &self,
        stream: &Arc<CudaStream>,
        w: &PrefillWeights<'_>,
        kv: u64,
        tokens: u64,
        n: usize,
        mut profile: Option<&mut Vec<(PrefillOp, CudaEvent, CudaEvent)>>,
    ) -> Result<()> {
        if n > self.kv_cap {
            return Err(Error::Cuda(format!("prefill of {n} positions exceeds the {}-position KV cache", self.kv_cap)));
        }
        let c = &self.config;
        let (d, f, hd) = (c.hidden_size, c.intermediate_size, c.head_dim);
        let (qd, kvd) = (c.num_heads * hd, c.num_kv_heads * hd);
        let layer_kv_bytes = (2 * kvd * self.kv_cap * std::mem::size_of::<u16>()) as u64;
        let ptr = |s: &CudaSlice<f32>| s.device_ptr(stream).0;
        let (x, qkv, gu) = (ptr(&self.x), ptr(&self.qkv), ptr(&self.gu));
        let a = self.a.device_ptr(stream).0;
        let rows_cfg =
            |rows: usize| LaunchConfig { grid_dim: (rows as u32, 1, 1), block_dim: (PREFILL_ROW_THREADS, 1, 1), shared_mem_bytes: 0 };
        let mut timed = |op: PrefillOp, run: &mut dyn FnMut() -> Result<()>| -> Result<()> {
            let Some(events) = profile.as_deref_mut() else { return run() };
            let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
            let start = stream.record_event(flags).map_err(cuda_err("event"))?;
            run()?;
            let stop = stream.record_event(flags).map_err(cuda_err("event"))?;
            events.push((op, start, stop));
            Ok(())
        };
        let launch = |func: &CudaFunction, cfg: LaunchConfig, args: &[u64], what: &str| -> Result<()> {
            let mut b = stream.launch_builder(func);
            for v in args {
                b.arg(v);
            }
            // SAFETY: every pointer argument addresses a live buffer of the size the
            // kernel was compiled for (chunk rows ≤ self.chunk, positions < kv_cap).
            unsafe { b.launch(cfg) }.map(|_| ()).map_err(cuda_err(what))
        };
        let gemm = |wt: u64, input: u64, out: u64, rows: usize, n_out: usize, k: usize, beta: f32| -> Result<()> {
            // SAFETY: `wt` is an [n_out × k] bf16 weight, `input` the [rows × k] bf16
            // chunk buffer, `out` an f32 chunk buffer of ≥ rows × n_out (sized in `new`).
            unsafe { self.blas.gemm_bf16(wt, input, out, rows, n_out, k, beta) }
        };
        let qb = self.shape.queries_per_block as usize;
        let mma_qb = self.shape.mma_queries_per_block as usize;
        for c0 in (0..n).step_by(self.chunk) {
            let rows = self.chunk.min(n - c0);
            timed(PrefillOp::Rows, &mut || {
                let mut b = stream.launch_builder(&self.embed);
                let c0u = c0 as u32;
                b.arg(&tokens).arg(&w.embed).arg(&x).arg(&c0u);
                // SAFETY: tokens holds ≥ n ids < vocab (checked by the runtime); x has chunk × hidden floats.
                unsafe { b.launch(rows_cfg(rows)) }.map(|_| ()).map_err(cuda_err("prefill embed"))
            })?;
            for (l, lw) in w.layers.iter().enumerate() {
                let kc = kv + l as u64 * layer_kv_bytes;
                timed(PrefillOp::Rows, &mut || {
                    launch(&self.rmsnorm, rows_cfg(rows), &[x, lw[LayerSlot::AttnNorm.index()], a], "prefill rmsnorm")
                })?;
                timed(PrefillOp::Gemm, &mut || gemm(lw[LayerSlot::Wqkv.index()], a, qkv, rows, qd + 2 * kvd, d, 0.0))?;
                timed(PrefillOp::Rows, &mut || {
                    let mut b = stream.launch_builder(&self.qkv_rope);
                    let c0u = c0 as u32;
                    b.arg(&qkv).arg(&lw[LayerSlot::QkvBias.index()]).arg(&w.inv_freq).arg(&kc).arg(&c0u);
                    // SAFETY: qkv holds rows × (q + 2 kv) floats; positions c0..c0+rows < kv_cap.
                    unsafe { b.launch(rows_cfg(rows)) }.map(|_| ()).map_err(cuda_err("prefill qkv rope"))
                })?;
                timed(PrefillOp::Attention, &mut || {
                    let (func, per_block) = match (&self.attention_mma, self.use_mma) {
                        (Some(f), true) => (f, mma_qb),
                        _ => (&self.attention, qb),
                    };
                    let cfg = LaunchConfig {
                        grid_dim: (rows.div_ceil(per_block) as u32, c.num_heads as u32, 1),
                        block_dim: (PREFILL_ATTN_THREADS, 1, 1),
                        shared_mem_bytes: 0,
                    };
                    let mut b = stream.launch_builder(func);
                    let (c0u, nu) = (c0 as u32, rows as u32);
                    b.arg(&qkv).arg(&kc).arg(&a).arg(&c0u).arg(&nu);
                    // SAFETY: the cache holds positions 0..c0+rows of this layer (written above
                    // and by earlier chunks); `a` holds rows × q dims bf16.
                    unsafe { b.launch(cfg) }.map(|_| ()).map_err(cuda_err("prefill attention"))
                })?;
                timed(PrefillOp::Gemm, &mut || gemm(lw[LayerSlot::Wo.index()], a, x, rows, d, qd, 1.0))?;
                timed(PrefillOp::Rows, &mut || {
                    launch(&self.rmsnorm, rows_cfg(rows), &[x, lw[LayerSlot::FfnNorm.index()], a], "prefill rmsnorm")
                })?;
                timed(PrefillOp::Gemm, &mut || gemm(lw[LayerSlot::WgateUp.index()], a, gu, rows, 2 * f, d, 0.0))?;
                timed(PrefillOp::Rows, &mut || {
                    let total = (rows * f) as u32;
                    let cfg = LaunchConfig {
                        grid_dim: ((rows * f).div_ceil(PREFILL_ROW_THREADS as usize) as u32, 1, 1),
                        block_dim: (PREFILL_ROW_THREADS, 1, 1),
                        shared_mem_bytes: 0,
                    };
                    let mut b = stream.launch_builder(&self.swiglu);
                    b.arg(&gu).arg(&a).arg(&total);
                    // SAFETY: gu holds rows × 2·ffn floats, a rows × ffn bf16.
                    unsafe { b.launch(cfg) }.map(|_| ()).map_err(cuda_err("prefill swiglu"))
                })?;
                timed(PrefillOp::Gemm, &mut || gemm(lw[LayerSlot::Wdown.index()], a, x, rows, d, f, 1.0))?;
            }
        }
        Ok(())
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
