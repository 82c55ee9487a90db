//! Plain-Rust kernels: the fallback on CPUs without AVX2 and the bit-exact
//! specification the SIMD kernels are tested against (same integer dots, same
//! float operation order, `mul_add` for every FMA).

use std::ops::Range;

use super::{FKind, QKind, FLOAT_CHAINS};
use crate::cpu::act_quant::{TokenActs, HI_SCALE, QBLOCK};
use crate::cpu::packed::{chunk_scales, code, float_at, PackedMatrix, GROUP_ROWS};

/// See [`super::matmul`].
///
/// # Safety
/// As [`super::matmul`].
pub unsafe fn quant_matmul<K: QKind, const DUAL: bool>(w: &PackedMatrix, groups: Range<usize>, acts: &[TokenActs], out: &[*mut f32]) {
    let q = K::FMT;
    let (chunk, steps) = (q.chunk_bytes(), w.steps());
    for g in groups {
        // SAFETY: a group panel is `steps` chunks long.
        let panel = unsafe { std::slice::from_raw_parts(w.panel(g), steps * chunk) };
        for (a, &o) in acts.iter().zip(out) {
            // SAFETY: the caller guarantees `cols` codes and per-block values per token.
            let (hi, lo, d, s) = unsafe {
                let s = if q.sub == QBLOCK { a.s32 } else { a.s16 };
                (
                    std::slice::from_raw_parts(a.hi, w.cols),
                    if DUAL { std::slice::from_raw_parts(a.lo, w.cols) } else { &[][..] },
                    std::slice::from_raw_parts(a.d, w.cols / QBLOCK),
                    std::slice::from_raw_parts(s, steps),
                )
            };
            for lane in 0..GROUP_ROWS {
                let (mut acc_d, mut acc_m) = (0.0f32, 0.0f32);
                for (st, c) in panel.chunks_exact(chunk).enumerate() {
                    let e0 = st * q.sub;
                    let act = |i: usize| if DUAL { HI_SCALE * hi[i] as i32 + lo[i] as i32 } else { hi[i] as i32 };
                    let isum: i32 = (0..q.sub).map(|e| code(q, c, lane, e) as i32 * act(e0 + e)).sum();
                    let (dw, mw) = chunk_scales(q, c, lane);
                    acc_d = (isum as f32).mul_add(dw * d[e0 / QBLOCK], acc_d);
                    acc_m = mw.mul_add(s[st], acc_m);
                }
                // SAFETY: the output row has padded_rows ≥ 16·(g+1) floats.
                unsafe { *o.add(g * GROUP_ROWS + lane) = acc_d + acc_m };
            }
        }
    }
}

/// See [`super::matmul`].
///
/// # Safety
/// As [`super::matmul`].
pub unsafe fn float_matmul<K: FKind>(w: &PackedMatrix, groups: Range<usize>, x: &[*const f32], out: &[*mut f32]) {
    let eb = K::TYPE.bytes();
    for g in groups {
        // SAFETY: a float panel holds cols × 16 elements.
        let panel = unsafe { std::slice::from_raw_parts(w.panel(g), w.cols * GROUP_ROWS * eb) };
        for (&xp, &o) in x.iter().zip(out) {
            // SAFETY: the caller guarantees `cols` activations per token.
            let x = unsafe { std::slice::from_raw_parts(xp, w.cols) };
            for lane in 0..GROUP_ROWS {
                let mut acc = [0.0f32; FLOAT_CHAINS];
                for (c, &v) in x.iter().enumerate() {
                    let wv = float_at(K::TYPE, panel, c * GROUP_ROWS + lane);
                    acc[c % FLOAT_CHAINS] = wv.mul_add(v, acc[c % FLOAT_CHAINS]);
                }
                // SAFETY: the output row has padded_rows ≥ 16·(g+1) floats.
                unsafe { *o.add(g * GROUP_ROWS + lane) = (acc[0] + acc[1]) + (acc[2] + acc[3]) };
            }
        }
    }
}
