//! Tensor-parallel sharding and Delayed Tensor Parallelism (docs/dtp.md):
//! the config and its file forms, the per-layer schedule, the shard ranges, and a
//! float32 CPU reference that runs the lanes exactly as the GPU kernel must.

pub mod config;
pub mod reference;
pub mod shard;

#[cfg(test)]
mod tests;

pub use config::{Combine, DtpConfig, DtpSchedule, EarlyLayers, Lanes};
pub use shard::ShardPlan;
// The config.json block and one lane's shard, for the tests and the apparatus.
#[cfg(feature = "lab")]
pub use config::DtpBlock;
#[cfg(feature = "lab")]
pub use shard::LaneShard;

use std::path::Path;

use crate::error::{Error, Result};

/// The DTP config of a model on disk (a Hugging Face directory's `config.json` block
/// or a GGUF file's `peregrine.dtp.*` keys); `None` for an ordinary model.
pub fn read_model_dtp(path: &Path) -> Result<Option<DtpConfig>> {
    if path.is_dir() {
        let file = path.join("config.json");
        let text = std::fs::read_to_string(&file).map_err(|source| Error::Io { path: file.display().to_string(), source })?;
        let json: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| Error::BadConfig { path: file.display().to_string(), reason: format!("invalid config.json: {e}") })?;
        return DtpConfig::from_hf_json(&json);
    }
    let g = crate::gguf::GgufFile::open(path)?;
    // A key of the wrong type would otherwise read as absent and silently run the model as an ordinary one.
    let typed = |key: &str, ok: bool| match g.get(key) {
        Some(_) if !ok => Err(Error::BadConfig { path: path.display().to_string(), reason: format!("{key} has the wrong type") }),
        _ => Ok(()),
    };
    typed(config::GGUF_DELAY_KEY, g.get_u64(config::GGUF_DELAY_KEY).is_some())?;
    typed(config::GGUF_LANES_KEY, g.get_u64(config::GGUF_LANES_KEY).is_some())?;
    typed(config::GGUF_EARLY_KEY, g.get_str(config::GGUF_EARLY_KEY).is_some())?;
    DtpConfig::from_gguf_keys(|k| g.get_u64(k), |k| g.get_str(k).map(str::to_string))
}
