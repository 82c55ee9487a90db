//! Shapes of the models Peregrine is benchmarked on, copied from each model's
//! Hugging Face `config.json`, for synthetic weights without a download.

use crate::config::{Architecture, LaneConfig, ModelConfig, RopeLayout, RopeScaling, SlidingWindow};

/// The ordinary models' presets: every name [`preset`] accepts besides [`LANEFORMER_PRESETS`].
pub const PRESET_NAMES: &[&str] = &["smollm2-135m", "llama-3.2-1b", "qwen2.5-coder-1.5b", "smollm2-1.7b", "qwen2.5-coder-3b", "qwen2.5-coder-7b", "llama-3.1-8b"];

/// The benchmark's usual shapes: the 0.1–2B models of [`PRESET_NAMES`] (the 3–8B ones
/// are measured by name).
pub const SMALL_PRESETS: &[&str] = &["smollm2-135m", "llama-3.2-1b", "qwen2.5-coder-1.5b", "smollm2-1.7b"];

/// Laneformer presets (their lanes and windows are part of the shape; outside
/// [`PRESET_NAMES`], whose shapes every runtime and exporter takes as ordinary models).
pub const LANEFORMER_PRESETS: &[&str] = &["laneformer-2b"];

/// The same matrices as an ordinary model (one lane, no window): how standard tensor
/// parallelism and the single-lane kernels run a Laneformer preset's weights (the
/// identity on [`PRESET_NAMES`]).
pub fn ordinary(config: &ModelConfig) -> ModelConfig {
    ModelConfig { lanes: LaneConfig::default(), sliding_window: SlidingWindow::default(), ..config.clone() }
}

/// The shape of a known model by name (case-insensitive), with HF's RoPE layout.
pub fn preset(name: &str) -> Option<ModelConfig> {
    let llama = |name: &str| ModelConfig {
        name: name.to_string(),
        architecture: Architecture::Llama,
        vocab_size: 49152,
        hidden_size: 576,
        intermediate_size: 1536,
        num_layers: 30,
        num_heads: 9,
        num_kv_heads: 3,
        head_dim: 64,
        max_context: 8192,
        rms_norm_eps: 1e-5,
        rope_theta: 100_000.0,
        rope_scaling: RopeScaling::None,
        rope_layout: RopeLayout::HalfSplit,
        attention_bias: false,
        tie_embeddings: true,
        sliding_window: SlidingWindow::default(),
        lanes: LaneConfig::default(),
    };
    // The Llama 3 family's vocabulary, context and RoPE base.
    let llama3 = |name: &str| ModelConfig { vocab_size: 128_256, max_context: 131_072, rope_theta: 500_000.0, ..llama(name) };
    // The Qwen2.5(-Coder) family's: q/k/v bias, head dim 128, a 152k vocabulary.
    let qwen = |name: &str| ModelConfig {
        architecture: Architecture::Qwen2,
        vocab_size: 151_936,
        head_dim: 128,
        max_context: 32_768,
        rms_norm_eps: 1e-6,
        rope_theta: 1_000_000.0,
        attention_bias: true,
        ..llama(name)
    };
    Some(match name.to_ascii_lowercase().as_str() {
        "smollm2-135m" => llama("SmolLM2-135M"),
        "llama-3.2-1b" => ModelConfig {
            hidden_size: 2048,
            intermediate_size: 8192,
            num_layers: 16,
            num_heads: 32,
            num_kv_heads: 8,
            rope_scaling: RopeScaling::Llama3 { factor: 32.0, low_freq_factor: 1.0, high_freq_factor: 4.0, original_max_position: 8192 },
            ..llama3("Llama-3.2-1B")
        },
        "qwen2.5-coder-1.5b" => ModelConfig {
            hidden_size: 1536,
            intermediate_size: 8960,
            num_layers: 28,
            num_heads: 12,
            num_kv_heads: 2,
            ..qwen("Qwen2.5-Coder-1.5B")
        },
        "smollm2-1.7b" => ModelConfig {
            hidden_size: 2048,
            intermediate_size: 8192,
            num_layers: 24,
            num_heads: 32,
            num_kv_heads: 32,
            rope_theta: 130_000.0,
            ..llama("SmolLM2-1.7B")
        },
        "qwen2.5-coder-3b" => ModelConfig {
            hidden_size: 2048,
            intermediate_size: 11_008,
            num_layers: 36,
            num_heads: 16,
            num_kv_heads: 2,
            ..qwen("Qwen2.5-Coder-3B")
        },
        "qwen2.5-coder-7b" => ModelConfig {
            vocab_size: 152_064,
            hidden_size: 3584,
            intermediate_size: 18_944,
            num_layers: 28,
            num_heads: 28,
            num_kv_heads: 4,
            tie_embeddings: false,
            ..qwen("Qwen2.5-Coder-7B")
        },
        "llama-3.1-8b" => ModelConfig {
            hidden_size: 4096,
            intermediate_size: 14_336,
            num_layers: 32,
            num_heads: 32,
            num_kv_heads: 8,
            head_dim: 128,
            rope_scaling: RopeScaling::Llama3 { factor: 8.0, low_freq_factor: 1.0, high_freq_factor: 4.0, original_max_position: 8192 },
            tie_embeddings: false,
            ..llama3("Llama-3.1-8B")
        },
        // Kog's released Laneformer-2B-it shape (2,320,069,632 parameters): 8 lanes, the
        // first 10 layers windowed to 512 positions. Its delay and head kind are this
        // preset's choice (the checkpoint's config.json says its own).
        "laneformer-2b" => ModelConfig {
            vocab_size: 32_000,
            hidden_size: 3072,
            intermediate_size: 12_288,
            num_layers: 15,
            num_heads: 32,
            num_kv_heads: 16,
            head_dim: 96,
            max_context: 4096,
            rope_theta: 10_000.0,
            rope_layout: RopeLayout::Interleaved,
            tie_embeddings: false,
            sliding_window: SlidingWindow { size: 512, layers: (0..15).map(|l| l < 10).collect() },
            lanes: LaneConfig { count: 8, delay: 1, ..LaneConfig::default() },
            ..llama("Laneformer-2B")
        },
        _ => return None,
    })
}

/// Small models of the shapes the kernels special-case, for the GPU checks: interleaved RoPE with Llama-3
/// scaling (GQA, head_dim 64), Qwen2 with q/k/v bias and head_dim 128, MHA at head_dim 96.
pub fn check_shapes() -> Vec<ModelConfig> {
    let base = preset("smollm2-135m").expect("preset");
    vec![
        ModelConfig {
            name: "tiny-llama3-interleaved".into(),
            vocab_size: 3000,
            hidden_size: 384,
            intermediate_size: 1024,
            num_layers: 3,
            num_heads: 6,
            num_kv_heads: 2,
            head_dim: 64,
            max_context: 4096,
            rope_theta: 500_000.0,
            rope_scaling: RopeScaling::Llama3 { factor: 8.0, low_freq_factor: 1.0, high_freq_factor: 4.0, original_max_position: 256 },
            rope_layout: RopeLayout::Interleaved,
            tie_embeddings: false,
            ..base.clone()
        },
        ModelConfig {
            name: "tiny-qwen-bias-hd128".into(),
            architecture: Architecture::Qwen2,
            vocab_size: 5000,
            hidden_size: 512,
            intermediate_size: 1376,
            num_layers: 4,
            num_heads: 4,
            num_kv_heads: 2,
            head_dim: 128,
            rms_norm_eps: 1e-6,
            rope_theta: 1_000_000.0,
            attention_bias: true,
            tie_embeddings: false,
            ..base.clone()
        },
        ModelConfig {
            name: "tiny-mha-hd96".into(),
            vocab_size: 2503,
            hidden_size: 384,
            intermediate_size: 1000,
            num_layers: 2,
            num_heads: 4,
            num_kv_heads: 4,
            head_dim: 96,
            ..base
        },
    ]
}
