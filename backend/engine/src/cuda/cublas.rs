//! cuBLAS for the batched prefill's GEMMs (bf16 × bf16 → f32 on the tensor cores),
//! loaded at run time like NVRTC (nvrtc.rs): cudarc looks libraries up by soname only,
//! so libcublasLt then libcublas are preloaded by absolute path from the CUDA toolkit or
//! from PyTorch's `nvidia` wheels, and a missing library is a clear error.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use cudarc::cublas::{sys, CudaBlas};
use cudarc::driver::CudaStream;

use crate::cuda::nvrtc::find_lib;
use crate::error::{CudaError, Result};

/// Loads libcublasLt then libcublas by absolute path from the first of `dirs` that
/// holds both, process-wide. Idempotent: the first call's search decides for the
/// process. Returns the folder they came from.
pub fn preload(dirs: &[PathBuf]) -> Result<PathBuf> {
    static LOADED: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    let loaded = LOADED.get_or_init(|| {
        for dir in dirs {
            let (Some(lt), Some(blas)) = (find_lib(dir, "libcublasLt.so"), find_lib(dir, "libcublas.so")) else {
                continue;
            };
            for lib in [&lt, &blas] {
                let flags = libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL;
                // SAFETY: loading NVIDIA's cuBLAS libraries runs only their ELF initialisers,
                // which have no preconditions; the handle is leaked so they stay loaded.
                match unsafe { libloading::os::unix::Library::open(Some(lib), flags) } {
                    Ok(handle) => std::mem::forget(handle),
                    Err(e) => return Err(format!("cannot load {}: {e}", lib.display())),
                }
            }
            return Ok(dir.clone());
        }
        // SAFETY: cudarc only probes for the library by name here.
        if unsafe { sys::is_culib_present() } {
            return Ok(PathBuf::from("<ld.so search path>"));
        }
        Err(format!("libcublas not found (searched {dirs:?}; pass --cublas-dir, or --prefill tokens to run prompts without cuBLAS)"))
    });
    loaded.clone().map_err(|e| CudaError::Library(e).into())
}

/// A cuBLAS handle bound to the runtime's stream.
pub struct Blas {
    blas: CudaBlas,
}

impl Blas {
    /// Creates a handle on `stream` (cuBLAS loaded by [`preload`]).
    pub fn new(stream: Arc<CudaStream>) -> Result<Blas> {
        let blas = CudaBlas::new(stream).map_err(|source| CudaError::Blas { context: "cublasCreate".into(), source })?;
        Ok(Blas { blas })
    }

    /// `c[rows × n] = beta · c + a[rows × k] · w[n × k]ᵀ`, all row-major device
    /// pointers: `w` and `a` bf16, `c` f32; f32 accumulation on the tensor cores.
    /// (Column-major cuBLAS sees cᵀ = wᵀᵀ·aᵀ: a "TN" GEMM with m = n, n = rows.)
    ///
    /// # Safety
    /// The pointers must address live device buffers of at least the sizes above.
    #[allow(clippy::too_many_arguments)] // cuBLAS's own argument list, named
    pub unsafe fn gemm_bf16(&self, w: u64, a: u64, c: u64, rows: usize, n: usize, k: usize, beta: f32) -> Result<()> {
        let dim = |v: usize| i32::try_from(v).map_err(|_| CudaError::Unsupported(format!("GEMM dimension {v} exceeds i32")));
        let (m, nn, kk) = (dim(n)?, dim(rows)?, dim(k)?);
        let alpha = 1.0f32;
        // SAFETY: the caller guarantees the buffers; alpha and beta are host f32 (the
        // handle's default pointer mode) matching CUBLAS_COMPUTE_32F.
        unsafe {
            cudarc::cublas::result::gemm_ex(
                *self.blas.handle(),
                sys::cublasOperation_t::CUBLAS_OP_T,
                sys::cublasOperation_t::CUBLAS_OP_N,
                m,
                nn,
                kk,
                (&alpha as *const f32).cast(),
                w as *const std::ffi::c_void,
                sys::cudaDataType_t::CUDA_R_16BF,
                kk,
                a as *const std::ffi::c_void,
                sys::cudaDataType_t::CUDA_R_16BF,
                kk,
                (&beta as *const f32).cast(),
                c as *mut std::ffi::c_void,
                sys::cudaDataType_t::CUDA_R_32F,
                m,
                sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|source| CudaError::Blas { context: format!("cublasGemmEx ({rows}×{k} · {n}×{k}ᵀ)"), source }.into())
    }
}
