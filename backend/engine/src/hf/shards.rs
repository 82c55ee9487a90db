//! Memory-mapped safetensors weights: one `model.safetensors`, or the shards
//! listed in `model.safetensors.index.json` (transformers' sharded layout).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;
use safetensors::tensor::{Dtype, Metadata};
use safetensors::SafeTensors;
use serde::Deserialize;

use crate::error::{Error, Result};
use crate::tensor::{DType, Storage, Tensor};

/// Single-file weights name.
pub const SINGLE_FILE: &str = "model.safetensors";
/// Shard index name.
pub const INDEX_FILE: &str = "model.safetensors.index.json";
/// Bytes of the little-endian header length that starts every safetensors file.
const HEADER_LEN_BYTES: usize = 8;

struct Shard {
    path: PathBuf,
    map: Arc<Mmap>,
    /// Absolute offset where tensor data starts (after the JSON header).
    data_start: usize,
    meta: Metadata,
}

/// All tensors of a model directory, by name.
pub struct SafetensorsDir {
    dir: PathBuf,
    shards: Vec<Shard>,
    index: HashMap<String, usize>,
}

#[derive(Deserialize)]
struct ShardIndex {
    weight_map: BTreeMap<String, String>,
}

impl SafetensorsDir {
    /// Maps `dir/model.safetensors` or every shard named by `dir/model.safetensors.index.json`.
    pub fn open(dir: &Path) -> Result<SafetensorsDir> {
        let index_path = dir.join(INDEX_FILE);
        if !index_path.exists() {
            let shard = open_shard(&dir.join(SINGLE_FILE))?;
            let index = shard.meta.tensors().into_keys().map(|k| (k, 0)).collect();
            return Ok(SafetensorsDir { dir: dir.to_path_buf(), shards: vec![shard], index });
        }
        let io = |source| Error::Io { path: index_path.display().to_string(), source };
        let text = std::fs::read_to_string(&index_path).map_err(io)?;
        let parsed: ShardIndex = serde_json::from_str(&text)
            .map_err(|e| Error::CorruptModel { path: index_path.display().to_string(), reason: e.to_string() })?;
        let mut shards = Vec::new();
        let mut by_file: HashMap<&str, usize> = HashMap::new();
        let mut index = HashMap::new();
        for (tensor, file) in &parsed.weight_map {
            if Path::new(file).file_name() != Some(std::ffi::OsStr::new(file)) {
                let reason = format!("shard `{file}` is not a plain file name");
                return Err(Error::CorruptModel { path: index_path.display().to_string(), reason });
            }
            let i = match by_file.get(file.as_str()) {
                Some(&i) => i,
                None => {
                    shards.push(open_shard(&dir.join(file))?);
                    by_file.insert(file, shards.len() - 1);
                    shards.len() - 1
                }
            };
            index.insert(tensor.clone(), i);
        }
        Ok(SafetensorsDir { dir: dir.to_path_buf(), shards, index })
    }

    /// Whether a tensor of this name exists.
    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// A tensor borrowing its shard's map; F32, F16 and BF16 only.
    pub fn tensor(&self, name: &str) -> Result<Tensor> {
        let missing = |path: &Path| Error::MissingTensor { path: path.display().to_string(), name: name.to_string() };
        let Some(&i) = self.index.get(name) else { return Err(missing(&self.dir)) };
        let shard = &self.shards[i];
        let info = shard.meta.info(name).ok_or_else(|| missing(&shard.path))?;
        let dtype = match info.dtype {
            Dtype::F32 => DType::F32,
            Dtype::F16 => DType::F16,
            Dtype::BF16 => DType::BF16,
            other => {
                let (path, tensor) = (shard.path.display().to_string(), name.to_string());
                return Err(Error::UnsupportedDType { path, tensor, dtype: format!("{other:?}") });
            }
        };
        let (start, end) = info.data_offsets;
        Ok(Tensor {
            name: name.to_string(),
            dtype,
            shape: info.shape.clone(),
            storage: Storage::Mapped { map: shard.map.clone(), offset: shard.data_start + start, len: end - start },
        })
    }
}

fn open_shard(path: &Path) -> Result<Shard> {
    let io = |source| Error::Io { path: path.display().to_string(), source };
    let file = std::fs::File::open(path).map_err(io)?;
    // SAFETY: read-only private map; as with every mmap loader we rely on the
    // checkpoint not being truncated or rewritten while the model is loaded.
    let map = unsafe { Mmap::map(&file) }.map_err(io)?;
    // read_metadata checks that every tensor's byte range lies inside the buffer.
    let (header_len, meta) = SafeTensors::read_metadata(&map)
        .map_err(|e| Error::CorruptModel { path: path.display().to_string(), reason: format!("safetensors: {e}") })?;
    Ok(Shard { path: path.to_path_buf(), map: Arc::new(map), data_start: HEADER_LEN_BYTES + header_len, meta })
}
