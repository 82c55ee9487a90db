//! A [`ModelConfig`] written back as the `config.json` transformers 5 would write for
//! it (`LlamaForCausalLM` / `Qwen2ForCausalLM`, RoPE in `rope_parameters`), so the
//! GPU host's Python scripts build random-weight models of exactly the shapes the
//! engine benchmarks, from this one definition.

use serde_json::{json, Value};

use crate::config::{Architecture, ModelConfig, RopeLayout, RopeScaling};

/// transformers' `config.json` for `config`. Checkpoints are always half-split RoPE
/// (GGUF's interleaved layout is a converter artefact, never written to HF files).
pub fn hf_config_json(config: &ModelConfig) -> Value {
    let c = config;
    // f32 → the shortest decimal that round-trips (1e-6, not 9.99999997e-7).
    let f = |x: f32| -> f64 { x.to_string().parse().unwrap_or(x as f64) };
    debug_assert_eq!(c.rope_layout, RopeLayout::HalfSplit, "HF checkpoints use half-split RoPE");
    let mut rope = json!({ "rope_type": "default", "rope_theta": f(c.rope_theta) });
    if let RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position } = c.rope_scaling {
        rope = json!({
            "rope_type": "llama3",
            "rope_theta": f(c.rope_theta),
            "factor": f(factor),
            "low_freq_factor": f(low_freq_factor),
            "high_freq_factor": f(high_freq_factor),
            "original_max_position_embeddings": original_max_position,
        });
    }
    let (class, model_type) = match c.architecture {
        Architecture::Llama => ("LlamaForCausalLM", "llama"),
        Architecture::Qwen2 => ("Qwen2ForCausalLM", "qwen2"),
    };
    let mut out = json!({
        "architectures": [class],
        "model_type": model_type,
        "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.num_layers,
        "num_attention_heads": c.num_heads,
        "num_key_value_heads": c.num_kv_heads,
        "head_dim": c.head_dim,
        "max_position_embeddings": c.max_context,
        "rms_norm_eps": f(c.rms_norm_eps),
        "rope_parameters": rope,
        "tie_word_embeddings": c.tie_embeddings,
        "hidden_act": "silu",
        "mlp_bias": false,
    });
    let fields = out.as_object_mut().expect("a JSON object");
    match c.architecture {
        Architecture::Llama => {
            fields.insert("attention_bias".into(), json!(c.attention_bias));
        }
        Architecture::Qwen2 => {
            fields.insert("use_sliding_window".into(), json!(false));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hf::HfConfig;

    #[test]
    fn every_preset_round_trips_through_config_json() {
        for name in crate::lab::synthetic::PRESET_NAMES {
            let want = crate::lab::synthetic::preset(name).expect("preset");
            let hf: HfConfig = serde_json::from_value(hf_config_json(&want)).expect("parses as config.json");
            let got = hf.to_model_config(std::path::Path::new("config.json"), &want.name, false).expect("valid");
            assert_eq!(got, want, "{name}");
        }
    }
}
