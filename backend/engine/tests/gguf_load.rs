//! Loads the real default model (SmolLM2-135M-Instruct Q4_1 GGUF) and checks its
//! config and that its weights decode to sane numbers.

use std::path::PathBuf;

use peregrine_engine::config::{Architecture, RopeLayout};
use peregrine_engine::gguf::load_gguf;
use peregrine_engine::tensor::DType;

/// The model file name `scripts/fetch-model.sh` downloads.
const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

fn model_path() -> PathBuf {
    let path = std::env::var_os("PEREGRINE_DEFAULT_MODEL").map(PathBuf::from).unwrap_or_else(|| {
        let home = std::env::var_os("HOME").expect("HOME is not set");
        PathBuf::from(home).join(".cache/peregrine/models").join(DEFAULT_MODEL_FILE)
    });
    assert!(path.exists(), "default model missing at {}: run scripts/fetch-model.sh first", path.display());
    path
}

#[test]
fn smollm2_config_and_weights() {
    let (file, config, weights) = load_gguf(&model_path()).unwrap();
    assert_eq!(config.name, "SmolLM2-135M-Instruct", "display name comes from the file name");
    assert_eq!(config.architecture, Architecture::Llama);
    assert_eq!(config.rope_layout, RopeLayout::Interleaved);
    assert_eq!(
        (config.num_layers, config.hidden_size, config.num_heads, config.num_kv_heads, config.intermediate_size, config.vocab_size),
        (30, 576, 9, 3, 1536, 49152)
    );
    assert_eq!((config.head_dim, config.max_context), (64, 8192));
    assert_eq!(config.rope_theta, 100_000.0);
    assert_eq!(config.rms_norm_eps, 1e-5);
    assert!(config.tie_embeddings && !config.attention_bias);
    assert_eq!(file.get_str("tokenizer.ggml.model"), Some("gpt2"));
    assert_eq!(weights.layers[0].q.dtype, DType::Q4_1);
    weights.check(&config, "smollm2").unwrap();

    let embed = weights.embed.to_f32().unwrap();
    assert_eq!(embed.len(), 49152 * 576);
    for token in [0usize, 1, 2, 100, 49151] {
        let row = &embed[token * 576..(token + 1) * 576];
        assert!(row.iter().all(|v| v.is_finite()), "token {token}: non-finite embedding");
        let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt();
        assert!(norm > 1e-3 && norm < 1e3, "token {token}: embedding norm {norm}");
        let mut one = vec![0.0; 576];
        weights.embed.row_to_f32(token, &mut one).unwrap();
        assert_eq!(one, row);
    }
    let distinct = embed[..576].iter().map(|v| v.to_bits()).collect::<std::collections::HashSet<_>>().len();
    assert!(distinct > 20, "embedding row 0 has only {distinct} distinct values");
    for layer in [0, 29] {
        let l = &weights.layers[layer];
        for t in [&l.attn_norm, &l.q, &l.down] {
            let v = t.to_f32().unwrap();
            assert!(v.iter().all(|x| x.is_finite()) && v.iter().any(|x| *x != 0.0), "{}: bad values", t.name);
        }
    }
}
