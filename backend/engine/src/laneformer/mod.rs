//! Kog's Laneformer checkpoints (`model_type: "laneformer_tp"`, Hugging Face layout):
//! `config.json` normalised into a [`ModelConfig`] with its lanes
//! ([`crate::config::LaneConfig`]) and windowed layers, and the lane-stacked safetensors
//! (`[L, out/L, in]`, `[L, out, in/L]`) laid out as the ordinary `[out, in]` matrices
//! every runtime reads, lane `l`'s rows and columns at `l·size/L`. docs/dtp.md describes
//! the architecture.

mod checkpoint;
mod config;

pub use config::{LaneformerJson, MODEL_TYPE};

use std::path::Path;

use crate::config::ModelConfig;
use crate::error::Result;
use crate::hf::SafetensorsDir;
use crate::weights::Weights;

/// Whether a parsed `config.json` describes a Laneformer.
pub fn is_laneformer(config_json: &serde_json::Value) -> bool {
    let class = |v: &serde_json::Value| v.as_str().is_some_and(|s| s.starts_with("LaneformerTP"));
    config_json.get("model_type").and_then(|v| v.as_str()) == Some(MODEL_TYPE)
        || config_json.get("architectures").and_then(|a| a.as_array()).is_some_and(|a| a.iter().any(class))
}

/// Reads a Laneformer directory's `config.json` and maps its weights, checking every shape.
pub fn load_dir(dir: &Path) -> Result<(ModelConfig, Weights)> {
    let config_path = dir.join("config.json");
    let json = LaneformerJson::read(&config_path)?;
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| dir.display().to_string());
    let config = json.to_model_config(&config_path, &name)?;
    let tensors = SafetensorsDir::open(dir)?;
    let weights = checkpoint::assemble(&config, &tensors, &dir.display().to_string())?;
    Ok((config, weights))
}
