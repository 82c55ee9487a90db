//! `config.json` of a Laneformer checkpoint, mirrored as the published
//! `LaneformerTPConfig` writes it (its defaults where a key is absent), then
//! normalised into a [`ModelConfig`].

use std::path::Path;

use serde::Deserialize;

use crate::config::{Architecture, LaneConfig, LaneHead, ModelConfig, RopeLayout, RopeScaling, SlidingWindow};
use crate::error::{Error, Result};

/// `model_type` of a Laneformer checkpoint.
pub const MODEL_TYPE: &str = "laneformer_tp";

/// The fields of a Laneformer `config.json`; `Option`s are the keys the published config
/// class gives defaults for.
#[derive(Debug, Clone, Deserialize)]
pub struct LaneformerJson {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: Option<usize>,
    pub max_position_embeddings: Option<usize>,
    pub rope_theta: Option<f32>,
    pub norm_eps: Option<f32>,
    pub num_lanes: Option<usize>,
    pub broadcast_delay: Option<usize>,
    pub use_comm: Option<bool>,
    pub use_early_comm: Option<bool>,
    pub lm_head_type: Option<String>,
    pub pre_norm_lane_agg: Option<bool>,
    pub replicated_rmsn_scale: Option<bool>,
    pub tie_word_embeddings: Option<bool>,
    pub sliding_window: Option<usize>,
    pub sliding_window_n_layers: Option<i64>,
    /// Layers that always attend to every position, window or not.
    #[serde(default)]
    pub unclamped_layers: Vec<usize>,
    /// Not part of the architecture; refused when present (see `to_model_config`).
    pub rope_scaling: Option<serde_json::Value>,
}

/// `LaneformerTPConfig`'s defaults.
const DEFAULT_MAX_POSITIONS: usize = 131_072;
const DEFAULT_ROPE_THETA: f32 = 10_000.0;
const DEFAULT_NORM_EPS: f32 = 1e-5;
const DEFAULT_DELAY: usize = 1;

impl LaneformerJson {
    /// Parses `path` (a `config.json`).
    pub fn read(path: &Path) -> Result<LaneformerJson> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io { path: path.display().to_string(), source })?;
        serde_json::from_str(&text).map_err(|e| bad(path, format!("invalid Laneformer config.json: {e}")))
    }

    /// The normalised config; every inconsistency is an error naming the field.
    pub fn to_model_config(&self, path: &Path, name: &str) -> Result<ModelConfig> {
        if self.rope_scaling.as_ref().is_some_and(|v| !v.is_null()) {
            return Err(bad(path, "rope_scaling is not part of the Laneformer architecture".into()));
        }
        let (d, heads) = (self.hidden_size, self.num_attention_heads);
        if heads == 0 || !d.is_multiple_of(heads) {
            return Err(bad(path, format!("hidden_size {d} is not a multiple of num_attention_heads {heads}")));
        }
        let head = match self.lm_head_type.as_deref().unwrap_or("replicate") {
            "replicate" => LaneHead::Replicate,
            "lane" => LaneHead::Lane,
            "vocab_parallel" => LaneHead::VocabParallel,
            other => return Err(bad(path, format!("lm_head_type `{other}` is not one of replicate, lane, vocab_parallel"))),
        };
        let config = ModelConfig {
            name: name.to_string(),
            architecture: Architecture::Llama,
            vocab_size: self.vocab_size,
            hidden_size: d,
            intermediate_size: self.intermediate_size,
            num_layers: self.num_hidden_layers,
            num_heads: heads,
            num_kv_heads: self.num_key_value_heads.unwrap_or(heads),
            head_dim: d / heads,
            max_context: self.max_position_embeddings.unwrap_or(DEFAULT_MAX_POSITIONS),
            rms_norm_eps: self.norm_eps.unwrap_or(DEFAULT_NORM_EPS),
            rope_theta: self.rope_theta.unwrap_or(DEFAULT_ROPE_THETA),
            rope_scaling: RopeScaling::None,
            // Rotations pair x[2i] with x[2i+1] (complex multiplication of adjacent pairs).
            rope_layout: RopeLayout::Interleaved,
            attention_bias: false,
            tie_embeddings: self.tie_word_embeddings.unwrap_or(false),
            sliding_window: self.window(path)?,
            lanes: LaneConfig {
                count: self.num_lanes.unwrap_or(1),
                delay: self.broadcast_delay.unwrap_or(DEFAULT_DELAY),
                comm: self.use_comm.unwrap_or(true),
                early_comm: self.use_early_comm.unwrap_or(true),
                head,
                sum_before_norm: self.pre_norm_lane_agg.unwrap_or(false),
                lane_norms: !self.replicated_rmsn_scale.unwrap_or(true),
            },
        };
        config.validate().map_err(|reason| bad(path, reason))?;
        Ok(config)
    }

    /// Which layers use the window: `sliding_window_n_layers` n > 0 the first n, n < 0 the
    /// last |n|; `unclamped_layers` never.
    fn window(&self, path: &Path) -> Result<SlidingWindow> {
        let layers = self.num_hidden_layers;
        let n = self.sliding_window_n_layers.unwrap_or(0);
        if let Some(&bad_layer) = self.unclamped_layers.iter().find(|&&l| l >= layers) {
            return Err(bad(path, format!("unclamped_layers names layer {bad_layer} of {layers}")));
        }
        if n.unsigned_abs() > layers as u64 {
            return Err(bad(path, format!("sliding_window_n_layers {n} exceeds the {layers} layers")));
        }
        let size = match (self.sliding_window, n) {
            (_, 0) => return Ok(SlidingWindow::default()),
            (Some(w), _) if w > 0 => w,
            (w, _) => return Err(bad(path, format!("sliding_window_n_layers {n} needs a positive sliding_window, not {w:?}"))),
        };
        let windowed = |l: usize| {
            let marked = if n > 0 { (l as i64) < n } else { l as i64 >= layers as i64 + n };
            marked && !self.unclamped_layers.contains(&l)
        };
        Ok(SlidingWindow { size, layers: (0..layers).map(windowed).collect() })
    }
}

fn bad(path: &Path, reason: String) -> Error {
    Error::BadConfig { path: path.display().to_string(), reason }
}
