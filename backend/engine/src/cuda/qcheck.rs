//! The quantized matrix-vector product on the GPU alone (kernels/qcheck.cu): one
//! repacked matrix times one vector, for the GPU tests' float64 comparison per format.

use cudarc::driver::{LaunchConfig, PushKernelArg};

use super::quant::GpuFormat;
use super::{cuda_err, layout, nvrtc};
use crate::error::{CudaError, Error, Result};
use crate::options::CudaPaths;

/// y = W x on GPU `ordinal` for `rows` rows of `k` elements of `packed` in `fmt`
/// (the layout cuda/quant writes).
pub fn quant_matvec(
    ordinal: usize,
    paths: &CudaPaths,
    fmt: GpuFormat,
    k: usize,
    rows: usize,
    packed: &[u8],
    x: &[f32],
) -> Result<Vec<f32>> {
    let row_bytes = fmt.row_bytes(k).ok_or_else(|| Error::InvalidRequest(format!("{k} columns are not whole {} blocks", fmt.name())))?;
    if packed.len() != rows * row_bytes || x.len() != k || rows == 0 {
        return Err(Error::InvalidRequest(format!("{} bytes and {} inputs for {rows} rows of {k} {}", packed.len(), x.len(), fmt.name())));
    }
    nvrtc::preload(&paths.nvrtc_dirs)?;
    let ctx = cudarc::driver::CudaContext::new(ordinal).map_err(cuda_err("cuCtxCreate"))?;
    let stream = ctx.default_stream();
    let arch = {
        let (major, minor) = ctx.compute_capability().map_err(cuda_err("compute capability"))?;
        nvrtc::arch_for(major, minor)
    };
    let (cubin, _) = nvrtc::cubin_of(nvrtc::QCHECK_SOURCE, paths.cubin_cache.as_deref(), &arch, &layout::qcheck_defines(k))?;
    let module = ctx.load_module(cudarc::nvrtc::Ptx::from_binary(cubin)).map_err(cuda_err("cuModuleLoadData"))?;
    let func = module.load_function("pg_qcheck").map_err(cuda_err("cuModuleGetFunction"))?;
    let smem = {
        let view = module.get_global("pg_qcheck_smem_bytes", &stream).map_err(cuda_err("cuModuleGetGlobal"))?;
        let bytes = stream.clone_dtoh(&view).map_err(cuda_err("read kernel constant"))?;
        u32::from_le_bytes(
            bytes
                .get(..4)
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| CudaError::Mismatch("pg_qcheck_smem_bytes is not a u32".into()))?,
        )
    };
    func.set_attribute(cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem as i32)
        .map_err(cuda_err("shared-memory limit"))?;
    let w = stream.clone_htod(packed).map_err(cuda_err("upload"))?;
    let xd = stream.clone_htod(x).map_err(cuda_err("upload"))?;
    let mut y = stream.alloc_zeros::<f32>(rows).map_err(cuda_err("alloc"))?;
    let (tag, n) = (fmt.tag() as u32, rows as i32);
    let blocks = rows.div_ceil(16).min(132) as u32;
    let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: smem };
    let mut launch = stream.launch_builder(&func);
    launch.arg(&w).arg(&tag).arg(&n).arg(&xd).arg(&mut y);
    // SAFETY: the arguments match pg_qcheck's parameters; the buffers outlive the launch (synchronised below).
    unsafe { launch.launch(cfg) }.map_err(cuda_err("launch pg_qcheck"))?;
    stream.synchronize().map_err(cuda_err("pg_qcheck"))?;
    stream.clone_dtoh(&y).map_err(cuda_err("download"))
}
