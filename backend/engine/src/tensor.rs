//! Weight tensors as stored on disk (possibly quantized), borrowed from a shared
//! memory map or owned. Shapes are outermost-first like PyTorch: a linear layer's
//! weight is `[out_features, in_features]`, row-major (GGUF's `ne` reversed).

use std::sync::Arc;

/// Element / block types the loaders accept (GGUF type ids in [`DType::from_ggml`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum DType {
    F32,
    F16,
    BF16,
    Q8_0,
    Q4_0,
    Q4_1,
    Q4_K,
    Q6_K,
}

/// Where a tensor's bytes live.
#[derive(Clone)]
pub enum Storage {
    /// A slice of a memory-mapped file, shared by every tensor of that file.
    Mapped { map: Arc<memmap2::Mmap>, offset: usize, len: usize },
    /// Bytes built in memory (synthetic models, converted tensors).
    Owned(Arc<Vec<u8>>),
}

/// One named tensor.
#[derive(Clone)]
pub struct Tensor {
    pub name: String,
    pub dtype: DType,
    /// Outermost first; a matrix is `[rows, cols]` and rows are contiguous.
    pub shape: Vec<usize>,
    pub storage: Storage,
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor({} {:?} {:?})", self.name, self.dtype, self.shape)
    }
}

impl Tensor {
    /// The raw bytes (quantized blocks for quantized types).
    pub fn bytes(&self) -> &[u8] {
        match &self.storage {
            Storage::Mapped { map, offset, len } => &map[*offset..*offset + *len],
            Storage::Owned(v) => v,
        }
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// An owned f32 tensor (used by synthetic models and tests).
    pub fn from_f32(name: impl Into<String>, shape: Vec<usize>, values: &[f32]) -> Tensor {
        let mut bytes = Vec::with_capacity(values.len() * 4);
        for v in values {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        Tensor { name: name.into(), dtype: DType::F32, shape, storage: Storage::Owned(Arc::new(bytes)) }
    }
}
