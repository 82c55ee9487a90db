//! Vector operations of the fast forward pass and the sampler (RMSNorm, SiLU·up,
//! maximum, softmax sums and weights), written once over 16-float lanes and compiled three
//! times: for AVX-512, for AVX2 and plain, chosen by [`Isa`] at run time. The
//! compiler vectorises the lane loops; `exp` is a polynomial so it vectorises too.

use crate::cpu::isa::Isa;

/// Floats per lane group (one 512-bit register).
pub(crate) const LANES: usize = 16;
/// log2(e).
const LOG2_E: f32 = std::f32::consts::LOG2_E;
/// ln 2 split Cody–Waite style: `n·LN2_HI` is exact for the exponents used, so the
/// reduced argument keeps full precision even for large |x|.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// Inputs below this make `exp` return ~0 (keeps the exponent bits in range).
const EXP_MIN: f32 = -87.0;
/// Inputs above this would overflow f32.
const EXP_MAX: f32 = 88.0;
/// 1.5·2²³: a float in [2²³, 2²⁴) has unit spacing, so adding this rounds to an integer.
const ROUND_SHIFT: f32 = 12_582_912.0;
/// Taylor coefficients 1/k! of e^r, k = 2..7, for |r| ≤ ln2/2 (error below 1e-8).
const EXP_COEFFS: [f32; 6] = [0.5, 1.0 / 6.0, 1.0 / 24.0, 1.0 / 120.0, 1.0 / 720.0, 1.0 / 5040.0];

/// Generates `pub fn $name(isa, args…)` that runs `$generic` compiled for the
/// instruction set `isa` names.
macro_rules! isa_variants {
    ($(#[$doc:meta])* pub fn $name:ident($($p:ident: $t:ty),*) $(-> $r:ty)? = $generic:ident;) => {
        $(#[$doc])*
        pub fn $name(isa: Isa, $($p: $t),*) $(-> $r)? {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
                fn wide($($p: $t),*) $(-> $r)? {
                    $generic($($p),*)
                }
                #[target_feature(enable = "avx2,fma,f16c")]
                fn narrow($($p: $t),*) $(-> $r)? {
                    $generic($($p),*)
                }
                match isa {
                    // SAFETY: callers take `isa` from `Isa::detect`, which only returns supported sets.
                    Isa::Avx512Vnni => return unsafe { wide($($p),*) },
                    // SAFETY: as above.
                    Isa::Avx2 => return unsafe { narrow($($p),*) },
                    Isa::Portable => {}
                }
            }
            #[cfg(not(target_arch = "x86_64"))]
            let _ = isa;
            $generic($($p),*)
        }
    };
}

isa_variants! {
    /// `out = x / sqrt(mean(x²) + eps) · w` (transformers' LlamaRMSNorm).
    pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) = rms_norm_generic;
}

isa_variants! {
    /// `out = silu(gate) · up`, SiLU(x) = x / (1 + e^-x).
    pub fn silu_mul(gate: &[f32], up: &[f32], out: &mut [f32]) = silu_mul_generic;
}

isa_variants! {
    /// The largest value of `x` (−∞ when empty; a NaN is skipped as by `f32::max`).
    pub fn max_value(x: &[f32]) -> f32 = max_generic;
}

isa_variants! {
    /// Σ e^(x − max) over `x`, summed in f64 (the log-softmax normaliser).
    pub fn sum_exp(x: &[f32], max: f32) -> f64 = sum_exp_generic;
}

isa_variants! {
    /// `out = e^((x − max) / temperature)` element by element; returns Σ out in f64
    /// (a sampling draw's weights and their total).
    pub fn exp_weights(x: &[f32], max: f32, temperature: f32, out: &mut [f32]) -> f64 = exp_weights_generic;
}

#[inline(always)]
pub(crate) fn sum_lanes(acc: [f32; LANES]) -> f32 {
    // Pairwise, as a vector reduction would.
    let mut v = acc;
    let mut w = LANES / 2;
    while w > 0 {
        for i in 0..w {
            v[i] += v[i + w];
        }
        w /= 2;
    }
    v[0]
}

#[inline(always)]
fn dot_generic(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    let (ac, bc) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f32 = ac.remainder().iter().zip(bc.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ac.zip(bc) {
        for i in 0..LANES {
            acc[i] += x[i] * y[i];
        }
    }
    sum_lanes(acc) + tail
}

/// The maximum of `x` (−∞ for none), for code compiled per instruction set.
#[inline(always)]
pub(crate) fn max_generic(x: &[f32]) -> f32 {
    // Per-lane maxima vectorise; a single running max would not.
    let mut acc = [f32::NEG_INFINITY; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks.remainder().iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for c in chunks {
        for l in 0..LANES {
            acc[l] = acc[l].max(c[l]);
        }
    }
    acc.into_iter().fold(tail, f32::max)
}

#[inline(always)]
fn sum_exp_generic(x: &[f32], max: f32) -> f64 {
    let mut acc = [0.0f64; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail: f64 = chunks.remainder().iter().map(|&v| f64::from(exp_fast(v - max))).sum();
    for c in chunks {
        for l in 0..LANES {
            acc[l] += f64::from(exp_fast(c[l] - max));
        }
    }
    acc.iter().sum::<f64>() + tail
}

#[inline(always)]
fn exp_weights_generic(x: &[f32], max: f32, temperature: f32, out: &mut [f32]) -> f64 {
    let whole = x.len() / LANES * LANES;
    let mut acc = [0.0f64; LANES];
    for (c, o) in x[..whole].chunks_exact(LANES).zip(out[..whole].chunks_exact_mut(LANES)) {
        for l in 0..LANES {
            o[l] = exp_fast((c[l] - max) / temperature);
            acc[l] += f64::from(o[l]);
        }
    }
    let mut tail = 0.0f64;
    for (&v, o) in x[whole..].iter().zip(&mut out[whole..]) {
        *o = exp_fast((v - max) / temperature);
        tail += f64::from(*o);
    }
    acc.iter().sum::<f64>() + tail
}

#[inline(always)]
fn rms_norm_generic(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let ms = dot_generic(x, x) / x.len() as f32;
    let scale = 1.0 / (ms + eps).sqrt();
    for ((o, &v), &g) in out.iter_mut().zip(x).zip(w) {
        *o = v * scale * g;
    }
}

/// e^x to a few ulp, vectorisable (no libm call): e^x = 2^n · e^r.
#[inline(always)]
pub fn exp_fast(x: f32) -> f32 {
    let x = x.clamp(EXP_MIN, EXP_MAX);
    // Adding 1.5·2²³ rounds x·log₂e to an integer, ties to even, and leaves it in the
    // low mantissa bits: n as a float and as an integer without a float → int
    // conversion (Rust's saturating `as` does not vectorise).
    let shifted = x * LOG2_E + ROUND_SHIFT;
    let n = shifted - ROUND_SHIFT;
    let n_int = shifted.to_bits().wrapping_sub(ROUND_SHIFT.to_bits());
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = EXP_COEFFS[5];
    for &c in EXP_COEFFS[..5].iter().rev() {
        p = p * r + c;
    }
    p = (p * r + 1.0) * r + 1.0;
    // 2^n through the exponent bits; n ∈ [-126, 127] by the clamp.
    p * f32::from_bits(n_int.wrapping_add(127) << 23)
}

#[inline(always)]
fn silu_mul_generic(gate: &[f32], up: &[f32], out: &mut [f32]) {
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = g / (1.0 + exp_fast(-g)) * u;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_fast_is_close_to_exp() {
        let mut worst = 0.0f32;
        for i in -8000..8000 {
            let x = i as f32 * 0.01;
            let rel = ((exp_fast(x) - x.exp()) / x.exp()).abs();
            worst = worst.max(rel);
        }
        assert!(worst < 1e-6, "worst relative error {worst}");
        assert!(exp_fast(-1e9) < 1e-37 && exp_fast(-f32::INFINITY) < 1e-37);
    }

    #[test]
    fn exp_fast_rounds_its_exponent_as_round_ties_even_does() {
        // The shifted-add rounding against `round_ties_even` and a saturating cast, over
        // the whole clamped range at the steps where x·log₂e crosses halves (ties).
        let plain = |x: f32| {
            let x = x.clamp(EXP_MIN, EXP_MAX);
            let n = (x * LOG2_E).round_ties_even();
            let r = x - n * LN2_HI - n * LN2_LO;
            let mut p = EXP_COEFFS[5];
            for &c in EXP_COEFFS[..5].iter().rev() {
                p = p * r + c;
            }
            p = (p * r + 1.0) * r + 1.0;
            p * f32::from_bits(((n as i32 + 127) as u32) << 23)
        };
        let ties = (-260..260).map(|k| (k as f32 + 0.5) / LOG2_E);
        let grid = (-100_000..100_000).map(|i| i as f32 * 0.001);
        for x in ties.chain(grid).chain([-1e9, 1e9, f32::NEG_INFINITY, -0.0]) {
            assert_eq!(exp_fast(x).to_bits(), plain(x).to_bits(), "{x}");
        }
    }

    #[test]
    fn max_and_sum_exp_match_plain_loops() {
        // A vocabulary-sized row whose length is not a multiple of the lanes.
        let x: Vec<f32> = (0..49_157).map(|i| ((i * 7919 % 10_007) as f32 - 5_000.0) * 3e-3).collect();
        let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f64 = x.iter().map(|&v| f64::from(v - max).exp()).sum();
        for isa in [Isa::Portable].into_iter().chain(Isa::available()) {
            assert_eq!(max_value(isa, &x), max, "{isa:?}");
            let got = sum_exp(isa, &x, max);
            assert!(((got - sum) / sum).abs() < 1e-6, "{isa:?}: {got} vs {sum}");
        }
        assert_eq!(max_value(Isa::Portable, &[]), f32::NEG_INFINITY);
    }

    #[test]
    fn every_isa_agrees_closely() {
        let x: Vec<f32> = (0..96).map(|i| ((i * 37 % 17) as f32 - 8.0) * 0.3).collect();
        let w: Vec<f32> = (0..96).map(|i| 1.0 + (i % 5) as f32 * 0.01).collect();
        let mut base = vec![0.0; 96];
        rms_norm(Isa::Portable, &x, &w, 1e-5, &mut base);
        for isa in Isa::available() {
            let mut out = vec![0.0; 96];
            rms_norm(isa, &x, &w, 1e-5, &mut out);
            for (a, b) in out.iter().zip(&base) {
                assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0));
            }
        }
    }
}
