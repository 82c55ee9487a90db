//! AVX-512 VNNI kernels. Quantized weights: each 64-byte code vector holds four
//! codes of each of 16 rows, so `vpdpbusd` against one broadcast activation word
//! advances 16 row dots at once (unsigned codes × signed activations, exactly the
//! operand types `vpdpbusd` takes) and lane `j` of every register is row `j`.

use std::arch::x86_64::*;
use std::ops::Range;

use super::{FKind, QKind, FLOAT_CHAINS, MAX_TILE};
use crate::cpu::act_quant::{TokenActs, HI_SHIFT, QBLOCK};
use crate::cpu::packed::{Codes, FloatType, PackedMatrix, ScaleType, GROUP_ROWS, VECTOR_BYTES};

/// Code vectors of the widest sub-block (nibbles or bytes of 32 codes).
const MAX_VECTORS: usize = 8;

/// See [`super::matmul`].
///
/// # Safety
/// As [`super::matmul`], and the CPU has AVX-512 F/BW/VL/VNNI; with `DUAL` every
/// token has a low plane.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")]
pub unsafe fn quant_matmul<K: QKind, const DUAL: bool>(w: &PackedMatrix, groups: Range<usize>, acts: &[TokenActs], out: &[*mut f32]) {
    let steps = w.steps();
    for g in groups {
        let panel = w.panel(g);
        for (a, o) in acts.chunks(QUANT_TILE).zip(out.chunks(QUANT_TILE)) {
            let row0 = g * GROUP_ROWS;
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

/// Tokens per quantized tile. Two, not [`MAX_TILE`]: a batched decode step (weights
/// streamed from memory) is faster in tiles of two, likely because a larger tile's
/// accumulators leave fewer registers for loads in flight (docs/cpu.md); each token's
/// sums are the same either way.
const QUANT_TILE: usize = 2;

/// One sub-block's code vectors as unsigned bytes; vector `k` pairs with
/// activation word `k` (entries past `vectors()` are unused).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")]
unsafe fn load_codes<K: QKind>(chunk: *const u8) -> [__m512i; MAX_VECTORS] {
    let q = K::FMT;
    // SAFETY: the chunk holds `vectors()` 64-byte code vectors (nibbles: half as many).
    unsafe {
        let v = |k: usize| _mm512_loadu_si512(chunk.add(k * VECTOR_BYTES).cast());
        match q.codes {
            Codes::Nibble => {
                let mask = _mm512_set1_epi8(0x0F);
                let (v0, v1, v2, v3) = (v(0), v(1), v(2), v(3));
                let high = |x: __m512i| _mm512_and_si512(_mm512_srli_epi16::<4>(x), mask);
                let low = |x: __m512i| _mm512_and_si512(x, mask);
                [low(v0), low(v1), low(v2), low(v3), high(v0), high(v1), high(v2), high(v3)]
            }
            Codes::Byte if q.vectors() == MAX_VECTORS => [v(0), v(1), v(2), v(3), v(4), v(5), v(6), v(7)],
            Codes::Byte => {
                let z = _mm512_setzero_si512();
                [v(0), v(1), v(2), v(3), z, z, z, z]
            }
        }
    }
}

/// Σ codes × activations for 16 rows: activation word `k` (4 signed bytes at
/// `a + 4k`) broadcast against code vector `k`, in two chains.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")]
unsafe fn dot_plane<K: QKind>(w: &[__m512i; MAX_VECTORS], a: *const i8) -> __m512i {
    // SAFETY: the token has `vectors()·4` activation bytes from `a` (caller).
    unsafe {
        let word = |k: usize| _mm512_set1_epi32(a.add(4 * k).cast::<i32>().read_unaligned());
        let z = _mm512_setzero_si512();
        let mut c0 = _mm512_dpbusd_epi32(z, w[0], word(0));
        let mut c1 = _mm512_dpbusd_epi32(z, w[1], word(1));
        c0 = _mm512_dpbusd_epi32(c0, w[2], word(2));
        c1 = _mm512_dpbusd_epi32(c1, w[3], word(3));
        if K::FMT.vectors() == MAX_VECTORS {
            c0 = _mm512_dpbusd_epi32(c0, w[4], word(4));
            c1 = _mm512_dpbusd_epi32(c1, w[5], word(5));
            c0 = _mm512_dpbusd_epi32(c0, w[6], word(6));
            c1 = _mm512_dpbusd_epi32(c1, w[7], word(7));
        }
        _mm512_add_epi32(c0, c1)
    }
}

/// The 16 rows' (d, m) of one sub-block.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")]
unsafe fn load_scales<K: QKind>(chunk: *const u8) -> (__m512, __m512) {
    let q = K::FMT;
    // SAFETY: the scales follow the code vectors: 16 d's, then 16 m's when stored.
    unsafe {
        let sp = chunk.add(q.code_bytes());
        let load = |at: *const u8| match q.scale {
            ScaleType::F16 => _mm512_cvtph_ps(_mm256_loadu_si256(at.cast())),
            ScaleType::F32 => _mm512_loadu_ps(at.cast()),
        };
        let dv = load(sp);
        let mv = match q.m_from_d {
            Some(c) => _mm512_mul_ps(dv, _mm512_set1_ps(c)),
            None => load(sp.add(GROUP_ROWS * q.scale_bytes())),
        };
        (dv, mv)
    }
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")]
unsafe fn quant_tile<K: QKind, const TT: usize, const DUAL: bool>(
    panel: *const u8,
    steps: usize,
    acts: &[TokenActs],
    out: &[*mut f32],
    row0: usize,
) {
    let q = K::FMT;
    // SAFETY: the panel holds `steps` chunks of `chunk_bytes`; each token's planes
    // cover `steps · sub` bytes and its block arrays `steps` entries; each output
    // row has room for row0 + 16 floats (caller's contract).
    unsafe {
        let mut acc_d = [_mm512_setzero_ps(); TT];
        let mut acc_m = [_mm512_setzero_ps(); TT];
        for st in 0..steps {
            let chunk = panel.add(st * q.chunk_bytes());
            let e0 = st * q.sub;
            let w = load_codes::<K>(chunk);
            let (dv, mv) = load_scales::<K>(chunk);
            for t in 0..TT {
                let a = &acts[t];
                let isum = if DUAL {
                    let hi = dot_plane::<K>(&w, a.hi.add(e0));
                    let lo = dot_plane::<K>(&w, a.lo.add(e0));
                    _mm512_add_epi32(_mm512_slli_epi32::<{ HI_SHIFT }>(hi), lo)
                } else {
                    dot_plane::<K>(&w, a.hi.add(e0))
                };
                let da = *a.d.add(e0 / QBLOCK);
                let sa = if q.sub == QBLOCK { *a.s32.add(st) } else { *a.s16.add(st) };
                acc_d[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dv, _mm512_set1_ps(da)), acc_d[t]);
                acc_m[t] = _mm512_fmadd_ps(mv, _mm512_set1_ps(sa), acc_m[t]);
            }
        }
        for t in 0..TT {
            _mm512_storeu_ps(out[t].add(row0), _mm512_add_ps(acc_d[t], acc_m[t]));
        }
    }
}

/// See [`super::matmul`].
///
/// # Safety
/// As [`super::matmul`], and the CPU has AVX-512 F/BW.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma,f16c")]
pub unsafe fn float_matmul<K: FKind>(w: &PackedMatrix, groups: Range<usize>, x: &[*const f32], out: &[*mut f32]) {
    for g in groups {
        let panel = w.panel(g);
        for (a, o) in x.chunks(MAX_TILE).zip(out.chunks(MAX_TILE)) {
            let row0 = g * GROUP_ROWS;
            // SAFETY: forwarded contract; the tile size matches the slice lengths.
            unsafe {
                match a.len() {
                    4 => float_tile::<K, 4>(panel, w.cols, a, o, row0),
                    3 => float_tile::<K, 3>(panel, w.cols, a, o, row0),
                    2 => float_tile::<K, 2>(panel, w.cols, a, o, row0),
                    _ => float_tile::<K, 1>(panel, w.cols, a, o, row0),
                }
            }
        }
    }
}

/// Column `c` of a float panel: 16 weights as f32.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma,f16c")]
unsafe fn float_column<K: FKind>(panel: *const u8, c: usize) -> __m512 {
    let p = panel.wrapping_add(c * GROUP_ROWS * K::TYPE.bytes());
    // SAFETY: the caller passes c < cols, so 16 elements are inside the panel.
    unsafe {
        match K::TYPE {
            FloatType::F32 => _mm512_loadu_ps(p.cast()),
            FloatType::F16 => _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())),
            FloatType::BF16 => _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(_mm256_loadu_si256(p.cast())))),
        }
    }
}

/// One column into chain `u` of every token's accumulators.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma,f16c")]
unsafe fn float_step<K: FKind, const TT: usize>(
    acc: &mut [[__m512; FLOAT_CHAINS]; TT],
    panel: *const u8,
    x: &[*const f32],
    c: usize,
    u: usize,
) {
    // SAFETY: c < cols (caller), so the column and every token's x[c] are in bounds.
    unsafe {
        let wv = float_column::<K>(panel, c);
        for t in 0..TT {
            acc[t][u] = _mm512_fmadd_ps(wv, _mm512_set1_ps(*x[t].add(c)), acc[t][u]);
        }
    }
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma,f16c")]
unsafe fn float_tile<K: FKind, const TT: usize>(panel: *const u8, cols: usize, x: &[*const f32], out: &[*mut f32], row0: usize) {
    // SAFETY: each token has `cols` activations and each output row room for
    // row0 + 16 floats (caller's contract); columns stay below `cols`.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); FLOAT_CHAINS]; TT];
        let whole = cols - cols % FLOAT_CHAINS;
        for c in (0..whole).step_by(FLOAT_CHAINS) {
            for u in 0..FLOAT_CHAINS {
                float_step::<K, TT>(&mut acc, panel, x, c + u, u);
            }
        }
        for c in whole..cols {
            float_step::<K, TT>(&mut acc, panel, x, c, c % FLOAT_CHAINS);
        }
        for t in 0..TT {
            let [a0, a1, a2, a3] = acc[t];
            _mm512_storeu_ps(out[t].add(row0), _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
        }
    }
}
