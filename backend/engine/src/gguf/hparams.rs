//! GGUF metadata (`{arch}.*` keys as written by llama.cpp's convert_hf_to_gguf.py)
//! mirrored into [`GgufHparams`], then normalised into a [`ModelConfig`].

use super::rope_freqs::llama3_from_factors;
use super::{GgufFile, MetaValue};
use crate::config::{Architecture, LaneConfig, ModelConfig, RopeLayout, RopeScaling, SlidingWindow};
use crate::error::{Error, Result};

/// RoPE base when `{arch}.rope.freq_base` is absent (llama.cpp's default).
pub const DEFAULT_ROPE_FREQ_BASE: f32 = 10_000.0;
/// Tensor of per-frequency RoPE divisors that Llama 3.x GGUFs carry instead of scaling keys.
pub const ROPE_FREQS_TENSOR: &str = "rope_freqs.weight";

/// The model-shape keys of a GGUF file, as stored (absent keys are `None`).
#[derive(Debug, Clone, Default)]
pub struct GgufHparams {
    pub architecture: String,
    pub name: Option<String>,
    pub embedding_length: Option<u64>,
    pub feed_forward_length: Option<u64>,
    pub block_count: Option<u64>,
    pub head_count: Option<u64>,
    pub head_count_kv: Option<u64>,
    pub rms_epsilon: Option<f32>,
    pub freq_base: Option<f32>,
    pub context_length: Option<u64>,
    pub key_length: Option<u64>,
    pub value_length: Option<u64>,
    pub rope_dimension_count: Option<u64>,
    pub rope_scaling_type: Option<String>,
    pub rope_scaling_factor: Option<f32>,
    pub rope_scaling_original_context: Option<u64>,
}

impl GgufHparams {
    /// Reads the keys; errors only when `general.architecture` is absent.
    pub fn read(g: &GgufFile) -> Result<GgufHparams> {
        let arch = g.get_str("general.architecture").ok_or_else(|| bad(g, "missing `general.architecture`".into()))?;
        let k = |suffix: &str| format!("{arch}.{suffix}");
        let u = |suffix: &str| g.get_u64(&k(suffix));
        let f = |suffix: &str| g.get_f32(&k(suffix));
        Ok(GgufHparams {
            architecture: arch.to_string(),
            name: g.get_str("general.name").map(str::to_string),
            embedding_length: u("embedding_length"),
            feed_forward_length: u("feed_forward_length"),
            block_count: u("block_count"),
            head_count: u("attention.head_count"),
            head_count_kv: u("attention.head_count_kv"),
            rms_epsilon: f("attention.layer_norm_rms_epsilon"),
            freq_base: f("rope.freq_base"),
            context_length: u("context_length"),
            key_length: u("attention.key_length"),
            value_length: u("attention.value_length"),
            rope_dimension_count: u("rope.dimension_count"),
            rope_scaling_type: g.get(&k("rope.scaling.type")).and_then(MetaValue::as_str).map(str::to_string),
            rope_scaling_factor: f("rope.scaling.factor"),
            rope_scaling_original_context: u("rope.scaling.original_context_length"),
        })
    }
}

/// Builds the model config: shapes from metadata, vocab from `token_embd.weight`,
/// tied embeddings and q/k/v biases from which tensors exist.
pub fn model_config(g: &GgufFile) -> Result<ModelConfig> {
    let h = GgufHparams::read(g)?;
    let path = g.path.display().to_string();
    let (architecture, rope_layout) = match h.architecture.as_str() {
        "llama" => (Architecture::Llama, RopeLayout::Interleaved),
        "qwen2" => (Architecture::Qwen2, RopeLayout::HalfSplit),
        other => return Err(Error::UnknownArchitecture { path, arch: other.to_string() }),
    };
    let arch = &h.architecture;
    let need = |v: Option<u64>, key: &str| -> Result<usize> {
        let v = v.ok_or_else(|| bad(g, format!("missing `{arch}.{key}`")))?;
        usize::try_from(v).map_err(|_| bad(g, format!("`{arch}.{key}` = {v} is too large")))
    };
    let hidden_size = need(h.embedding_length, "embedding_length")?;
    let num_heads = need(h.head_count, "attention.head_count")?;
    let num_kv_heads = match h.head_count_kv {
        Some(_) => need(h.head_count_kv, "attention.head_count_kv")?,
        None => num_heads,
    };
    let head_dim = match h.key_length {
        Some(_) => need(h.key_length, "attention.key_length")?,
        None if num_heads > 0 && hidden_size % num_heads == 0 => hidden_size / num_heads,
        None => return Err(bad(g, format!("embedding_length {hidden_size} is not divisible by head_count {num_heads}"))),
    };
    if h.value_length.is_some_and(|v| v != head_dim as u64) {
        return Err(bad(g, format!("attention.value_length {:?} differs from key length {head_dim}", h.value_length)));
    }
    if h.rope_dimension_count.is_some_and(|r| r != head_dim as u64) {
        return Err(bad(
            g,
            format!("partial RoPE (rope.dimension_count {:?} of head_dim {head_dim}) is not supported", h.rope_dimension_count),
        ));
    }
    let embd =
        g.tensor_info("token_embd.weight").ok_or_else(|| Error::MissingTensor { path: path.clone(), name: "token_embd.weight".into() })?;
    let vocab_size = match embd.shape[..] {
        [vocab, _] => vocab,
        _ => return Err(bad(g, format!("token_embd.weight has shape {:?}, expected [vocab, hidden]", embd.shape))),
    };
    let first_bias = g.tensor_info("blk.0.attn_q.bias").is_some();
    let config = ModelConfig {
        name: display_name(g, h.name.as_deref()),
        architecture,
        vocab_size,
        hidden_size,
        intermediate_size: need(h.feed_forward_length, "feed_forward_length")?,
        num_layers: need(h.block_count, "block_count")?,
        num_heads,
        num_kv_heads,
        head_dim,
        max_context: need(h.context_length, "context_length")?,
        rms_norm_eps: h.rms_epsilon.ok_or_else(|| bad(g, format!("missing `{arch}.attention.layer_norm_rms_epsilon`")))?,
        rope_theta: h.freq_base.unwrap_or(DEFAULT_ROPE_FREQ_BASE),
        rope_scaling: rope_scaling(g, &h, head_dim)?,
        rope_layout,
        attention_bias: architecture == Architecture::Qwen2 || first_bias,
        tie_embeddings: g.tensor_info("output.weight").is_none(),
        sliding_window: SlidingWindow::default(),
        lanes: LaneConfig::default(),
    };
    config.validate().map_err(|reason| bad(g, reason))?;
    Ok(config)
}

fn rope_scaling(g: &GgufFile, h: &GgufHparams, head_dim: usize) -> Result<RopeScaling> {
    match h.rope_scaling_type.as_deref() {
        None | Some("none") => {}
        Some("linear") if h.rope_scaling_factor == Some(1.0) => {}
        Some(other) => return Err(bad(g, format!("rope scaling type `{other}` is not supported"))),
    }
    if g.tensor_info(ROPE_FREQS_TENSOR).is_none() {
        return Ok(RopeScaling::None);
    }
    let factors = g.tensor(ROPE_FREQS_TENSOR)?.to_f32()?;
    let theta = h.freq_base.unwrap_or(DEFAULT_ROPE_FREQ_BASE);
    llama3_from_factors(&factors, theta, head_dim, h.rope_scaling_original_context)
        .map_err(|reason| bad(g, format!("{ROPE_FREQS_TENSOR}: {reason}")))
}

/// The name people know a GGUF by: its file name without the quantization suffix
/// (`SmolLM2-135M-Instruct.Q4_1.gguf` → `SmolLM2-135M-Instruct`). `general.name` is
/// often a training-run label ("Smollm2 135M 8k Lc100K Mix1 Ep2"), so it is only the
/// fallback.
fn display_name(g: &GgufFile, general_name: Option<&str>) -> String {
    let stem = g.path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let base = match stem.rsplit_once(['.', '-']) {
        Some((base, suffix)) if is_quant_label(suffix) && !base.is_empty() => base.to_string(),
        _ => stem,
    };
    if base.is_empty() {
        general_name.unwrap_or("model").to_string()
    } else {
        base
    }
}

/// `Q4_1`, `Q4_K_M`, `IQ2_XS`, `F16`, `BF16`, `F32`...
fn is_quant_label(s: &str) -> bool {
    let u = s.to_ascii_uppercase();
    matches!(u.as_str(), "F16" | "BF16" | "F32")
        || ((u.starts_with('Q') || u.starts_with("IQ"))
            && u.chars().any(|c| c.is_ascii_digit())
            && u.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
}

fn bad(g: &GgufFile, reason: String) -> Error {
    Error::BadConfig { path: g.path.display().to_string(), reason }
}

#[cfg(test)]
mod name_tests {
    use super::is_quant_label;

    #[test]
    fn quant_suffixes_are_recognised() {
        for s in ["Q4_1", "q8_0", "Q4_K_M", "IQ2_XS", "F16", "bf16"] {
            assert!(is_quant_label(s), "{s}");
        }
        for s in ["Instruct", "135M", "v2", ""] {
            assert!(!is_quant_label(s), "{s}");
        }
    }
}
