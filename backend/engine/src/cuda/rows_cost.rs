//! What an extra row of a step costs on a GPU (kernels/rows_cost.cu): one bf16 matrix
//! times 1, 2, … vectors in one pass over its weights, timed with events, each
//! vector's products checked against the bits of a single-vector pass. The figure the
//! several-tokens-per-pass design rests on: a memory-bound pass should take little
//! longer for 4–8 vectors than for one.

use std::sync::Arc;

use cudarc::driver::{sys, CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};

use super::{cuda_err, layout, nvrtc};
use crate::error::{CudaError, Error, Result};
use crate::lab::rng::SplitMix64;
use crate::options::CudaPaths;

/// The most vectors one pass takes (the kernel's accumulators stay in registers).
pub const MAX_VECTORS: usize = 8;
/// Shared memory the input vectors may take (below every data-center GPU's opt-in).
const MAX_INPUT_BYTES: usize = 200 * 1024;

/// The most vectors of `k` floats one pass takes (shared memory holds them all).
pub fn max_vectors_for(k: usize) -> usize {
    (MAX_INPUT_BYTES / (4 * k.max(1))).min(MAX_VECTORS)
}

/// One pass of `vectors` vectors: its median time, the weights' read rate, its time
/// over the single-vector pass's, and whether every vector got the single pass's bits.
#[derive(Debug, Clone)]
pub struct RowsCost {
    pub vectors: usize,
    pub us: f64,
    pub weight_gbs: f64,
    pub relative: f64,
    pub exact: bool,
}

/// The pass of a `rows × k` bf16 matrix (random weights) for 1..=`max_vectors` vectors on
/// GPU `ordinal`, one block per SM; the median of `repeats` timed launches after a warm-up.
pub fn rows_cost(ordinal: usize, paths: &CudaPaths, k: usize, rows: usize, max_vectors: usize, repeats: usize) -> Result<Vec<RowsCost>> {
    if k == 0 || !k.is_multiple_of(8) || rows < 2 || !(1..=MAX_VECTORS).contains(&max_vectors) || repeats == 0 {
        return Err(Error::InvalidRequest(format!(
            "rows cost needs k a multiple of 8, at least 2 rows, 1..={MAX_VECTORS} vectors and a repeat (got k {k}, {rows} rows, {max_vectors} vectors)"
        )));
    }
    if max_vectors > max_vectors_for(k) {
        return Err(Error::InvalidRequest(format!("{max_vectors} vectors of {k} floats exceed {MAX_INPUT_BYTES} bytes of shared memory")));
    }
    nvrtc::preload(&paths.nvrtc_dirs)?;
    let ctx = CudaContext::new(ordinal).map_err(cuda_err("cuCtxCreate"))?;
    let stream = ctx.new_stream().map_err(cuda_err("cuStreamCreate"))?;
    let (major, minor) = ctx.compute_capability().map_err(cuda_err("compute capability"))?;
    let arch = nvrtc::arch_for(major, minor);
    let sms = ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).map_err(cuda_err("SM count"))? as u32;
    let mut rng = SplitMix64(0x5EED_0F_2055);
    // bf16 weights of about ±0.05: the top half of the f32's bits.
    let weights: Vec<u16> = (0..rows * k).map(|_| ((rng.next_signed() * 0.05).to_bits() >> 16) as u16).collect();
    let inputs: Vec<f32> = (0..MAX_VECTORS * k).map(|_| rng.next_signed()).collect();
    let w = stream.clone_htod(&weights).map_err(cuda_err("upload weights"))?;
    let pass = |nv: usize, x: &[f32]| -> Result<(Vec<f32>, f64)> {
        let func = load(&ctx, &stream, paths, &arch, k, nv)?;
        let xd = stream.clone_htod(x).map_err(cuda_err("upload inputs"))?;
        let mut y = stream.alloc_zeros::<f32>(nv * rows).map_err(cuda_err("alloc"))?;
        let mut times = Vec::with_capacity(repeats);
        for i in 0..=repeats {
            let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
            let start = stream.record_event(flags).map_err(cuda_err("event"))?;
            launch(&stream, &func, sms, nv * k * 4, &w, rows, &xd, &mut y)?;
            let stop = stream.record_event(flags).map_err(cuda_err("event"))?;
            stop.synchronize().map_err(cuda_err("pg_rows_cost"))?;
            if i > 0 {
                times.push(start.elapsed_ms(&stop).map_err(cuda_err("event time"))? as f64 * 1e3);
            }
        }
        times.sort_by(f64::total_cmp);
        Ok((stream.clone_dtoh(&y).map_err(cuda_err("download"))?, times[times.len() / 2]))
    };
    // Each vector alone: the bits every pass must give it, and the one-vector time.
    let mut single = Vec::with_capacity(max_vectors);
    let mut single_us = Vec::with_capacity(max_vectors);
    for v in 0..max_vectors {
        let (y, us) = pass(1, &inputs[v * k..(v + 1) * k])?;
        single.push(y);
        single_us.push(us);
    }
    single_us.sort_by(f64::total_cmp);
    let one_us = single_us[single_us.len() / 2];
    let bytes = (rows * k * 2) as f64;
    let mut out = vec![RowsCost { vectors: 1, us: one_us, weight_gbs: bytes / (one_us * 1e3), relative: 1.0, exact: true }];
    for nv in 2..=max_vectors {
        let (y, us) = pass(nv, &inputs[..nv * k])?;
        let exact = (0..nv).all(|v| y[v * rows..(v + 1) * rows].iter().zip(&single[v]).all(|(a, b)| a.to_bits() == b.to_bits()));
        out.push(RowsCost { vectors: nv, us, weight_gbs: bytes / (us * 1e3), relative: us / one_us, exact });
    }
    Ok(out)
}

/// The pass for `nv` vectors of `k`, compiled (or read from the cubin cache) and loaded,
/// its shared-memory limit raised to what its inputs take.
fn load(ctx: &Arc<CudaContext>, stream: &Arc<CudaStream>, paths: &CudaPaths, arch: &str, k: usize, nv: usize) -> Result<CudaFunction> {
    let (cubin, _) = nvrtc::cubin_of(nvrtc::ROWS_SOURCE, paths.cubin_cache.as_deref(), arch, &layout::rows_cost_defines(k, nv))?;
    let module = ctx.load_module(cudarc::nvrtc::Ptx::from_binary(cubin)).map_err(cuda_err("cuModuleLoadData"))?;
    let func = module.load_function("pg_rows_cost").map_err(cuda_err("cuModuleGetFunction"))?;
    let view = module.get_global("pg_rows_smem_bytes", stream).map_err(cuda_err("cuModuleGetGlobal"))?;
    let bytes = stream.clone_dtoh(&view).map_err(cuda_err("read kernel constant"))?;
    let smem = bytes.get(..4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes);
    if smem != Some((nv * k * 4) as u32) {
        return Err(CudaError::Mismatch(format!("pg_rows_smem_bytes is {smem:?}, the host expects {}", nv * k * 4)).into());
    }
    func.set_attribute(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (nv * k * 4) as i32)
        .map_err(cuda_err("shared-memory limit"))?;
    Ok(func)
}

#[allow(clippy::too_many_arguments)]
fn launch(
    stream: &Arc<CudaStream>,
    func: &CudaFunction,
    blocks: u32,
    smem: usize,
    w: &CudaSlice<u16>,
    rows: usize,
    x: &CudaSlice<f32>,
    y: &mut CudaSlice<f32>,
) -> Result<()> {
    let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (512, 1, 1), shared_mem_bytes: smem as u32 };
    let n = rows as i32;
    let mut b = stream.launch_builder(func);
    b.arg(w).arg(&n).arg(x).arg(y);
    // SAFETY: the arguments match pg_rows_cost's parameters (w: rows × k bf16, x: nv × k
    // f32, y: nv × rows f32); the buffers outlive the launch (the caller synchronises).
    unsafe { b.launch(cfg) }.map(|_| ()).map_err(cuda_err("launch pg_rows_cost"))
}
