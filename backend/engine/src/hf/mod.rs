//! Hugging Face model directories: `config.json` plus safetensors weights
//! (names as in transformers' `LlamaForCausalLM` / `Qwen2ForCausalLM`).

mod config;
mod shards;

use std::path::Path;

pub use config::HfConfig;
// The constants and file names the tests and the apparatus write checkpoints with.
#[cfg(feature = "lab")]
pub use config::{HfRopeParameters, DEFAULT_RMS_NORM_EPS, DEFAULT_ROPE_THETA};
pub use shards::SafetensorsDir;
#[cfg(feature = "lab")]
pub use shards::{INDEX_FILE, SINGLE_FILE};

use crate::config::ModelConfig;
use crate::error::Result;
use crate::weights::{LayerRole, WeightRole, Weights};

/// The transformers parameter name of `role`.
pub fn tensor_name(role: WeightRole) -> String {
    match role {
        WeightRole::Embed => "model.embed_tokens.weight".into(),
        WeightRole::FinalNorm => "model.norm.weight".into(),
        WeightRole::LmHead => "lm_head.weight".into(),
        WeightRole::Layer(i, r) => format!("model.layers.{i}.{}", layer_suffix(r)),
    }
}

fn layer_suffix(role: LayerRole) -> &'static str {
    match role {
        LayerRole::AttnNorm => "input_layernorm.weight",
        LayerRole::Q => "self_attn.q_proj.weight",
        LayerRole::K => "self_attn.k_proj.weight",
        LayerRole::V => "self_attn.v_proj.weight",
        LayerRole::QBias => "self_attn.q_proj.bias",
        LayerRole::KBias => "self_attn.k_proj.bias",
        LayerRole::VBias => "self_attn.v_proj.bias",
        LayerRole::O => "self_attn.o_proj.weight",
        LayerRole::FfnNorm => "post_attention_layernorm.weight",
        LayerRole::Gate => "mlp.gate_proj.weight",
        LayerRole::Up => "mlp.up_proj.weight",
        LayerRole::Down => "mlp.down_proj.weight",
    }
}

/// Reads `dir/config.json` and maps the safetensors weights, checking every shape
/// (a Laneformer checkpoint through [`crate::laneformer`]).
pub fn load_hf_dir(dir: &Path) -> Result<(ModelConfig, Weights)> {
    let config_path = dir.join("config.json");
    if read_json(&config_path).is_ok_and(|json| crate::laneformer::is_laneformer(&json)) {
        return crate::laneformer::load_dir(dir);
    }
    let hf = HfConfig::read(&config_path)?;
    let tensors = SafetensorsDir::open(dir)?;
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| dir.display().to_string());
    let config = hf.to_model_config(&config_path, &name, tensors.contains(&tensor_name(WeightRole::LmHead)))?;
    let weights = Weights::assemble(&config, &dir.display().to_string(), |role| tensors.tensor(&tensor_name(role)), |_, _| {})?;
    Ok((config, weights))
}

/// `config.json` as plain JSON (errors are reported by the typed read that follows).
fn read_json(path: &Path) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(path).map_err(|source| crate::error::Error::Io { path: path.display().to_string(), source })?;
    serde_json::from_str(&text).map_err(|e| crate::error::Error::BadConfig { path: path.display().to_string(), reason: e.to_string() })
}
