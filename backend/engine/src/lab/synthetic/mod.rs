//! Synthetic models: any supported shape with seeded random F32 weights, built in
//! memory (benchmarks and tests without a checkpoint). Linear weights are uniform
//! with std 1/sqrt(fan_in) (activations keep their scale, like PyTorch's default
//! init up to a constant); norms are near 1, biases near 0. `quantized` builds the
//! same models with matrices in GGUF block types.

mod presets;
mod quantized;

use std::sync::Arc;

pub use presets::{check_shapes, ordinary, preset, LANEFORMER_PRESETS, PRESET_NAMES, SMALL_PRESETS};
pub use quantized::{q4_k_m_type, random_quant_tensor, synthetic_quant_weights, QuantMix, MIX_NAMES};

use crate::config::ModelConfig;
use crate::lab::rng::SplitMix64;
use crate::tensor::{DType, Storage, Tensor};
use crate::weights::{LayerRole, LayerWeights, WeightRole, Weights};

/// Half-width of the uniform noise around 1.0 in RMSNorm weights.
pub const DEFAULT_NORM_JITTER: f32 = 0.1;
/// Half-width of the uniform q/k/v biases.
pub const DEFAULT_BIAS_SCALE: f32 = 0.02;

/// [`synthetic_weights`], or with `mix` random quantized blocks of that mix
/// ([`synthetic_quant_weights`]): what a `--weights` name builds.
pub fn synthetic_mix_weights(config: &ModelConfig, seed: u64, mix: Option<QuantMix>) -> Weights {
    match mix {
        None => synthetic_weights(config, seed),
        Some(m) => synthetic_quant_weights(config, seed, m),
    }
}

/// Weights of `config`'s shape, identical for equal `(config, seed)`.
pub fn synthetic_weights(config: &ModelConfig, seed: u64) -> Weights {
    build_weights(config, &|role| random_tensor(config, role, seed))
}

/// Every weight of `config`'s shape from `make`, layers built on all cores.
fn build_weights(config: &ModelConfig, make: &(dyn Fn(WeightRole) -> Tensor + Sync)) -> Weights {
    let layer = |i: usize| {
        let get = |r: LayerRole| make(WeightRole::Layer(i, r));
        let bias = |r: LayerRole| config.attention_bias.then(|| make(WeightRole::Layer(i, r)));
        LayerWeights {
            attn_norm: get(LayerRole::AttnNorm),
            q: get(LayerRole::Q),
            k: get(LayerRole::K),
            v: get(LayerRole::V),
            q_bias: bias(LayerRole::QBias),
            k_bias: bias(LayerRole::KBias),
            v_bias: bias(LayerRole::VBias),
            o: get(LayerRole::O),
            ffn_norm: get(LayerRole::FfnNorm),
            gate: get(LayerRole::Gate),
            up: get(LayerRole::Up),
            down: get(LayerRole::Down),
        }
    };
    // Each tensor has its own seed, so the split over threads does not change the values.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(config.num_layers.max(1));
    let mut layers: Vec<(usize, LayerWeights)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| s.spawn(move || (t..config.num_layers).step_by(threads).map(|i| (i, layer(i))).collect::<Vec<_>>()))
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    });
    layers.sort_by_key(|(i, _)| *i);
    Weights {
        embed: make(WeightRole::Embed),
        layers: layers.into_iter().map(|(_, l)| l).collect(),
        final_norm: make(WeightRole::FinalNorm),
        lm_head: (!config.tie_embeddings).then(|| make(WeightRole::LmHead)),
    }
}

/// A tensor's name and the generator seed it draws from, both from its role.
fn name_and_seed(role: WeightRole, seed: u64) -> (String, u64) {
    let (name, id) = match role {
        WeightRole::Embed => ("embed".to_string(), 0),
        WeightRole::FinalNorm => ("final_norm".to_string(), 1),
        WeightRole::LmHead => ("lm_head".to_string(), 2),
        WeightRole::Layer(i, r) => (format!("layers.{i}.{r:?}"), 16 + 16 * i as u64 + r as u64),
    };
    (name, seed ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// One tensor: its name, distribution and seed all follow from its role.
fn random_tensor(config: &ModelConfig, role: WeightRole, seed: u64) -> Tensor {
    let shape = role.expected_shape(config);
    let (name, tensor_seed) = name_and_seed(role, seed);
    let is_norm = matches!(role, WeightRole::FinalNorm | WeightRole::Layer(_, LayerRole::AttnNorm | LayerRole::FfnNorm));
    let is_bias = matches!(role, WeightRole::Layer(_, r) if r.is_bias());
    // Uniform on [-a, a] has std a/sqrt(3); embeddings use fan_in = hidden so tied logits stay O(1).
    let fan_in = *shape.last().unwrap_or(&1) as f32;
    let (center, half_width) = if is_norm {
        (1.0, DEFAULT_NORM_JITTER)
    } else if is_bias {
        (0.0, DEFAULT_BIAS_SCALE)
    } else {
        (0.0, (3.0 / fan_in.max(1.0)).sqrt())
    };
    let mut rng = SplitMix64(tensor_seed);
    let numel: usize = shape.iter().product();
    let mut bytes = Vec::with_capacity(numel * 4);
    for _ in 0..numel {
        bytes.extend_from_slice(&(center + half_width * rng.next_signed()).to_le_bytes());
    }
    Tensor { name, dtype: DType::F32, shape, storage: Storage::Owned(Arc::new(bytes)) }
}
