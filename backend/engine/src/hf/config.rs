//! `config.json` of a Hugging Face Llama / Qwen2 checkpoint, mirrored as
//! transformers writes it (4.x `rope_theta` + `rope_scaling`, 5.x
//! `rope_parameters`), then normalised into a [`ModelConfig`].

use std::path::Path;

use serde::Deserialize;

use crate::config::{Architecture, LaneConfig, ModelConfig, RopeLayout, RopeScaling, SlidingWindow};
use crate::error::{Error, Result};

/// RoPE base when the config gives none (transformers' LlamaConfig/Qwen2Config default).
pub const DEFAULT_ROPE_THETA: f32 = 10_000.0;
/// RMSNorm epsilon when the config gives none (LlamaConfig's default).
pub const DEFAULT_RMS_NORM_EPS: f32 = 1e-6;

/// The fields of `config.json` the engine reads.
#[derive(Debug, Clone, Deserialize)]
pub struct HfConfig {
    #[serde(default)]
    pub architectures: Vec<String>,
    pub model_type: Option<String>,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: Option<usize>,
    pub head_dim: Option<usize>,
    pub max_position_embeddings: usize,
    pub rms_norm_eps: Option<f32>,
    pub rope_theta: Option<f32>,
    pub rope_scaling: Option<HfRopeParameters>,
    /// transformers ≥ 5 folds `rope_theta` and `rope_scaling` into this.
    pub rope_parameters: Option<HfRopeParameters>,
    pub tie_word_embeddings: Option<bool>,
    pub attention_bias: Option<bool>,
    pub mlp_bias: Option<bool>,
    pub hidden_act: Option<String>,
    pub use_sliding_window: Option<bool>,
}

/// `rope_scaling` / `rope_parameters`.
#[derive(Debug, Clone, Deserialize)]
pub struct HfRopeParameters {
    pub rope_type: Option<String>,
    /// Older name of `rope_type`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub rope_theta: Option<f32>,
    pub factor: Option<f32>,
    pub low_freq_factor: Option<f32>,
    pub high_freq_factor: Option<f32>,
    pub original_max_position_embeddings: Option<usize>,
}

impl HfConfig {
    /// Parses `path` (a `config.json`).
    pub fn read(path: &Path) -> Result<HfConfig> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io { path: path.display().to_string(), source })?;
        serde_json::from_str(&text).map_err(|e| bad(path, format!("invalid config.json: {e}")))
    }

    /// The normalised config; `name` is shown to users, `lm_head_present` decides
    /// tying when the file does not say. `path` names config.json in errors.
    pub fn to_model_config(&self, path: &Path, name: &str, lm_head_present: bool) -> Result<ModelConfig> {
        let architecture = self.architecture(path)?;
        if self.mlp_bias == Some(true) {
            return Err(bad(path, "mlp_bias is not supported".into()));
        }
        if self.use_sliding_window == Some(true) {
            return Err(bad(path, "sliding-window attention is not supported".into()));
        }
        if let Some(act) = self.hidden_act.as_deref().filter(|a| *a != "silu") {
            return Err(bad(path, format!("hidden_act `{act}` is not supported (only silu)")));
        }
        let rope = self.rope_parameters.as_ref().or(self.rope_scaling.as_ref());
        let head_dim = match self.head_dim {
            Some(h) => h,
            None if self.num_attention_heads > 0 && self.hidden_size.is_multiple_of(self.num_attention_heads) => {
                self.hidden_size / self.num_attention_heads
            }
            None => return Err(bad(path, "hidden_size is not divisible by num_attention_heads".into())),
        };
        let config = ModelConfig {
            name: name.to_string(),
            architecture,
            vocab_size: self.vocab_size,
            hidden_size: self.hidden_size,
            intermediate_size: self.intermediate_size,
            num_layers: self.num_hidden_layers,
            num_heads: self.num_attention_heads,
            num_kv_heads: self.num_key_value_heads.unwrap_or(self.num_attention_heads),
            head_dim,
            max_context: self.max_position_embeddings,
            rms_norm_eps: self.rms_norm_eps.unwrap_or(DEFAULT_RMS_NORM_EPS),
            rope_theta: self.rope_theta.or(rope.and_then(|r| r.rope_theta)).unwrap_or(DEFAULT_ROPE_THETA),
            rope_scaling: rope_scaling(path, rope)?,
            rope_layout: RopeLayout::HalfSplit,
            attention_bias: match architecture {
                Architecture::Qwen2 => true,
                Architecture::Llama => self.attention_bias.unwrap_or(false),
            },
            tie_embeddings: self.tie_word_embeddings.unwrap_or(!lm_head_present),
            sliding_window: SlidingWindow::default(),
            lanes: LaneConfig::default(),
        };
        config.validate().map_err(|reason| bad(path, reason))?;
        Ok(config)
    }

    fn architecture(&self, path: &Path) -> Result<Architecture> {
        let by_class = self.architectures.iter().find_map(|a| match a.as_str() {
            "LlamaForCausalLM" => Some(Architecture::Llama),
            "Qwen2ForCausalLM" => Some(Architecture::Qwen2),
            _ => None,
        });
        let by_type = || match self.model_type.as_deref() {
            Some("llama") => Some(Architecture::Llama),
            Some("qwen2") => Some(Architecture::Qwen2),
            _ => None,
        };
        by_class.or_else(by_type).ok_or_else(|| {
            let mut named = self.architectures.clone();
            named.extend(self.model_type.clone());
            let arch = if named.is_empty() { "(none given)".to_string() } else { named.join(", ") };
            Error::UnknownArchitecture { path: path.display().to_string(), arch }
        })
    }
}

fn rope_scaling(path: &Path, rope: Option<&HfRopeParameters>) -> Result<RopeScaling> {
    let Some(r) = rope else { return Ok(RopeScaling::None) };
    match r.rope_type.as_deref().or(r.kind.as_deref()) {
        None | Some("default") => Ok(RopeScaling::None),
        Some("llama3") => {
            let need = |v: Option<f32>, key: &str| v.ok_or_else(|| bad(path, format!("llama3 rope scaling lacks `{key}`")));
            Ok(RopeScaling::Llama3 {
                factor: need(r.factor, "factor")?,
                low_freq_factor: need(r.low_freq_factor, "low_freq_factor")?,
                high_freq_factor: need(r.high_freq_factor, "high_freq_factor")?,
                original_max_position: r
                    .original_max_position_embeddings
                    .ok_or_else(|| bad(path, "llama3 rope scaling lacks `original_max_position_embeddings`".into()))?,
            })
        }
        Some(other) => Err(bad(path, format!("rope scaling type `{other}` is not supported"))),
    }
}

fn bad(path: &Path, reason: String) -> Error {
    Error::BadConfig { path: path.display().to_string(), reason }
}
