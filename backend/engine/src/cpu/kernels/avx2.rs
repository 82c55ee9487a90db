//! AVX2 kernels for CPUs without AVX-512 VNNI: the same panels, handled as two
//! 8-row halves. Integer dots use `vpmaddubsw` + `vpmaddwd` (llama.cpp's
//! `mul_sum_us8_pairs_float`); 8-bit codes go through the sign trick
//! (`|s| · sign(a, s)` with `s = c − 128`) so `vpmaddubsw` cannot saturate, and
//! `128 · Σa` is added back, giving exactly the integer dot of the other kernels.

use std::arch::x86_64::*;
use std::ops::Range;

use super::{FKind, QKind, FLOAT_CHAINS, MAX_TILE};
use crate::cpu::act_quant::{TokenActs, HI_SCALE, HI_SHIFT, QBLOCK};
use crate::cpu::packed::{Codes, FloatType, PackedMatrix, ScaleType, GROUP_ROWS, VECTOR_BYTES};

/// Rows per 256-bit register.
const HALF_ROWS: usize = GROUP_ROWS / 2;
/// Offset between 8-bit codes and their signed values.
const BYTE_BIAS: i32 = 128;
/// Most nibble code vectors per sub-block whose `vpmaddubsw` pair sums can be added in
/// i16: a pair is at most 2 · 15 · 128 = 3,840 in magnitude (codes ≤ 15, activation
/// bytes ∈ [−128, 127]), and 8 of them (30,720) stay below 32,767.
const NIBBLE_I16_VECTORS: usize = 8;
/// 8-row halves of a group, one 256-bit register each.
const HALVES: usize = GROUP_ROWS / HALF_ROWS;
/// Tokens per quantized tile: two tokens' sums for both halves fill the register
/// file; more spill.
const PAIR: usize = 2;

/// See [`super::matmul`].
///
/// # Safety
/// As [`super::matmul`], and the CPU has AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn quant_matmul<K: QKind, const DUAL: bool>(w: &PackedMatrix, groups: Range<usize>, acts: &[TokenActs], out: &[*mut f32]) {
    let steps = w.steps();
    for g in groups {
        let panel = w.panel(g);
        let row0 = g * GROUP_ROWS;
        for (a, o) in acts.chunks(PAIR).zip(out.chunks(PAIR)) {
            // SAFETY: forwarded contract; the tile size matches the slice lengths.
            unsafe {
                match a.len() {
                    2 => quant_tile::<K, 2, DUAL>(panel, steps, a, o, row0),
                    _ => quant_tile::<K, 1, DUAL>(panel, steps, a, o, row0),
                }
            }
        }
    }
}

/// All 16 rows of `TT` tokens over the whole panel, both halves per activation
/// broadcast (one broadcast feeds 16 rows). The two accumulators of the shared formula are separate chains, so they run as
/// two loops: the integer dots first (the offsets' registers stay free for them),
/// then `acc_m` from the scales alone; each chain sees the same operations in the
/// same order as in the other kernels.
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
    // SAFETY: as the AVX-512 tile: the panel has `steps` chunks, each token `steps·sub`
    // codes and `steps` block entries, each output row room for row0 + 16 floats.
    unsafe {
        let mut acc_d = [[_mm256_setzero_ps(); HALVES]; TT];
        for st in 0..steps {
            let p = panel.add(st * q.chunk_bytes());
            let isum = match q.codes {
                Codes::Nibble => nibble_dots::<K, TT, DUAL>(p, st * q.sub, acts),
                Codes::Byte => byte_dots::<K, TT, DUAL>(p, st, acts),
            };
            let sp = p.add(q.code_bytes());
            for hh in 0..HALVES {
                let dv = load_scales::<K>(sp, hh);
                for t in 0..TT {
                    let da = *acts[t].d.add(st * q.sub / QBLOCK);
                    acc_d[t][hh] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t][hh]), _mm256_mul_ps(dv, _mm256_set1_ps(da)), acc_d[t][hh]);
                }
            }
        }
        let mut acc_m = [[_mm256_setzero_ps(); HALVES]; TT];
        for st in 0..steps {
            let sp = panel.add(st * q.chunk_bytes() + q.code_bytes());
            for hh in 0..HALVES {
                let mv = match q.m_from_d {
                    Some(c) => _mm256_mul_ps(load_scales::<K>(sp, hh), _mm256_set1_ps(c)),
                    None => load_scales::<K>(sp.add(GROUP_ROWS * q.scale_bytes()), hh),
                };
                for t in 0..TT {
                    let sa = if q.sub == QBLOCK { *acts[t].s32.add(st) } else { *acts[t].s16.add(st) };
                    acc_m[t][hh] = _mm256_fmadd_ps(mv, _mm256_set1_ps(sa), acc_m[t][hh]);
                }
            }
        }
        for t in 0..TT {
            for hh in 0..HALVES {
                _mm256_storeu_ps(out[t].add(row0 + hh * HALF_ROWS), _mm256_add_ps(acc_d[t][hh], acc_m[t][hh]));
            }
        }
    }
}

/// Half `h`'s 8 scales of one kind (d's at `at`, or m's after them) as f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_scales<K: QKind>(at: *const u8, h: usize) -> __m256 {
    // SAFETY: a chunk stores 16 scales of each kind; h < 2 (callers).
    unsafe {
        match K::FMT.scale {
            ScaleType::F16 => _mm256_cvtph_ps(_mm_loadu_si128(at.add(h * HALF_ROWS * 2).cast())),
            ScaleType::F32 => _mm256_loadu_ps(at.add(h * HALF_ROWS * 4).cast()),
        }
    }
}

/// Activation word `k` (4 signed bytes) of one plane, broadcast to every lane.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn word(plane: *const i8, k: usize) -> __m256i {
    // SAFETY: the caller keeps `k` inside the token's codes.
    unsafe { _mm256_set1_epi32(plane.add(4 * k).cast::<i32>().read_unaligned()) }
}

/// The token's planes (the low one only with `DUAL`).
#[inline(always)]
fn planes<const DUAL: bool>(a: &TokenActs) -> [*const i8; 2] {
    [a.hi, if DUAL { a.lo } else { std::ptr::null() }]
}

/// Integer dots of one nibble sub-block: each byte vector holds two code vectors
/// (low nibbles: k = v, high: k = v + nv/2), whose `vpmaddubsw` pair sums add up in
/// i16 without overflow (see NIBBLE_I16_VECTORS), so one `vpmaddwd` per sub-block
/// widens them; with `DUAL` that `vpmaddwd` multiplies the high plane by 128.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn nibble_dots<K: QKind, const TT: usize, const DUAL: bool>(p: *const u8, e0: usize, acts: &[TokenActs]) -> [[__m256i; HALVES]; TT] {
    let nv = K::FMT.vectors();
    const { assert!(K::FMT.vectors() <= NIBBLE_I16_VECTORS, "nibble sums would overflow i16") };
    let np = if DUAL { 2 } else { 1 };
    // SAFETY: `p` is a chunk of nv/2 byte vectors; each plane has the sub-block's
    // `4·nv` codes from `e0` (caller).
    unsafe {
        let mask = _mm256_set1_epi8(0x0F);
        let mut s16 = [[[_mm256_setzero_si256(); HALVES]; 2]; TT];
        for v in 0..nv / 2 {
            let mut lo = [_mm256_setzero_si256(); HALVES];
            let mut hi = [_mm256_setzero_si256(); HALVES];
            for hh in 0..HALVES {
                let x = load_half(p, v, hh);
                lo[hh] = _mm256_and_si256(x, mask);
                hi[hh] = _mm256_and_si256(_mm256_srli_epi16::<4>(x), mask);
            }
            for (t, sums) in s16.iter_mut().enumerate() {
                for (plane_sums, base) in sums.iter_mut().zip(planes::<DUAL>(&acts[t])).take(np) {
                    let (a_lo, a_hi) = (word(base, e0 / 4 + v), word(base, e0 / 4 + v + nv / 2));
                    for hh in 0..HALVES {
                        let pairs = _mm256_add_epi16(_mm256_maddubs_epi16(lo[hh], a_lo), _mm256_maddubs_epi16(hi[hh], a_hi));
                        plane_sums[hh] = _mm256_add_epi16(plane_sums[hh], pairs);
                    }
                }
            }
        }
        let ones = _mm256_set1_epi16(1);
        let hi_scale = _mm256_set1_epi16(HI_SCALE as i16);
        let mut isum = [[_mm256_setzero_si256(); HALVES]; TT];
        for (t, sums) in s16.iter().enumerate() {
            for hh in 0..HALVES {
                isum[t][hh] = if DUAL {
                    _mm256_add_epi32(_mm256_madd_epi16(sums[0][hh], hi_scale), _mm256_madd_epi16(sums[1][hh], ones))
                } else {
                    _mm256_madd_epi16(sums[0][hh], ones)
                };
            }
        }
        isum
    }
}

/// Integer dots of one sub-block of 8-bit codes, one `vpmaddwd` per code vector:
/// the sign trick, then `128·Σa` added back.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn byte_dots<K: QKind, const TT: usize, const DUAL: bool>(p: *const u8, st: usize, acts: &[TokenActs]) -> [[__m256i; HALVES]; TT] {
    let q = K::FMT;
    let np = if DUAL { 2 } else { 1 };
    let e0 = st * q.sub;
    // SAFETY: `p` is a chunk of the format's code vectors; each plane has the
    // sub-block's codes from `e0` and each token `isum16` entries for it (caller).
    unsafe {
        let bias = _mm256_set1_epi8(BYTE_BIAS as u8 as i8);
        let ones = _mm256_set1_epi16(1);
        let mut isum = [[[_mm256_setzero_si256(); HALVES]; 2]; TT];
        for k in 0..q.vectors() {
            let mut signed = [_mm256_setzero_si256(); HALVES];
            let mut magnitude = [_mm256_setzero_si256(); HALVES];
            for hh in 0..HALVES {
                signed[hh] = _mm256_xor_si256(load_half(p, k, hh), bias);
                magnitude[hh] = _mm256_abs_epi8(signed[hh]);
            }
            for (t, sums) in isum.iter_mut().enumerate() {
                for (plane_sums, base) in sums.iter_mut().zip(planes::<DUAL>(&acts[t])).take(np) {
                    let a = word(base, e0 / 4 + k);
                    for hh in 0..HALVES {
                        let pairs = _mm256_maddubs_epi16(magnitude[hh], _mm256_sign_epi8(a, signed[hh]));
                        plane_sums[hh] = _mm256_add_epi32(plane_sums[hh], _mm256_madd_epi16(pairs, ones));
                    }
                }
            }
        }
        let mut out = [[_mm256_setzero_si256(); HALVES]; TT];
        for (t, sums) in isum.iter().enumerate() {
            let a = &acts[t];
            let asum = if q.sub == QBLOCK { *a.isum16.add(2 * st) + *a.isum16.add(2 * st + 1) } else { *a.isum16.add(st) };
            for hh in 0..HALVES {
                let s =
                    if DUAL { _mm256_add_epi32(_mm256_slli_epi32::<{ HI_SHIFT as i32 }>(sums[0][hh]), sums[1][hh]) } else { sums[0][hh] };
                out[t][hh] = _mm256_add_epi32(s, _mm256_set1_epi32(BYTE_BIAS * asum));
            }
        }
        out
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
