//! AVX2 kernels for CPUs without AVX-512 VNNI: the same panels, handled as two
//! 8-row halves. Integer dots use `vpmaddubsw` + `vpmaddwd` (llama.cpp's
//! `mul_sum_us8_pairs_float`); 8-bit codes go through the sign trick
//! (`|s| · sign(a, s)` with `s = c − 128`) so `vpmaddubsw` cannot saturate, and
//! `128 · Σa` is added back, giving exactly the integer dot of the other kernels.

use std::arch::x86_64::*;
use std::ops::Range;

use super::{FKind, QKind, FLOAT_CHAINS, MAX_TILE};
use crate::cpu::act_quant::{TokenActs, HI_SHIFT, QBLOCK};
use crate::cpu::packed::{Codes, FloatType, PackedMatrix, ScaleType, GROUP_ROWS, VECTOR_BYTES};

/// Rows per 256-bit register.
const HALF_ROWS: usize = GROUP_ROWS / 2;
/// Offset between 8-bit codes and their signed values.
const BYTE_BIAS: i32 = 128;
/// Most nibble code vectors per sub-block whose `vpmaddubsw` pair sums can be added in
/// i16: a pair is at most 2 · 15 · 128 = 3,840 in magnitude (codes ≤ 15, activation
/// bytes ∈ [−128, 127]), and 8 of them (30,720) stay below 32,767.
const NIBBLE_I16_VECTORS: usize = 8;

/// See [`super::matmul`].
///
/// # Safety
/// As [`super::matmul`], and the CPU has AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn quant_matmul<K: QKind, const DUAL: bool>(w: &PackedMatrix, groups: Range<usize>, acts: &[TokenActs], out: &[*mut f32]) {
    let steps = w.steps();
    for g in groups {
        let panel = w.panel(g);
        for (a, o) in acts.chunks(MAX_TILE).zip(out.chunks(MAX_TILE)) {
            let row0 = g * GROUP_ROWS;
            // SAFETY: forwarded contract; the tile size matches the slice lengths.
            unsafe {
                match a.len() {
                    4 => quant_tile::<K, 4, DUAL>(panel, steps, a, o, row0),
                    3 => quant_tile::<K, 3, DUAL>(panel, steps, a, o, row0),
                    2 => quant_tile::<K, 2, DUAL>(panel, steps, a, o, row0),
                    _ => quant_tile::<K, 1, DUAL>(panel, steps, a, o, row0),
                }
            }
        }
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn quant_tile<K: QKind, const TT: usize, const DUAL: bool>(
    panel: *const u8,
    steps: usize,
    acts: &[TokenActs],
    out: &[*mut f32],
    row0: usize,
) {
    let q = K::FMT;
    let nv = q.vectors();
    // SAFETY: as the AVX-512 tile: the panel has `steps` chunks, each token `steps·sub`
    // codes and `steps` block entries, each output row room for row0 + 16 floats.
    unsafe {
        let mask = _mm256_set1_epi8(0x0F);
        let bias = _mm256_set1_epi8(BYTE_BIAS as u8 as i8);
        let ones = _mm256_set1_epi16(1);
        let mut acc_d = [[_mm256_setzero_ps(); 2]; TT];
        let mut acc_m = [[_mm256_setzero_ps(); 2]; TT];
        for st in 0..steps {
            let p = panel.add(st * q.chunk_bytes());
            let sp = p.add(q.code_bytes());
            let e0 = st * q.sub;
            for h in 0..2 {
                let mut isum = [[_mm256_setzero_si256(); 2]; TT];
                let planes = |t: usize| if DUAL { [acts[t].hi, acts[t].lo] } else { [acts[t].hi, std::ptr::null()] };
                let np = if DUAL { 2 } else { 1 };
                if q.codes == Codes::Nibble && nv <= NIBBLE_I16_VECTORS {
                    // Each byte vector holds two code vectors (low nibbles: k = v, high:
                    // k = v + nv/2). Their pair sums add up in i16 without overflow (see
                    // NIBBLE_I16_VECTORS), so one vpmaddwd per sub-block instead of one
                    // per code vector: the same integer dot, fewer instructions.
                    let mut s16 = [[_mm256_setzero_si256(); 2]; TT];
                    for v in 0..nv / 2 {
                        let x = load_half(p, v, h);
                        let (lo, hi) = (_mm256_and_si256(x, mask), _mm256_and_si256(_mm256_srli_epi16::<4>(x), mask));
                        for (t, sums) in s16.iter_mut().enumerate() {
                            for (sum, base) in sums.iter_mut().zip(planes(t)).take(np) {
                                let a_lo = _mm256_set1_epi32(base.add(e0 + 4 * v).cast::<i32>().read_unaligned());
                                let a_hi = _mm256_set1_epi32(base.add(e0 + 4 * (v + nv / 2)).cast::<i32>().read_unaligned());
                                let pairs = _mm256_add_epi16(_mm256_maddubs_epi16(lo, a_lo), _mm256_maddubs_epi16(hi, a_hi));
                                *sum = _mm256_add_epi16(*sum, pairs);
                            }
                        }
                    }
                    for (sums, s16) in isum.iter_mut().zip(&s16) {
                        for (sum, s) in sums.iter_mut().zip(s16).take(np) {
                            *sum = _mm256_madd_epi16(*s, ones);
                        }
                    }
                } else {
                    for k in 0..nv {
                        for (t, sums) in isum.iter_mut().enumerate() {
                            for (sum, base) in sums.iter_mut().zip(planes(t)).take(np) {
                                let a = _mm256_set1_epi32(base.add(e0 + 4 * k).cast::<i32>().read_unaligned());
                                let pairs = match q.codes {
                                    Codes::Nibble if k < nv / 2 => _mm256_maddubs_epi16(_mm256_and_si256(load_half(p, k, h), mask), a),
                                    Codes::Nibble => {
                                        _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16::<4>(load_half(p, k - nv / 2, h)), mask), a)
                                    }
                                    Codes::Byte => {
                                        let s = _mm256_xor_si256(load_half(p, k, h), bias);
                                        _mm256_maddubs_epi16(_mm256_abs_epi8(s), _mm256_sign_epi8(a, s))
                                    }
                                };
                                *sum = _mm256_add_epi32(*sum, _mm256_madd_epi16(pairs, ones));
                            }
                        }
                    }
                }
                let dv = match q.scale {
                    ScaleType::F16 => _mm256_cvtph_ps(_mm_loadu_si128(sp.add(h * HALF_ROWS * 2).cast())),
                    ScaleType::F32 => _mm256_loadu_ps(sp.add(h * HALF_ROWS * 4).cast()),
                };
                let mv = match (q.m_from_d, q.scale) {
                    (Some(c), _) => _mm256_mul_ps(dv, _mm256_set1_ps(c)),
                    (None, ScaleType::F16) => _mm256_cvtph_ps(_mm_loadu_si128(sp.add(GROUP_ROWS * 2 + h * HALF_ROWS * 2).cast())),
                    (None, ScaleType::F32) => _mm256_loadu_ps(sp.add(GROUP_ROWS * 4 + h * HALF_ROWS * 4).cast()),
                };
                for t in 0..TT {
                    let a = &acts[t];
                    let mut isum =
                        if DUAL { _mm256_add_epi32(_mm256_slli_epi32::<{ HI_SHIFT as i32 }>(isum[t][0]), isum[t][1]) } else { isum[t][0] };
                    if q.codes == Codes::Byte {
                        let asum = if q.sub == QBLOCK { *a.isum16.add(2 * st) + *a.isum16.add(2 * st + 1) } else { *a.isum16.add(st) };
                        isum = _mm256_add_epi32(isum, _mm256_set1_epi32(BYTE_BIAS * asum));
                    }
                    let da = *a.d.add(e0 / QBLOCK);
                    let sa = if q.sub == QBLOCK { *a.s32.add(st) } else { *a.s16.add(st) };
                    acc_d[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dv, _mm256_set1_ps(da)), acc_d[t][h]);
                    acc_m[t][h] = _mm256_fmadd_ps(mv, _mm256_set1_ps(sa), acc_m[t][h]);
                }
            }
        }
        for t in 0..TT {
            for h in 0..2 {
                _mm256_storeu_ps(out[t].add(row0 + h * HALF_ROWS), _mm256_add_ps(acc_d[t][h], acc_m[t][h]));
            }
        }
    }
}

/// Rows `8h..8h+8` of code vector `v` of a chunk.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_half(chunk: *const u8, v: usize, h: usize) -> __m256i {
    // SAFETY: v < vectors() and h < 2 (callers), so 32 bytes lie inside the chunk.
    unsafe { _mm256_loadu_si256(chunk.add(v * VECTOR_BYTES + h * HALF_ROWS * 4).cast()) }
}

/// See [`super::matmul`].
///
/// # Safety
/// As [`super::matmul`], and the CPU has AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn float_matmul<K: FKind>(w: &PackedMatrix, groups: Range<usize>, x: &[*const f32], out: &[*mut f32]) {
    for g in groups {
        let panel = w.panel(g);
        for (a, o) in x.chunks(MAX_TILE).zip(out.chunks(MAX_TILE)) {
            let row0 = g * GROUP_ROWS;
            for h in 0..2 {
                // SAFETY: forwarded contract; the tile size matches the slice lengths.
                unsafe {
                    match a.len() {
                        4 => float_tile::<K, 4>(panel, w.cols, a, o, row0, h),
                        3 => float_tile::<K, 3>(panel, w.cols, a, o, row0, h),
                        2 => float_tile::<K, 2>(panel, w.cols, a, o, row0, h),
                        _ => float_tile::<K, 1>(panel, w.cols, a, o, row0, h),
                    }
                }
            }
        }
    }
}

/// Rows `8h..8h+8` of column `c` of a float panel as f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn float_column<K: FKind>(panel: *const u8, c: usize, h: usize) -> __m256 {
    let p = panel.wrapping_add((c * GROUP_ROWS + h * HALF_ROWS) * K::TYPE.bytes());
    // SAFETY: the caller passes c < cols, so these 8 elements are inside the panel.
    unsafe {
        match K::TYPE {
            FloatType::F32 => _mm256_loadu_ps(p.cast()),
            FloatType::F16 => _mm256_cvtph_ps(_mm_loadu_si128(p.cast())),
            FloatType::BF16 => _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(_mm_loadu_si128(p.cast())))),
        }
    }
}

/// One column into chain `u` of every token's accumulators.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn float_step<K: FKind, const TT: usize>(
    acc: &mut [[__m256; FLOAT_CHAINS]; TT],
    panel: *const u8,
    x: &[*const f32],
    c: usize,
    u: usize,
    h: usize,
) {
    // SAFETY: c < cols (caller), so the column and every token's x[c] are in bounds.
    unsafe {
        let wv = float_column::<K>(panel, c, h);
        for t in 0..TT {
            acc[t][u] = _mm256_fmadd_ps(wv, _mm256_set1_ps(*x[t].add(c)), acc[t][u]);
        }
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn float_tile<K: FKind, const TT: usize>(panel: *const u8, cols: usize, x: &[*const f32], out: &[*mut f32], row0: usize, h: usize) {
    // SAFETY: each token has `cols` activations and each output row room for
    // row0 + 16 floats (caller's contract); columns stay below `cols`.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); FLOAT_CHAINS]; TT];
        let whole = cols - cols % FLOAT_CHAINS;
        for c in (0..whole).step_by(FLOAT_CHAINS) {
            for u in 0..FLOAT_CHAINS {
                float_step::<K, TT>(&mut acc, panel, x, c + u, u, h);
            }
        }
        for c in whole..cols {
            float_step::<K, TT>(&mut acc, panel, x, c, c % FLOAT_CHAINS, h);
        }
        for t in 0..TT {
            let [a0, a1, a2, a3] = acc[t];
            _mm256_storeu_ps(out[t].add(row0 + h * HALF_ROWS), _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
        }
    }
}
