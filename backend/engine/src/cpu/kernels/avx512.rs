//! AVX-512 VNNI kernels. Quantized weights: each 64-byte code vector holds four
//! codes of each of 16 rows, so `vpdpbusd` against one broadcast activation word
//! advances 16 row dots at once (unsigned codes × signed activations, exactly the
//! operand types `vpdpbusd` takes) and lane `j` of every register is row `j`.

use std::arch::x86_64::*;
use std::ops::Range;

use super::{FKind, QKind, FLOAT_CHAINS, MAX_TILE};
use crate::cpu::act_quant::{TokenActs, QBLOCK};
use crate::cpu::packed::{Codes, FloatType, PackedMatrix, ScaleType, GROUP_ROWS, VECTOR_BYTES};

/// Integer accumulators per token: two chains halve the `vpdpbusd` latency chain.
const INT_CHAINS: usize = 2;

/// See [`super::matmul`].
///
/// # Safety
/// As [`super::matmul`], and the CPU has AVX-512 F/BW/VL/VNNI.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")]
pub unsafe fn quant_matmul<K: QKind>(w: &PackedMatrix, groups: Range<usize>, acts: &[TokenActs], out: &[*mut f32]) {
    let steps = w.steps();
    for g in groups {
        let panel = w.panel(g);
        for (a, o) in acts.chunks(MAX_TILE).zip(out.chunks(MAX_TILE)) {
            let row0 = g * GROUP_ROWS;
            // SAFETY: forwarded contract; the tile size matches the slice lengths.
            unsafe {
                match a.len() {
                    4 => quant_tile::<K, 4>(panel, steps, a, o, row0),
                    3 => quant_tile::<K, 3>(panel, steps, a, o, row0),
                    2 => quant_tile::<K, 2>(panel, steps, a, o, row0),
                    _ => quant_tile::<K, 1>(panel, steps, a, o, row0),
                }
            }
        }
    }
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")]
unsafe fn quant_tile<K: QKind, const TT: usize>(panel: *const u8, steps: usize, acts: &[TokenActs], out: &[*mut f32], row0: usize) {
    let q = K::FMT;
    let nv = q.vectors();
    let half = nv / INT_CHAINS;
    // SAFETY: the panel holds `steps` chunks of `chunk_bytes`; each token's codes
    // cover `steps · sub` bytes and its block arrays `steps` entries; each output
    // row has room for row0 + 16 floats (caller's contract).
    unsafe {
        let mask = _mm512_set1_epi8(0x0F);
        let mut acc_d = [_mm512_setzero_ps(); TT];
        let mut acc_m = [_mm512_setzero_ps(); TT];
        for st in 0..steps {
            let p = panel.add(st * q.chunk_bytes());
            let e0 = st * q.sub;
            let mut isum = [[_mm512_setzero_si512(); INT_CHAINS]; TT];
            for k in 0..nv {
                let wk = match q.codes {
                    Codes::Nibble if k < half => _mm512_and_si512(_mm512_loadu_si512(p.add(k * VECTOR_BYTES).cast()), mask),
                    Codes::Nibble => _mm512_and_si512(_mm512_srli_epi16::<4>(_mm512_loadu_si512(p.add((k - half) * VECTOR_BYTES).cast())), mask),
                    Codes::Byte => _mm512_loadu_si512(p.add(k * VECTOR_BYTES).cast()),
                };
                for t in 0..TT {
                    let word = acts[t].qs.add(e0 + 4 * k).cast::<i32>().read_unaligned();
                    isum[t][k / half] = _mm512_dpbusd_epi32(isum[t][k / half], wk, _mm512_set1_epi32(word));
                }
            }
            let sp = p.add(q.code_bytes());
            let dv = match q.scale {
                ScaleType::F16 => _mm512_cvtph_ps(_mm256_loadu_si256(sp.cast())),
                ScaleType::F32 => _mm512_loadu_ps(sp.cast()),
            };
            let mv = match (q.m_from_d, q.scale) {
                (Some(c), _) => _mm512_mul_ps(dv, _mm512_set1_ps(c)),
                (None, ScaleType::F16) => _mm512_cvtph_ps(_mm256_loadu_si256(sp.add(GROUP_ROWS * 2).cast())),
                (None, ScaleType::F32) => _mm512_loadu_ps(sp.add(GROUP_ROWS * 4).cast()),
            };
            for t in 0..TT {
                let a = &acts[t];
                let da = *a.d.add(e0 / QBLOCK);
                let sa = if q.sub == QBLOCK { *a.s32.add(st) } else { *a.s16.add(st) };
                let isum = _mm512_add_epi32(isum[t][0], isum[t][1]);
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
unsafe fn float_step<K: FKind, const TT: usize>(acc: &mut [[__m512; FLOAT_CHAINS]; TT], panel: *const u8, x: &[*const f32], c: usize, u: usize) {
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
