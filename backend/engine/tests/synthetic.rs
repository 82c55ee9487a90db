//! Synthetic weights: shapes match the config, values are seeded and scaled,
//! and the presets carry the published model shapes.

use peregrine_engine::config::{Architecture, RopeScaling};
use peregrine_engine::lab::synthetic::{preset, synthetic_weights, PRESET_NAMES};

fn small_qwen() -> peregrine_engine::config::ModelConfig {
    let mut c = preset("qwen2.5-coder-1.5b").unwrap();
    (c.vocab_size, c.hidden_size, c.intermediate_size, c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim) = (50, 64, 96, 3, 4, 2, 16);
    c.tie_embeddings = false;
    c
}

#[test]
fn shapes_pass_check_and_seed_is_deterministic() {
    let c = small_qwen();
    let w = synthetic_weights(&c, 7);
    w.check(&c, "synthetic").unwrap();
    assert!(w.layers.iter().all(|l| l.q_bias.is_some()) && w.lm_head.is_some());
    let again = synthetic_weights(&c, 7);
    let other = synthetic_weights(&c, 8);
    assert_eq!(w.layers[2].down.bytes(), again.layers[2].down.bytes());
    assert_ne!(w.layers[2].down.bytes(), other.layers[2].down.bytes());
    assert_ne!(w.layers[0].q.bytes(), w.layers[1].q.bytes());

    let mut tied = preset("smollm2-135m").unwrap();
    (tied.vocab_size, tied.num_layers) = (40, 2);
    let w = synthetic_weights(&tied, 1);
    w.check(&tied, "synthetic").unwrap();
    assert!(w.lm_head.is_none() && w.layers[0].q_bias.is_none());
}

#[test]
fn values_are_scaled() {
    let c = small_qwen();
    let w = synthetic_weights(&c, 3);
    let std = |v: &[f32]| (v.iter().map(|x| x * x).sum::<f32>() / v.len() as f32).sqrt();
    let up = w.layers[0].up.to_f32().unwrap();
    assert!((std(&up) * 8.0 - 1.0).abs() < 0.1, "up std {} vs 1/sqrt(64)", std(&up));
    let down = w.layers[0].down.to_f32().unwrap();
    assert!((std(&down) * (96f32).sqrt() - 1.0).abs() < 0.1);
    let norm = w.layers[1].attn_norm.to_f32().unwrap();
    assert!(norm.iter().all(|x| (0.89..=1.11).contains(x)));
    let bias = w.layers[0].k_bias.as_ref().unwrap().to_f32().unwrap();
    assert!(bias.iter().all(|x| x.abs() <= 0.02) && bias.iter().any(|x| *x != 0.0));
}

#[test]
fn presets_match_published_shapes() {
    for name in PRESET_NAMES {
        preset(name).unwrap().validate().unwrap();
    }
    assert!(preset("gpt-5").is_none());
    assert_eq!(preset("SmolLM2-135M").unwrap().parameter_count(), 134_515_008);
    let l = preset("llama-3.2-1b").unwrap();
    assert_eq!(l.parameter_count(), 1_235_814_400);
    assert_eq!(
        l.rope_scaling,
        RopeScaling::Llama3 { factor: 32.0, low_freq_factor: 1.0, high_freq_factor: 4.0, original_max_position: 8192 }
    );
    let q = preset("qwen2.5-coder-1.5b").unwrap();
    assert_eq!((q.architecture, q.attention_bias, q.head_dim), (Architecture::Qwen2, true, 128));
    assert_eq!(q.parameter_count(), 1_543_714_304);
    assert_eq!(preset("smollm2-1.7b").unwrap().parameter_count(), 1_711_376_384);
    // The 3–8B presets: tied embeddings only on the 3B, as published.
    for (name, params, tied) in
        [("qwen2.5-coder-3b", 3_085_938_688, true), ("qwen2.5-coder-7b", 7_615_616_512, false), ("llama-3.1-8b", 8_030_261_248, false)]
    {
        let c = preset(name).unwrap();
        assert_eq!((c.parameter_count(), c.tie_embeddings), (params, tied), "{name}");
    }
}
