//! GGUF metadata → ModelConfig and Weights on tiny synthetic files: layouts per
//! architecture, tied heads, biases, and clear errors for bad models.

mod common;

use common::gguf_writer::{model_writer, temp_dir};
use peregrine_engine::config::{Architecture, LaneConfig, ModelConfig, RopeLayout, RopeScaling, SlidingWindow};
use peregrine_engine::gguf::{llama3_factors, llama3_from_factors, load_gguf, MetaValue};
use peregrine_engine::Error;

fn tiny(arch: Architecture, bias: bool, tied: bool) -> ModelConfig {
    ModelConfig {
        name: "tiny".into(),
        architecture: arch,
        vocab_size: 10,
        hidden_size: 8,
        intermediate_size: 12,
        num_layers: 2,
        num_heads: 2,
        num_kv_heads: 1,
        head_dim: 4,
        max_context: 64,
        rms_norm_eps: 1e-6,
        rope_theta: 10_000.0,
        rope_scaling: RopeScaling::None,
        rope_layout: RopeLayout::HalfSplit,
        attention_bias: bias,
        tie_embeddings: tied,
        sliding_window: SlidingWindow::default(),
        lanes: LaneConfig::default(),
    }
}

#[test]
fn llama_is_interleaved_and_tied_without_output() {
    let dir = temp_dir("gguf-llama");
    let want = tiny(Architecture::Llama, false, true);
    let (_, config, weights) = load_gguf(&model_writer("llama", &want).write(&dir, "tiny.Q8_0.gguf")).unwrap();
    // The display name is the file name without its quantization suffix.
    assert_eq!(config, ModelConfig { rope_layout: RopeLayout::Interleaved, ..want.clone() });
    assert!(weights.lm_head.is_none());
    assert_eq!(weights.lm_head().name, "token_embd.weight");
    assert_eq!(weights.layers.len(), 2);
    assert_eq!(weights.layers[1].k.shape, vec![4, 8]);
    weights.check(&config, "l.gguf").unwrap();

    let untied = tiny(Architecture::Llama, false, false);
    let (_, config, weights) = load_gguf(&model_writer("llama", &untied).write(&dir, "u.gguf")).unwrap();
    assert!(!config.tie_embeddings);
    assert_eq!(weights.lm_head.as_ref().map(|t| t.name.as_str()), Some("output.weight"));
}

#[test]
fn qwen2_is_half_split_with_biases() {
    let dir = temp_dir("gguf-qwen2");
    let want = tiny(Architecture::Qwen2, true, true);
    let (_, config, weights) = load_gguf(&model_writer("qwen2", &want).write(&dir, "tiny-Q4_K_M.gguf")).unwrap();
    assert_eq!(config, want);
    assert_eq!(weights.layers[0].q_bias.as_ref().map(|t| t.shape.clone()), Some(vec![8]));
    assert_eq!(weights.layers[0].v_bias.as_ref().map(|t| t.shape.clone()), Some(vec![4]));

    let mut w = model_writer("qwen2", &want);
    w.tensors.retain(|t| t.0 != "blk.1.attn_k.bias");
    let msg = load_gguf(&w.write(&dir, "nobias.gguf")).unwrap_err().to_string();
    assert!(msg.contains("missing tensor `blk.1.attn_k.bias`") && msg.contains("nobias.gguf"), "{msg}");
}

#[test]
fn shape_mismatch_names_tensor_and_shapes() {
    let dir = temp_dir("gguf-shape");
    let mut w = model_writer("llama", &tiny(Architecture::Llama, false, true));
    let t = w.tensors.iter_mut().find(|t| t.0 == "blk.0.ffn_up.weight").unwrap();
    t.2 = vec![8, 12];
    let err = load_gguf(&w.write(&dir, "s.gguf")).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::ShapeMismatch { .. }), "{msg}");
    assert!(msg.contains("blk.0.ffn_up.weight") && msg.contains("[12, 8]") && msg.contains("[8, 12]"), "{msg}");
}

#[test]
fn unknown_architecture_and_missing_keys() {
    let dir = temp_dir("gguf-arch");
    let mut w = model_writer("gpt2", &tiny(Architecture::Llama, false, true));
    let msg = load_gguf(&w.write(&dir, "g.gguf")).unwrap_err().to_string();
    assert!(msg.contains("unknown architecture `gpt2`") && msg.contains("g.gguf"), "{msg}");

    w = model_writer("llama", &tiny(Architecture::Llama, false, true));
    w.kv.retain(|(k, _)| k != "llama.block_count");
    let msg = load_gguf(&w.write(&dir, "k.gguf")).unwrap_err().to_string();
    assert!(msg.contains("llama.block_count"), "{msg}");

    w = model_writer("llama", &tiny(Architecture::Llama, false, true));
    w.kv.push(("llama.attention.head_count_kv".into(), MetaValue::U32(0)));
    w.kv.retain(|(k, v)| k != "llama.attention.head_count_kv" || *v == MetaValue::U32(0));
    let msg = load_gguf(&w.write(&dir, "z.gguf")).unwrap_err().to_string();
    assert!(msg.contains("num_kv_heads is 0"), "{msg}");
}

#[test]
fn rope_freqs_tensor_becomes_llama3_scaling() {
    let llama32 = RopeScaling::Llama3 { factor: 32.0, low_freq_factor: 1.0, high_freq_factor: 4.0, original_max_position: 8192 };
    let factors: Vec<f32> = llama3_factors(&llama32, 500_000.0, 64).iter().map(|&f| f as f32).collect();
    assert!(factors.iter().any(|&f| f > 1.0 && f < 32.0), "test needs smoothed factors");
    assert_eq!(llama3_from_factors(&factors, 500_000.0, 64, None).unwrap(), llama32);
    assert_eq!(llama3_from_factors(&[1.0; 32], 500_000.0, 64, None).unwrap(), RopeScaling::None);
    assert!(llama3_from_factors(&[2.0; 32], 500_000.0, 64, None).is_err());

    let dir = temp_dir("gguf-rope-freqs");
    let mut want = tiny(Architecture::Llama, false, true);
    want.head_dim = 64;
    want.hidden_size = 128;
    want.rope_theta = 500_000.0;
    let mut w = model_writer("llama", &want);
    let bytes = factors.iter().flat_map(|f| f.to_le_bytes()).collect();
    w = w.raw_tensor("rope_freqs.weight", 0, vec![32], bytes);
    let (_, config, _) = load_gguf(&w.write(&dir, "r.gguf")).unwrap();
    assert_eq!(config.rope_scaling, llama32);
}
