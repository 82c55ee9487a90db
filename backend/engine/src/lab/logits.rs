//! Comparisons of logit rows, shared by the GPU tests, `gpu_check` and
//! `peregrine-bench`: two relative errors (each check keeps the one its tolerance was
//! set for), the top-1 token, and the near-tie rule that decides whether a different
//! greedy pick is explained by the measured logit difference.

use crate::sampling::top_k_indices;

/// ‖got − want‖₂ / ‖want‖₂ in float64; infinite when the lengths differ or `got` holds
/// a non-finite value (a NaN must fail every bound, not slip past a comparison).
pub fn rel_err(got: &[f32], want: &[f32]) -> f64 {
    if got.len() != want.len() || got.iter().any(|v| !v.is_finite()) {
        return f64::INFINITY;
    }
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (&g, &w) in got.iter().zip(want) {
        num += (g as f64 - w as f64).powi(2);
        den += (w as f64).powi(2);
    }
    (num / den.max(1e-30)).sqrt()
}

/// max |got − want| / max |want|: the worst single logit against the row's scale;
/// infinite when the lengths differ.
pub fn rel_err_max(got: &[f32], want: &[f32]) -> f64 {
    if got.len() != want.len() {
        return f64::INFINITY;
    }
    let scale = want.iter().map(|b| b.abs()).fold(0.0f32, f32::max).max(1e-6) as f64;
    max_abs_diff(got, want) as f64 / scale
}

/// max |a − b| over two rows.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max)
}

/// The index of the largest logit, the lowest on ties (as the sampler's greedy pick);
/// 0 for an empty row.
pub fn argmax(row: &[f32]) -> u32 {
    top_k_indices(row, 1).first().map_or(0, |t| t.0)
}

/// How a pick compares with a reference row: the reference's own top-1, its margin
/// over the pick, and the largest logit difference between the two rows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NearTie {
    pub best: u32,
    pub margin: f32,
    pub max_diff: f32,
}

impl NearTie {
    /// `picked`, chosen from `other`, against `reference` (the same position's logits).
    pub fn of(reference: &[f32], other: &[f32], picked: u32) -> NearTie {
        let best = argmax(reference);
        let at = |id: u32| reference.get(id as usize).copied();
        let margin = at(best).unwrap_or(0.0) - at(picked).unwrap_or(f32::NEG_INFINITY);
        NearTie { best, margin, max_diff: max_abs_diff(reference, other) }
    }

    /// The reference's margin is within twice the logit difference: a difference that
    /// small can flip the order of the two tokens (random-weight logits are flat, and
    /// bf16 flips close calls).
    pub fn explained(&self) -> bool {
        self.margin <= 2.0 * self.max_diff
    }
}

/// Whether `picked` is `reference`'s top-1, or a near-tie the difference between
/// `reference` and `other` (the row it was picked from) explains.
pub fn top1_or_near_tie(reference: &[f32], other: &[f32], picked: u32) -> bool {
    let t = NearTie::of(reference, other, picked);
    t.best == picked || t.explained()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_errors_are_relative_and_reject_nan_and_length() {
        assert_eq!(rel_err(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
        assert!((rel_err(&[1.1, 0.0], &[1.0, 0.0]) - 0.1).abs() < 1e-6);
        assert!(rel_err(&[f32::NAN, 0.0], &[1.0, 0.0]).is_infinite());
        assert!(rel_err(&[1.0], &[1.0, 2.0]).is_infinite());
        assert!((rel_err_max(&[1.0, 2.5], &[1.0, 2.0]) - 0.25).abs() < 1e-6);
        assert!(rel_err_max(&[1.0], &[1.0, 2.0]).is_infinite());
    }

    #[test]
    fn argmax_takes_the_lowest_index_of_a_tie() {
        assert_eq!(argmax(&[0.0, 3.0, 3.0, 1.0]), 1);
        assert_eq!(argmax(&[]), 0);
    }

    #[test]
    fn a_near_tie_is_explained_only_by_a_large_enough_difference() {
        let reference = [1.0, 3.0, 2.99];
        assert!(top1_or_near_tie(&reference, &reference, 1));
        assert!(top1_or_near_tie(&reference, &[1.0, 2.98, 3.0], 2));
        assert!(!top1_or_near_tie(&reference, &reference, 2));
        assert!(!top1_or_near_tie(&reference, &[1.0, 2.98, 3.0], 0));
    }
}
