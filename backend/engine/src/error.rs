//! The engine's one error type; every fallible engine call returns [`Result`]. The CUDA
//! runtime's failures are typed ([`CudaError`]) with the library's error as the source.

/// Everything that can go wrong inside the engine, with a message a user can act on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O error on a named file.
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A model file whose bytes do not follow its format (bad magic, lengths past the end, ...).
    #[error("{path}: corrupt or truncated model file: {reason}")]
    CorruptModel { path: String, reason: String },
    /// A model family the runtimes do not implement.
    #[error("{path}: unknown architecture `{arch}` (supported: llama, qwen2)")]
    UnknownArchitecture { path: String, arch: String },
    /// A tensor stored in a type the loaders cannot read.
    #[error("{path}: tensor `{tensor}` has unsupported quant type {dtype}")]
    UnsupportedDType { path: String, tensor: String, dtype: String },
    /// A tensor the model needs is not in the file.
    #[error("{path}: missing tensor `{name}`")]
    MissingTensor { path: String, name: String },
    /// A tensor whose shape disagrees with the model config.
    #[error("{path}: shape mismatch for tensor `{tensor}`: expected {expected:?}, found {found:?}")]
    ShapeMismatch { path: String, tensor: String, expected: Vec<usize>, found: Vec<usize> },
    /// A required config value is absent or has the wrong type.
    #[error("{path}: bad model config: {reason}")]
    BadConfig { path: String, reason: String },
    /// A request the engine cannot serve as asked (bad parameter ranges, empty prompt...).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// A grammar or schema the constraint compiler rejects (the library's reason).
    #[error("{0}")]
    Grammar(String),
    /// A constrained run whose output can no longer satisfy its grammar.
    #[error("the output can no longer satisfy the request's grammar: {0}")]
    Unsatisfiable(String),
    /// Prompt plus requested tokens exceed the model's context.
    #[error("this model's context is {context} tokens, but the prompt has {prompt} tokens and max_tokens is {max_tokens}; shorten the prompt or lower max_tokens")]
    ContextOverflow { prompt: usize, max_tokens: usize, context: usize },
    /// The engine thread is gone or refused the request (shutting down, queue full).
    #[error("engine unavailable: {0}")]
    Unavailable(String),
    /// A GPU backend failure (driver, compilation, cuBLAS, out of memory, a kernel's run).
    #[error("cuda: {0}")]
    Cuda(#[from] CudaError),
    /// A tokenizer file or GGUF tokenizer metadata that cannot be turned into a tokenizer.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// A tokenizer kind the engine does not implement (e.g. SentencePiece in GGUF).
    #[error("unsupported tokenizer: {0}")]
    UnsupportedTokenizer(String),
    /// A token id past the end of the vocabulary.
    #[error("token id {id} is outside the vocabulary (size {vocab_size})")]
    TokenOutOfRange { id: u32, vocab_size: usize },
    /// A chat template that fails to compile or render.
    #[error("chat template: {0}")]
    Template(String),
    /// Tensor bytes that do not match the tensor's type and shape.
    #[error("tensor `{tensor}`: {reason}")]
    TensorData { tensor: String, reason: String },
}

/// What went wrong in the CUDA runtime. The library failures keep their cause as a typed
/// [`source`](std::error::Error::source), and each message says what was being done, so
/// one line names the step and the chain names the library's own code. The library
/// variants exist only with the `cuda` feature (without it nothing can produce them);
/// matches need a wildcard arm.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CudaError {
    /// A CUDA driver call failed while doing `context`. The message names the result
    /// code without asking the driver for its text, so it formats even where no driver
    /// is loaded; the source's own message has the driver's description.
    #[cfg(feature = "cuda")]
    #[error("{context}: {}", driver_code(.source))]
    Driver {
        context: String,
        #[source]
        source: cudarc::driver::DriverError,
    },
    /// An allocation or upload of `bytes` for `what` found the device out of memory;
    /// `free` and `total` are the device's memory (cuMemGetInfo) at that point.
    #[error("out of GPU memory allocating {what} ({bytes} bytes = {} MiB; {} MiB free of {} MiB){}", mib(*.bytes), mib(*.free), mib(*.total), OOM_HINT)]
    OutOfMemory { what: String, bytes: u64, free: u64, total: u64 },
    /// NVRTC failed to compile translation unit `unit`; `log` is the compiler's program log.
    #[cfg(feature = "cuda")]
    #[error("NVRTC failed to compile {unit}: {:?}\n{log}", .source.0)]
    Compile {
        unit: String,
        log: String,
        #[source]
        source: cudarc::nvrtc::result::NvrtcError,
    },
    /// Another NVRTC call failed while doing `context`.
    #[cfg(feature = "cuda")]
    #[error("{context}: {:?}", .source.0)]
    Nvrtc {
        context: String,
        #[source]
        source: cudarc::nvrtc::result::NvrtcError,
    },
    /// A cuBLAS call failed while doing `context`.
    #[cfg(feature = "cuda")]
    #[error("{context}: {:?}", .source.0)]
    Blas {
        context: String,
        #[source]
        source: cudarc::cublas::result::CublasError,
    },
    /// A CUDA library (driver, NVRTC, cuBLAS) is missing or cannot be loaded.
    #[error("{0}")]
    Library(String),
    /// No usable device: none present, an ordinal past the last, or one a hung kernel holds.
    #[error("{0}")]
    NoDevice(String),
    /// A model shape, kernel option or parallelism the runtime cannot run.
    #[error("{0}")]
    Unsupported(String),
    /// The decode kernel built for `threads` per block needs more shared memory per block
    /// than the device lets a block opt in to (fewer threads need less).
    #[error("the decode kernel at {threads} threads per block needs {needs} B of shared memory per block; the device offers {offers} B")]
    SharedMemory { threads: u32, needs: u32, offers: usize },
    /// A run of the kernels failed on the device: a fault, a stall, an unknown end, or a
    /// runtime left unusable by an earlier one.
    #[error("{0}")]
    Kernel(String),
    /// The host and the compiled kernel disagree (a constant, a buffer's size).
    #[error("{0}")]
    Mismatch(String),
    /// `source` (a [`CudaError`]) happened while doing `context` (e.g. loading the
    /// batched prefill). Boxed as `dyn Error` so the source is the inner error itself,
    /// which a `Box<CudaError>` field would not be.
    #[error("{context}: {source}")]
    Context {
        context: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// This build has no CUDA runtime.
    #[error("this build has no CUDA support (rebuild with the `cuda` feature, on by default)")]
    NotBuilt,
}

/// What follows an out-of-memory message: the knobs that shrink the allocation.
const OOM_HINT: &str = "; fewer --kv-positions, quantized --gpu-weights (auto, q8_0) or more GPUs (--tp) need less";

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1024.0 * 1024.0))
}

/// The driver's result code by name (`CUDA_ERROR_OUT_OF_MEMORY`): formatting the
/// `DriverError` itself asks the driver for its description, which needs libcuda.
#[cfg(feature = "cuda")]
fn driver_code(e: &cudarc::driver::DriverError) -> String {
    format!("{:?}", e.0)
}

impl CudaError {
    /// `source` wrapped with what was being done.
    pub fn context(context: impl Into<String>, source: CudaError) -> CudaError {
        CudaError::Context { context: context.into(), source: Box::new(source) }
    }

    /// Whether this is (or wraps) running out of device memory.
    pub fn is_out_of_memory(&self) -> bool {
        match self {
            CudaError::OutOfMemory { .. } => true,
            CudaError::Context { source, .. } => source.downcast_ref::<CudaError>().is_some_and(CudaError::is_out_of_memory),
            _ => false,
        }
    }
}

/// The engine's result alias.
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[test]
    fn out_of_memory_names_the_allocation_its_size_and_the_free_memory() {
        let e = Error::from(CudaError::OutOfMemory {
            what: "the KV cache (4096 positions)".into(),
            bytes: 3 << 30,
            free: 1 << 30,
            total: 80 << 30,
        });
        let text = e.to_string();
        assert!(text.starts_with("cuda: out of GPU memory allocating the KV cache (4096 positions)"), "{text}");
        assert!(text.contains("3221225472 bytes = 3072.0 MiB") && text.contains("1024.0 MiB free of 81920.0 MiB"), "{text}");
        assert!(text.contains("--kv-positions"), "says how to need less: {text}");
        let Error::Cuda(cuda) = &e else { panic!("a CUDA error") };
        assert!(cuda.is_out_of_memory());
        assert!(CudaError::context("batched prefill", CudaError::OutOfMemory { what: "x".into(), bytes: 1, free: 0, total: 0 })
            .is_out_of_memory());
        assert!(!CudaError::Kernel("stalled".into()).is_out_of_memory());
    }

    #[test]
    fn the_stub_error_says_how_to_get_cuda() {
        let text = Error::from(CudaError::NotBuilt).to_string();
        assert!(text.contains("no CUDA support") && text.contains("`cuda` feature"), "{text}");
    }

    #[test]
    fn wrapped_errors_keep_their_context_and_source() {
        let inner = CudaError::Unsupported("unsupported shape: head_dim 96".into());
        let e = Error::from(CudaError::context("compile the decode kernel", inner));
        assert_eq!(e.to_string(), "cuda: compile the decode kernel: unsupported shape: head_dim 96");
        let cuda = e.source().and_then(|s| s.downcast_ref::<CudaError>()).expect("the CudaError is the source");
        let inner = cuda.source().and_then(|s| s.downcast_ref::<CudaError>()).expect("the wrapped error is its source");
        assert!(matches!(inner, CudaError::Unsupported(_)));
    }

    #[cfg(feature = "cuda")]
    #[test]
    fn a_driver_error_is_the_typed_source_and_formats_without_a_driver() {
        use cudarc::driver::{sys::CUresult, DriverError};
        let e =
            Error::from(CudaError::Driver { context: "cuStreamCreate".into(), source: DriverError(CUresult::CUDA_ERROR_INVALID_VALUE) });
        // Only the code's name: the driver's own text needs libcuda, absent here.
        assert_eq!(e.to_string(), "cuda: cuStreamCreate: CUDA_ERROR_INVALID_VALUE");
        let cuda = e.source().and_then(|s| s.downcast_ref::<CudaError>()).expect("the CudaError is the source");
        let driver = cuda.source().and_then(|s| s.downcast_ref::<DriverError>()).expect("the DriverError is its source");
        assert_eq!(driver.0, CUresult::CUDA_ERROR_INVALID_VALUE);
    }

    #[cfg(feature = "cuda")]
    #[test]
    fn an_allocation_out_of_memory_becomes_the_out_of_memory_variant() {
        use cudarc::driver::{sys::CUresult, DriverError};
        let oom = crate::cuda::alloc_err("the KV cache", 1 << 20)(DriverError(CUresult::CUDA_ERROR_OUT_OF_MEMORY));
        match oom {
            Error::Cuda(CudaError::OutOfMemory { what, bytes, .. }) => assert_eq!((what.as_str(), bytes), ("the KV cache", 1 << 20)),
            other => panic!("not OutOfMemory: {other:?}"),
        }
        // Any other failure stays a driver error with its context.
        let other = crate::cuda::alloc_err("the KV cache", 1 << 20)(DriverError(CUresult::CUDA_ERROR_INVALID_VALUE));
        assert!(matches!(other, Error::Cuda(CudaError::Driver { ref context, .. }) if context == "the KV cache"), "{other:?}");
    }

    #[cfg(feature = "cuda")]
    #[test]
    fn a_failed_compile_carries_the_program_log() {
        use cudarc::nvrtc::{result::NvrtcError, sys::nvrtcResult};
        let e = Error::from(CudaError::Compile {
            unit: "decode.cu".into(),
            log: "decode.cu(12): error: identifier \"HIDDEN\" is undefined".into(),
            source: NvrtcError(nvrtcResult::NVRTC_ERROR_COMPILATION),
        });
        let text = e.to_string();
        assert!(text.starts_with("cuda: NVRTC failed to compile decode.cu: NVRTC_ERROR_COMPILATION\n"), "{text}");
        assert!(text.ends_with("identifier \"HIDDEN\" is undefined"), "{text}");
        let cuda = e.source().and_then(|s| s.downcast_ref::<CudaError>()).expect("the CudaError is the source");
        assert!(cuda.source().is_some_and(|s| s.is::<NvrtcError>()));
    }
}
