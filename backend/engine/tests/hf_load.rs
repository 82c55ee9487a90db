//! Hugging Face directories: the committed transformers fixtures (single and
//! sharded safetensors) and tiny directories written here for the error paths.

mod common;

use std::path::{Path, PathBuf};

use common::gguf_writer::temp_dir;
use peregrine_engine::config::{Architecture, LaneConfig, ModelConfig, RopeLayout, RopeScaling, SlidingWindow};
use peregrine_engine::hf::{load_hf_dir, tensor_name};
use peregrine_engine::tensor::DType;
use peregrine_engine::weights::{LayerRole, WeightRole};
use peregrine_engine::Error;
use safetensors::tensor::{Dtype, TensorView};
use serde_json::json;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf").join(name)
}

#[test]
fn transformers_fixtures_load() {
    let (c, w) = load_hf_dir(&fixture("llama3-scaled-tied")).unwrap();
    assert_eq!((c.architecture, c.rope_layout), (Architecture::Llama, RopeLayout::HalfSplit));
    assert_eq!(c.rope_scaling, RopeScaling::Llama3 { factor: 8.0, low_freq_factor: 1.0, high_freq_factor: 4.0, original_max_position: 32 });
    assert_eq!((c.rope_theta, c.tie_embeddings, c.attention_bias), (500_000.0, true, false));
    assert_eq!((c.num_kv_heads, c.head_dim, c.max_context, c.vocab_size), (1, 16, 128, 320));
    assert!(w.lm_head.is_none());

    let (c, w) = load_hf_dir(&fixture("qwen2-bias-untied")).unwrap();
    assert_eq!((c.architecture, c.attention_bias, c.tie_embeddings, c.rope_theta), (Architecture::Qwen2, true, false, 1e6));
    assert_eq!(w.layers[1].k_bias.as_ref().unwrap().shape, vec![32]);
    assert_eq!(w.lm_head.as_ref().unwrap().name, "lm_head.weight");

    let (c, w) = load_hf_dir(&fixture("llama-gqa-untied")).unwrap();
    assert_eq!((c.num_layers, c.num_kv_heads, c.rope_scaling), (2, 2, RopeScaling::None));
    let embed = w.embed.to_f32().unwrap();
    assert!(embed.iter().all(|v| v.is_finite()) && embed.iter().any(|v| *v != 0.0));
    w.check(&c, "sharded").unwrap();

    let (c, _) = load_hf_dir(&fixture("qwen2-tied")).unwrap();
    assert!(c.tie_embeddings && c.attention_bias);
}

fn tiny_config() -> serde_json::Value {
    json!({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 6, "hidden_size": 4,
        "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
        "max_position_embeddings": 16, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu"
    })
}

/// Writes config.json and model.safetensors with bf16 weights for `config`'s shapes.
fn write_dir(tag: &str, config: &serde_json::Value, edit: impl FnOnce(&mut Vec<(String, Dtype, Vec<usize>, Vec<u8>)>)) -> PathBuf {
    let dir = temp_dir(tag);
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let shape_config = ModelConfig {
        name: String::new(),
        architecture: Architecture::Llama,
        vocab_size: 6,
        hidden_size: 4,
        intermediate_size: 8,
        num_layers: 1,
        num_heads: 2,
        num_kv_heads: 1,
        head_dim: 2,
        max_context: 16,
        rms_norm_eps: 1e-5,
        rope_theta: 1e4,
        rope_scaling: RopeScaling::None,
        rope_layout: RopeLayout::HalfSplit,
        attention_bias: false,
        tie_embeddings: false,
        sliding_window: SlidingWindow::default(),
        lanes: LaneConfig::default(),
    };
    let mut roles = vec![WeightRole::Embed, WeightRole::FinalNorm, WeightRole::LmHead];
    roles.extend(LayerRole::ALL.iter().filter(|r| !r.is_bias()).map(|&r| WeightRole::Layer(0, r)));
    let mut tensors: Vec<_> = roles
        .into_iter()
        .map(|role| {
            let shape = role.expected_shape(&shape_config);
            let n: usize = shape.iter().product();
            let data = (0..n).flat_map(|i| half::bf16::from_f32(i as f32 * 0.25 - 1.0).to_le_bytes()).collect();
            (tensor_name(role), Dtype::BF16, shape, data)
        })
        .collect();
    edit(&mut tensors);
    let views: Vec<_> =
        tensors.iter().map(|(n, dt, shape, data)| (n.clone(), TensorView::new(*dt, shape.clone(), data).unwrap())).collect();
    std::fs::write(dir.join("model.safetensors"), safetensors::serialize(views, None).unwrap()).unwrap();
    dir
}

#[test]
fn bf16_weights_decode_and_tying_follows_lm_head() {
    let dir = write_dir("hf-bf16", &tiny_config(), |_| {});
    let (c, w) = load_hf_dir(&dir).unwrap();
    assert!(!c.tie_embeddings, "lm_head present and tie_word_embeddings unset: untied");
    assert_eq!(w.embed.dtype, DType::BF16);
    assert_eq!(&w.embed.to_f32().unwrap()[..3], &[-1.0, -0.75, -0.5]);

    let dir = write_dir("hf-no-head", &tiny_config(), |t| t.retain(|x| x.0 != "lm_head.weight"));
    let (c, w) = load_hf_dir(&dir).unwrap();
    assert!(c.tie_embeddings && w.lm_head.is_none());
}

#[test]
fn errors_name_the_file_and_problem() {
    let msg = |dir: &Path| load_hf_dir(dir).unwrap_err().to_string();

    let mut cfg = tiny_config();
    cfg["tie_word_embeddings"] = json!(false);
    let dir = write_dir("hf-missing", &cfg, |t| t.retain(|x| x.0 != "lm_head.weight"));
    let m = msg(&dir);
    assert!(m.contains("missing tensor `lm_head.weight`") && m.contains("hf-missing"), "{m}");

    let dir =
        write_dir("hf-shape", &tiny_config(), |t| t.iter_mut().filter(|x| x.0.ends_with("k_proj.weight")).for_each(|x| x.2 = vec![4, 2]));
    let m = msg(&dir);
    assert!(m.contains("shape mismatch") && m.contains("model.layers.0.self_attn.k_proj.weight") && m.contains("[2, 4]"), "{m}");

    let dir = write_dir("hf-dtype", &tiny_config(), |t| t.iter_mut().filter(|x| x.0 == "model.norm.weight").for_each(|x| x.1 = Dtype::I16));
    let err = load_hf_dir(&dir).unwrap_err();
    assert!(matches!(err, Error::UnsupportedDType { .. }) && err.to_string().contains("model.norm.weight"), "{err}");

    let mut cfg = tiny_config();
    cfg["architectures"] = json!(["GPT2LMHeadModel"]);
    cfg["model_type"] = json!("gpt2");
    let m = msg(&write_dir("hf-arch", &cfg, |_| {}));
    assert!(m.contains("unknown architecture") && m.contains("GPT2LMHeadModel") && m.contains("config.json"), "{m}");

    let mut cfg = tiny_config();
    cfg["rope_scaling"] = json!({"rope_type": "yarn", "factor": 4.0});
    assert!(msg(&write_dir("hf-yarn", &cfg, |_| {})).contains("`yarn` is not supported"));

    let dir = write_dir("hf-trunc", &tiny_config(), |_| {});
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    for cut in [0, 7, 20, bytes.len() - 1] {
        std::fs::write(dir.join("model.safetensors"), &bytes[..cut]).unwrap();
        let m = msg(&dir);
        assert!(m.contains("corrupt") && m.contains("model.safetensors"), "cut {cut}: {m}");
    }

    std::fs::write(dir.join("config.json"), "{ not json").unwrap();
    assert!(msg(&dir).contains("invalid config.json"));
    std::fs::remove_file(dir.join("config.json")).unwrap();
    assert!(msg(&dir).contains("config.json"));
}
