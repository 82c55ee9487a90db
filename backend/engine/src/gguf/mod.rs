//! GGUF v3 (and v2) reader: header, metadata and tensor index over one shared
//! memory map. Follows the layout in ggml's `gguf.cpp`/`docs/gguf.md`; every
//! length and offset is checked against the file size before use.

mod hparams;
mod loader;
mod meta;
pub mod quant;
// Q8_0 at load (`--gpu-weights q8_0`): the CUDA runtime's, and the tests'.
#[cfg(any(feature = "cuda", feature = "lab"))]
pub mod quantize;
mod reader;
mod rope_freqs;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;

use crate::error::{Error, Result};
use crate::tensor::{DType, Storage, Tensor};
// Hyperparameter parsing, tensor names and RoPE factors, for the tests and the
// apparatus that write GGUF files.
#[cfg(feature = "lab")]
pub use hparams::{model_config, GgufHparams, DEFAULT_ROPE_FREQ_BASE};
pub use loader::load_gguf;
#[cfg(feature = "lab")]
pub use loader::tensor_name;
pub use meta::MetaValue;
use reader::Cursor;
#[cfg(feature = "lab")]
pub use rope_freqs::{llama3_factors, llama3_from_factors};

/// `"GGUF"` read as a little-endian u32.
pub const GGUF_MAGIC: u32 = 0x4655_4747;
/// Tensor data alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Most dimensions a ggml tensor can have (`GGML_MAX_DIMS`).
pub const MAX_DIMS: usize = 4;
/// Smallest possible header: magic, version, two u64 counts.
const HEADER_BYTES: usize = 4 + 4 + 8 + 8;
/// Smallest metadata entry: empty key (8), type (4), one-byte value.
const MIN_KV_BYTES: usize = 8 + 4 + 1;
/// Smallest tensor info: empty name (8), n_dims (4), type (4), offset (8).
const MIN_TENSOR_INFO_BYTES: usize = 8 + 4 + 4 + 8;

/// One entry of the tensor index.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// ggml type id; may be one this crate cannot read (checked when the tensor is used).
    pub dtype_id: u32,
    /// Outermost first (GGUF's `ne` reversed).
    pub shape: Vec<usize>,
    /// Absolute byte offset of the tensor data in the file.
    pub offset: u64,
}

/// An opened GGUF file: parsed metadata plus the mapped tensor data.
#[derive(Clone)]
pub struct GgufFile {
    pub path: PathBuf,
    pub metadata: BTreeMap<String, MetaValue>,
    pub tensors: Vec<TensorInfo>,
    map: Arc<Mmap>,
    index: HashMap<String, usize>,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GgufFile({}, {} keys, {} tensors)", self.path.display(), self.metadata.len(), self.tensors.len())
    }
}

impl GgufFile {
    /// Maps and parses `path`; the tensor data stays on disk until read.
    pub fn open(path: &Path) -> Result<GgufFile> {
        let io = |source| Error::Io { path: path.display().to_string(), source };
        let file = std::fs::File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        if len < HEADER_BYTES as u64 {
            return Err(corrupt(path, format!("file is {len} bytes, too short for a GGUF header")));
        }
        // SAFETY: the map is read-only and private to this process; like every
        // mmap-based loader we rely on the model file not being truncated or
        // rewritten while it is open (a modified file is a user error, not UB we can prevent).
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let (metadata, tensors) = parse(&map).map_err(|reason| corrupt(path, reason))?;
        let index = tensors.iter().enumerate().map(|(i, t)| (t.name.clone(), i)).collect();
        Ok(GgufFile { path: path.to_path_buf(), metadata, tensors, map: Arc::new(map), index })
    }

    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.metadata.get(key)
    }

    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key)?.as_str()
    }

    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.get(key)?.as_u64()
    }

    pub fn get_f32(&self, key: &str) -> Option<f32> {
        self.get(key)?.as_f32()
    }

    /// The index entry for `name`, if present.
    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.index.get(name).map(|&i| &self.tensors[i])
    }

    /// A tensor borrowing the shared map; errors on missing names or unsupported types.
    pub fn tensor(&self, name: &str) -> Result<Tensor> {
        let path = self.path.display().to_string();
        let info = self.tensor_info(name).ok_or_else(|| Error::MissingTensor { path: path.clone(), name: name.to_string() })?;
        let dtype = DType::from_ggml(info.dtype_id).ok_or_else(|| Error::UnsupportedDType {
            path: path.clone(),
            tensor: name.to_string(),
            dtype: format!("ggml type id {}", info.dtype_id),
        })?;
        let len = data_len(dtype, &info.shape)
            .ok_or_else(|| corrupt(&self.path, format!("tensor `{name}` shape {:?} does not fit {dtype:?} blocks", info.shape)))?;
        let offset = info.offset as usize;
        if offset.checked_add(len).is_none_or(|end| end > self.map.len()) {
            return Err(corrupt(&self.path, format!("tensor `{name}` data runs past the end of the file")));
        }
        Ok(Tensor {
            name: name.to_string(),
            dtype,
            shape: info.shape.clone(),
            storage: Storage::Mapped { map: self.map.clone(), offset, len },
        })
    }
}

fn corrupt(path: &Path, reason: String) -> Error {
    Error::CorruptModel { path: path.display().to_string(), reason }
}

/// Bytes of a tensor of `dtype` and `shape`; rows must hold whole blocks (as ggml requires).
fn data_len(dtype: DType, shape: &[usize]) -> Option<usize> {
    let row = *shape.last()?;
    if row % dtype.block_size() != 0 {
        return None;
    }
    let numel = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))?;
    dtype.bytes_for(numel)
}

type Parsed = (BTreeMap<String, MetaValue>, Vec<TensorInfo>);

fn parse(buf: &[u8]) -> std::result::Result<Parsed, String> {
    let mut c = Cursor::new(buf);
    let magic = c.u32("magic")?;
    if magic != GGUF_MAGIC {
        return Err(format!("bad magic {magic:#010x}, not a GGUF file"));
    }
    let version = c.u32("version")?;
    if !(2..=3).contains(&version) {
        return Err(format!("GGUF version {version} is not supported (only 2 and 3)"));
    }
    let n_tensors = c.u64("tensor count")?;
    let n_kv = c.count(MIN_KV_BYTES, "metadata count")?;
    let mut metadata = BTreeMap::new();
    for i in 0..n_kv {
        let key = c.string(&format!("metadata key #{i}"))?;
        let ty = c.u32(&format!("type of `{key}`"))?;
        let value = c.value(ty, 0, &format!("value of `{key}`"))?;
        if metadata.insert(key.clone(), value).is_some() {
            return Err(format!("duplicate metadata key `{key}`"));
        }
    }
    if n_tensors > (c.remaining() / MIN_TENSOR_INFO_BYTES) as u64 {
        return Err(format!("tensor count {n_tensors} is more than the file can hold"));
    }
    let mut infos = Vec::with_capacity(n_tensors as usize);
    for i in 0..n_tensors {
        infos.push(tensor_info(&mut c, i)?);
    }
    let alignment = match metadata.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(v) => match v.as_u64() {
            Some(a) if a > 0 && a.is_power_of_two() => a,
            _ => return Err(format!("general.alignment {v:?} is not a power of two")),
        },
    };
    let data_start = (c.pos() as u64).div_ceil(alignment) * alignment;
    let mut seen = std::collections::HashSet::new();
    let infos = infos
        .into_iter()
        .map(|(mut info, rel)| {
            if !seen.insert(info.name.clone()) {
                return Err(format!("duplicate tensor name `{}`", info.name));
            }
            if rel % alignment != 0 {
                return Err(format!("tensor `{}` offset {rel} is not a multiple of the alignment {alignment}", info.name));
            }
            info.offset = data_start.checked_add(rel).ok_or_else(|| format!("tensor `{}` offset overflows", info.name))?;
            if let Some(dtype) = DType::from_ggml(info.dtype_id) {
                let len = data_len(dtype, &info.shape)
                    .ok_or_else(|| format!("tensor `{}` shape {:?} does not fit {dtype:?} blocks", info.name, info.shape))?;
                if info.offset.checked_add(len as u64).is_none_or(|end| end > buf.len() as u64) {
                    return Err(format!("tensor `{}` data runs past the end of the file", info.name));
                }
            }
            Ok(info)
        })
        .collect::<std::result::Result<Vec<_>, String>>()?;
    Ok((metadata, infos))
}

/// One tensor index entry with its offset still relative to the data section.
fn tensor_info(c: &mut Cursor<'_>, i: u64) -> std::result::Result<(TensorInfo, u64), String> {
    let name = c.string(&format!("name of tensor #{i}"))?;
    let n_dims = c.u32(&format!("n_dims of `{name}`"))? as usize;
    if n_dims == 0 || n_dims > MAX_DIMS {
        return Err(format!("tensor `{name}` has {n_dims} dimensions (1..={MAX_DIMS} allowed)"));
    }
    let mut shape = Vec::with_capacity(n_dims);
    for _ in 0..n_dims {
        let d = c.u64(&format!("shape of `{name}`"))?;
        shape.push(usize::try_from(d).map_err(|_| format!("tensor `{name}` dimension {d} is too large"))?);
    }
    shape.reverse();
    if shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d)).is_none() {
        return Err(format!("tensor `{name}` element count overflows"));
    }
    let dtype_id = c.u32(&format!("type of `{name}`"))?;
    let rel = c.u64(&format!("offset of `{name}`"))?;
    Ok((TensorInfo { name, dtype_id, shape, offset: 0 }, rel))
}
