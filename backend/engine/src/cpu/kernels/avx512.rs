//! AVX-512 VNNI kernels. Quantized weights: each 64-byte code vector holds four
//! codes of each of 16 rows, so `vpdpbusd` against one broadcast activation word
//! advances 16 row dots at once (unsigned codes × signed activations, exactly the
//! operand types `vpdpbusd` takes) and lane `j` of every register is row `j`.

use std::arch::x86_64::*;
use std::ops::Range;

use super::{FKind, QKind, FLOAT_CHAINS, MAX_TILE};
use crate::cpu::act_quant::{TokenActs, HI_SHIFT, QBLOCK};
use crate::cpu::packed::{Codes, FloatType, PackedMatrix, ScaleType, GROUP_ROWS, VECTOR_BYTES};

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
                    4 => quant_tile::<K, 4, DUAL>(panel, steps, a, o, row0),
                    3 => quant_tile::<K, 3, DUAL>(panel, steps, a, o, row0),
                    2 => quant_tile::<K, 2, DUAL>(panel, steps, a, o, row0),
                    _ => quant_tile::<K, 1, DUAL>(panel, steps, a, o, row0),
                }
            }
        }
    }
}

/// Tokens per quantized tile: a batched step reads each panel once for up to four
/// tokens (each token's sums are the same in any tile).
const QUANT_TILE: usize = 4;
/// Tiles from this many tokens prefetch the panel [`PREFETCH_AHEAD`] bytes ahead. Their
/// dots take long enough per chunk that the out-of-order window no longer reaches the
/// loads far enough ahead to cover memory latency (without it a tile of four was slower
/// than two tiles of two, and on 2,048-wide rows a tile of two lost a fifth); a single
/// token is paced by memory and the hardware prefetchers serve it (software prefetch
/// there made it slower).
const PREFETCH_FROM_TILE: usize = 2;
/// How far ahead of the chunk being multiplied a multi-token tile prefetches.
const PREFETCH_AHEAD: usize = 4096;
/// Bytes per cache line.
const CACHE_LINE: usize = 64;

/// Code vector `k` of a sub-block as unsigned bytes (it pairs with activation word
/// `k`): for nibbles, vectors 0–3 are the low nibbles of the four stored vectors and
/// 4–7 their high nibbles.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")]
unsafe fn code_vector<K: QKind>(chunk: *const u8, k: usize) -> __m512i {
    // SAFETY: k < vectors(), so the stored vector read is inside the chunk.
    unsafe {
        match K::FMT.codes {
            Codes::Nibble => {
                let stored = _mm512_loadu_si512(chunk.add((k % 4) * VECTOR_BYTES).cast());
                let mask = _mm512_set1_epi8(0x0F);
                if k < 4 {
                    _mm512_and_si512(stored, mask)
                } else {
                    _mm512_and_si512(_mm512_srli_epi16::<4>(stored), mask)
                }
            }
            Codes::Byte => _mm512_loadu_si512(chunk.add(k * VECTOR_BYTES).cast()),
        }
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

/// `TT` tokens against one panel of 16 rows. Per sub-block, each code vector is loaded
/// once and advances every token's dot (activation word `k`, 4 signed bytes at
/// `a + 4k`, broadcast against code vector `k`); lane `j` is row `j`. The integer sums
/// do not depend on the order, so a token's result is the same in any tile.
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
    // Two independent dot chains per token and plane, so that even one token keeps
    // enough `vpdpbusd` in flight to cover its latency.
    const CHAINS: usize = 2;
    // SAFETY: the panel holds `steps` chunks of `chunk_bytes`; each token's planes
    // cover `steps · sub` bytes and its block arrays `steps` entries; each output
    // row has room for row0 + 16 floats (caller's contract).
    unsafe {
        let word = |plane: *const i8, at: usize| _mm512_set1_epi32(plane.add(at).cast::<i32>().read_unaligned());
        let zero = _mm512_setzero_si512();
        let mut acc_d = [_mm512_setzero_ps(); TT];
        let mut acc_m = [_mm512_setzero_ps(); TT];
        for st in 0..steps {
            let chunk = panel.add(st * q.chunk_bytes());
            let e0 = st * q.sub;
            if TT >= PREFETCH_FROM_TILE {
                for line in (0..q.chunk_bytes()).step_by(CACHE_LINE) {
                    // A hint: never faults, even past the matrix's end.
                    _mm_prefetch::<_MM_HINT_T0>(chunk.wrapping_add(PREFETCH_AHEAD + line).cast());
                }
            }
            let mut hi = [[zero; CHAINS]; TT];
            let mut lo = [[zero; CHAINS]; TT];
            for k in 0..q.vectors() {
                let w = code_vector::<K>(chunk, k);
                let c = k % CHAINS;
                for t in 0..TT {
                    hi[t][c] = _mm512_dpbusd_epi32(hi[t][c], w, word(acts[t].hi, e0 + 4 * k));
                    if DUAL {
                        lo[t][c] = _mm512_dpbusd_epi32(lo[t][c], w, word(acts[t].lo, e0 + 4 * k));
                    }
                }
            }
            let (dv, mv) = load_scales::<K>(chunk);
            for t in 0..TT {
                let a = &acts[t];
                let high = _mm512_add_epi32(hi[t][0], hi[t][1]);
                let isum = if DUAL {
                    _mm512_add_epi32(_mm512_slli_epi32::<{ HI_SHIFT }>(high), _mm512_add_epi32(lo[t][0], lo[t][1]))
                } else {
                    high
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
