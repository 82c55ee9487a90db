//! Rotary position embedding tables and application (matches transformers'
//! `LlamaRotaryEmbedding` / `apply_rotary_pos_emb`, incl. "llama3" rope_scaling).

use crate::config::{ModelConfig, RopeLayout, RopeScaling};

/// Inverse frequencies of one head, `head_dim / 2` entries, scaled as configured.
pub fn inv_freq(config: &ModelConfig) -> Vec<f32> {
    let half = config.head_dim / 2;
    let base: Vec<f32> = (0..half).map(|i| 1.0 / config.rope_theta.powf((2 * i) as f32 / config.head_dim as f32)).collect();
    match config.rope_scaling {
        RopeScaling::None => base,
        RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position } => {
            let old = original_max_position as f32;
            let low_wavelen = old / low_freq_factor;
            let high_wavelen = old / high_freq_factor;
            base.into_iter()
                .map(|f| {
                    let wavelen = 2.0 * std::f32::consts::PI / f;
                    if wavelen < high_wavelen {
                        f
                    } else if wavelen > low_wavelen {
                        f / factor
                    } else {
                        let smooth = (old / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
                        (1.0 - smooth) * f / factor + smooth * f
                    }
                })
                .collect()
        }
    }
}

/// Rotates every head in `x` (`heads × head_dim`, contiguous) for position `pos`.
pub fn apply(x: &mut [f32], head_dim: usize, pos: usize, inv_freq: &[f32], layout: RopeLayout) {
    let half = head_dim / 2;
    for head in x.chunks_exact_mut(head_dim) {
        for (i, &f) in inv_freq.iter().enumerate() {
            // f32 product like transformers, so tests match it to ~1e-6.
            let angle = pos as f32 * f;
            let (sin, cos) = angle.sin_cos();
            let (a, b) = match layout {
                RopeLayout::HalfSplit => (i, i + half),
                RopeLayout::Interleaved => (2 * i, 2 * i + 1),
            };
            let (x0, x1) = (head[a], head[b]);
            head[a] = x0 * cos - x1 * sin;
            head[b] = x1 * cos + x0 * sin;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_zero_is_identity_and_norm_is_kept() {
        let f: Vec<f32> = (0..4).map(|i| 1.0 / 10000f32.powf(i as f32 / 4.0)).collect();
        let orig: Vec<f32> = (0..8).map(|i| i as f32 - 3.5).collect();
        for layout in [RopeLayout::HalfSplit, RopeLayout::Interleaved] {
            let mut x = orig.clone();
            apply(&mut x, 8, 0, &f, layout);
            assert_eq!(x, orig);
            apply(&mut x, 8, 17, &f, layout);
            let n0: f32 = orig.iter().map(|v| v * v).sum();
            let n1: f32 = x.iter().map(|v| v * v).sum();
            assert!((n0 - n1).abs() < 1e-3);
        }
    }
}

/// RoPE's sin and cos of positions `start..start + n`, `inv_freq.len()` per position.
pub(crate) fn rope_tables(inv_freq: &[f32], start: usize, n: usize, sin: &mut [f32], cos: &mut [f32]) {
    let positions: Vec<usize> = (start..start + n).collect();
    rope_tables_at(inv_freq, &positions, sin, cos);
}

/// RoPE's sin and cos of each of `positions`, `inv_freq.len()` per position.
pub(crate) fn rope_tables_at(inv_freq: &[f32], positions: &[usize], sin: &mut [f32], cos: &mut [f32]) {
    let half = inv_freq.len();
    for (t, &p) in positions.iter().enumerate() {
        for (i, &f) in inv_freq.iter().enumerate() {
            // f32 product then sin_cos, as rope::apply, so rotations match the reference.
            (sin[t * half + i], cos[t * half + i]) = (p as f32 * f).sin_cos();
        }
    }
}

/// Rotates one head by the position's table (same arithmetic as [`apply`]).
pub(crate) fn rotate(head: &mut [f32], cos: &[f32], sin: &[f32], layout: RopeLayout) {
    let half = head.len() / 2;
    match layout {
        RopeLayout::HalfSplit => {
            let (a, b) = head.split_at_mut(half);
            for i in 0..half {
                let (x0, x1) = (a[i], b[i]);
                a[i] = x0 * cos[i] - x1 * sin[i];
                b[i] = x1 * cos[i] + x0 * sin[i];
            }
        }
        RopeLayout::Interleaved => {
            for (i, pair) in head.chunks_exact_mut(2).enumerate() {
                let (x0, x1) = (pair[0], pair[1]);
                pair[0] = x0 * cos[i] - x1 * sin[i];
                pair[1] = x1 * cos[i] + x0 * sin[i];
            }
        }
    }
}
