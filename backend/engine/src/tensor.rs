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

impl DType {
    /// The type for a ggml type id (`ggml_type` in ggml.h); `None` for types the loaders cannot read.
    pub fn from_ggml(id: u32) -> Option<DType> {
        Some(match id {
            0 => DType::F32,
            1 => DType::F16,
            2 => DType::Q4_0,
            3 => DType::Q4_1,
            8 => DType::Q8_0,
            12 => DType::Q4_K,
            14 => DType::Q6_K,
            30 => DType::BF16,
            _ => return None,
        })
    }

    /// Elements per block (1 for plain float types).
    pub fn block_size(self) -> usize {
        match self {
            DType::F32 | DType::F16 | DType::BF16 => 1,
            DType::Q8_0 | DType::Q4_0 | DType::Q4_1 => 32,
            DType::Q4_K | DType::Q6_K => 256,
        }
    }

    /// Bytes per block (ggml's `block_q*` struct sizes).
    pub fn block_bytes(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::Q8_0 => 34,
            DType::Q4_0 => 18,
            DType::Q4_1 => 20,
            DType::Q4_K => 144,
            DType::Q6_K => 210,
        }
    }

    /// Bytes needed for `numel` elements; `None` unless `numel` is a whole number of blocks.
    pub fn bytes_for(self, numel: usize) -> Option<usize> {
        if !numel.is_multiple_of(self.block_size()) {
            return None;
        }
        (numel / self.block_size()).checked_mul(self.block_bytes())
    }
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
    #[cfg(feature = "lab")]
    pub fn from_f32(name: impl Into<String>, shape: Vec<usize>, values: &[f32]) -> Tensor {
        let mut bytes = Vec::with_capacity(values.len() * 4);
        for v in values {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        Tensor { name: name.into(), dtype: DType::F32, shape, storage: Storage::Owned(Arc::new(bytes)) }
    }
}
