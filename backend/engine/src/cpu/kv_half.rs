//! f16 storage of the fast runtime's KV cache: f32 → f16 when a key or value is
//! written (the `half` crate's slice conversion: F16C where the CPU has it, the same
//! round-to-nearest-even otherwise), f16 → f32 16 at a time when attention reads it,
//! inlined into attention's code for each instruction set.

/// f16 → f32 of 16 consecutive halves, for code compiled per instruction set.
pub(crate) trait Widen {
    /// # Safety
    /// `src` has at least 16 elements and the CPU has what the implementation needs
    /// ([`F16c`]: F16C and AVX).
    unsafe fn widen(src: &[u16]) -> [f32; 16];
}

/// Widening by F16C.
pub(crate) struct F16c;

/// Widening one half at a time (any CPU).
pub(crate) struct Soft;

impl Widen for Soft {
    #[inline(always)]
    unsafe fn widen(src: &[u16]) -> [f32; 16] {
        std::array::from_fn(|i| half::f16::from_bits(src[i]).to_f32())
    }
}

#[cfg(target_arch = "x86_64")]
impl Widen for F16c {
    #[inline]
    #[target_feature(enable = "avx,f16c")]
    unsafe fn widen(src: &[u16]) -> [f32; 16] {
        use std::arch::x86_64::{__m256, _mm256_cvtph_ps, _mm_loadu_si128};
        debug_assert!(src.len() >= 16);
        // SAFETY: 16 elements readable (caller), unaligned loads.
        let (lo, hi) = unsafe { (_mm_loadu_si128(src.as_ptr().cast()), _mm_loadu_si128(src.as_ptr().add(8).cast())) };
        // SAFETY: two vectors of 8 f32 are 16 f32.
        unsafe { std::mem::transmute::<[__m256; 2], [f32; 16]>([_mm256_cvtph_ps(lo), _mm256_cvtph_ps(hi)]) }
    }
}

#[cfg(not(target_arch = "x86_64"))]
impl Widen for F16c {
    #[inline(always)]
    unsafe fn widen(src: &[u16]) -> [f32; 16] {
        // SAFETY: as the caller's.
        unsafe { Soft::widen(src) }
    }
}

/// `dst[i] = f16(src[i])`, rounded to nearest even (`dst` at least as long as `src`).
pub fn narrow(src: &[f32], dst: &mut [u16]) {
    use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
    dst[..src.len()].reinterpret_cast_mut::<half::f16>().convert_from_f32_slice(src);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Normal, subnormal, tie, overflowing and signed values.
    fn awkward() -> Vec<f32> {
        let mut x: Vec<f32> = (0..2000).map(|i| ((i * 7919 % 4001) as f32 - 2000.0) * 0.173).collect();
        x.extend([0.0, -0.0, 1e-7, -3e-6, 6.1e-5, 65504.0, 7e4, -1e9, 1.0 + 1.0 / 2048.0, 1.0 + 3.0 / 2048.0, 0.1, 1e-3]);
        x
    }

    #[test]
    fn slices_store_the_bits_of_single_conversions() {
        let x = awkward();
        let mut base = vec![0u16; x.len()];
        narrow(&x, &mut base);
        for (&b, &v) in base.iter().zip(&x) {
            assert_eq!(b, half::f16::from_f32(v).to_bits(), "{v}");
        }
        // Round to nearest even: 1 + 1/2048 is a tie between 1 and 1 + 1/1024.
        assert_eq!(half::f16::from_bits(base[2000 + 8]).to_f32(), 1.0);
        assert_eq!(half::f16::from_bits(base[2000 + 9]).to_f32(), 1.0 + 2.0 / 1024.0);
    }

    #[test]
    fn widening_inverts_narrowing_on_every_isa() {
        let x = awkward();
        let mut h = vec![0u16; x.len().next_multiple_of(16)];
        narrow(&x, &mut h);
        for chunk in h.chunks_exact(16) {
            // SAFETY: 16 elements; F16C checked before use.
            let soft = unsafe { Soft::widen(chunk) };
            for (s, &b) in soft.iter().zip(chunk) {
                assert_eq!(s.to_bits(), half::f16::from_bits(b).to_f32().to_bits());
            }
            #[cfg(target_arch = "x86_64")]
            if is_x86_feature_detected!("f16c") && is_x86_feature_detected!("avx") {
                // SAFETY: as above.
                assert_eq!(unsafe { F16c::widen(chunk) }.map(f32::to_bits), soft.map(f32::to_bits));
            }
        }
    }
}
