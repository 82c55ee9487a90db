//! Recovers Llama 3.x "llama3" RoPE scaling from the `rope_freqs.weight` tensor
//! that llama.cpp's converter writes instead of metadata keys (see
//! `LlamaModel.generate_extra_tensors` in convert_hf_to_gguf.py).

use crate::config::RopeScaling;

/// The converter's `original_max_position_embeddings` when the HF config has none.
pub const DEFAULT_LLAMA3_ORIGINAL_CONTEXT: usize = 8192;
/// `low_freq_factor` every released Llama 3.x model uses.
pub const DEFAULT_LLAMA3_LOW_FREQ_FACTOR: f32 = 1.0;
/// `high_freq_factor` every released Llama 3.x model uses.
pub const DEFAULT_LLAMA3_HIGH_FREQ_FACTOR: f32 = 4.0;
/// Relative tolerance when matching stored factors to recomputed ones.
const FACTOR_TOLERANCE: f64 = 1e-3;

/// The per-frequency divisors the converter computes for `scaling`.
pub fn llama3_factors(scaling: &RopeScaling, theta: f32, head_dim: usize) -> Vec<f64> {
    let RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position } = *scaling else {
        return vec![1.0; head_dim / 2];
    };
    let (factor, low, high, orig) = (factor as f64, low_freq_factor as f64, high_freq_factor as f64, original_max_position as f64);
    (0..head_dim / 2)
        .map(|i| {
            let freq = 1.0 / (theta as f64).powf((2 * i) as f64 / head_dim as f64);
            let wavelen = 2.0 * std::f64::consts::PI / freq;
            if wavelen < orig / high {
                1.0
            } else if wavelen > orig / low {
                factor
            } else {
                let smooth = (orig / wavelen - low) / (high - low);
                1.0 / ((1.0 - smooth) / factor + smooth)
            }
        })
        .collect()
}

/// The llama3 parameters that reproduce `factors` (all ones: no scaling).
pub fn llama3_from_factors(
    factors: &[f32],
    theta: f32,
    head_dim: usize,
    original_context: Option<u64>,
) -> std::result::Result<RopeScaling, String> {
    if factors.len() != head_dim / 2 {
        return Err(format!("{} factors for head_dim {head_dim} (expected {})", factors.len(), head_dim / 2));
    }
    if factors.iter().all(|&f| f == 1.0) {
        return Ok(RopeScaling::None);
    }
    let factor = factors.iter().copied().fold(f32::MIN, f32::max);
    let mut contexts = vec![DEFAULT_LLAMA3_ORIGINAL_CONTEXT];
    if let Some(c) = original_context.and_then(|c| usize::try_from(c).ok()) {
        contexts.insert(0, c);
    }
    for original_max_position in contexts {
        let candidate = RopeScaling::Llama3 {
            factor,
            low_freq_factor: DEFAULT_LLAMA3_LOW_FREQ_FACTOR,
            high_freq_factor: DEFAULT_LLAMA3_HIGH_FREQ_FACTOR,
            original_max_position,
        };
        let expected = llama3_factors(&candidate, theta, head_dim);
        let matches = expected.iter().zip(factors).all(|(e, &f)| (e - f as f64).abs() <= FACTOR_TOLERANCE * e.abs());
        if matches {
            return Ok(candidate);
        }
    }
    Err("frequency factors do not match llama3 rope scaling (low 1, high 4); this scaling is not supported".into())
}
