//! Reads ggml's block layouts (as `gguf/quant.rs` dequantizes them) as unsigned
//! codes plus an affine scale per sub-block, `x = d·c + m`, for repacking. The
//! products are exact in f32, so the packed form dequantizes bit for bit as ggml does.

use half::f16;

use crate::tensor::DType;

/// Elements in a K-quant super-block (`QK_K`).
const QK_K: usize = 256;
/// Elements in a legacy block (`QK4_0`, `QK4_1`, `QK8_0`).
const QK: usize = 32;

/// One sub-block of a row: codes and the affine map back to values.
#[derive(Debug, Clone, Copy, Default)]
pub struct SubBlock {
    /// `sub` codes (the rest unused).
    pub codes: [u8; QK],
    pub d: f32,
    pub m: f32,
    /// The raw half of `d` (legacy types, whose scales are halves).
    pub d_f16: u16,
    /// The raw half of `m` (Q4_1).
    pub m_f16: u16,
}

fn half_bits(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn half_at(b: &[u8], at: usize) -> f32 {
    f16::from_bits(half_bits(b, at)).to_f32()
}

/// Calls `each(sub_block_index, block)` for every sub-block of one row of `dtype`
/// (`row` holds whole blocks; `sub` is the packed format's sub-block length).
pub fn decode_sub_blocks(dtype: DType, row: &[u8], sub: usize, each: &mut dyn FnMut(usize, &SubBlock)) {
    let bb = dtype.block_bytes();
    match dtype {
        DType::Q4_0 | DType::Q4_1 => {
            // Q4_0 has d, Q4_1 has d and m before the 16 bytes of nibbles.
            let header = if dtype == DType::Q4_0 { 2 } else { 4 };
            for (i, b) in row.chunks_exact(bb).enumerate() {
                let mut s = SubBlock { d_f16: half_bits(b, 0), d: half_at(b, 0), ..Default::default() };
                if dtype == DType::Q4_1 {
                    s.m_f16 = half_bits(b, 2);
                    s.m = half_at(b, 2);
                } else {
                    s.m = -8.0 * s.d;
                }
                for (j, &q) in b[header..header + QK / 2].iter().enumerate() {
                    s.codes[j] = q & 0x0F;
                    s.codes[j + QK / 2] = q >> 4;
                }
                each(i, &s);
            }
        }
        DType::Q8_0 => {
            for (i, b) in row.chunks_exact(bb).enumerate() {
                let mut s = SubBlock { d_f16: half_bits(b, 0), d: half_at(b, 0), ..Default::default() };
                s.m = -128.0 * s.d;
                // Two's complement i8 → offset binary u8: c = q + 128.
                for (c, &q) in s.codes.iter_mut().zip(&b[2..2 + QK]) {
                    *c = q ^ 0x80;
                }
                each(i, &s);
            }
        }
        DType::Q4_K => {
            for (i, b) in row.chunks_exact(bb).enumerate() {
                let (d, dmin) = (half_at(b, 0), half_at(b, 2));
                let (scales, qs) = (&b[4..16], &b[16..144]);
                for j in 0..QK_K / QK {
                    let (sc, mn) = scale_min_k4(j, scales);
                    let mut s = SubBlock { d: d * sc as f32, m: -(dmin * mn as f32), ..Default::default() };
                    let q = &qs[32 * (j / 2)..32 * (j / 2) + 32];
                    for (c, &v) in s.codes.iter_mut().zip(q) {
                        *c = if j % 2 == 0 { v & 0x0F } else { v >> 4 };
                    }
                    each(i * QK_K / QK + j, &s);
                }
            }
        }
        DType::Q6_K => {
            debug_assert_eq!(sub, 16);
            for (i, b) in row.chunks_exact(bb).enumerate() {
                let d = half_at(b, 208);
                let mut codes = [0u8; QK_K];
                for half in 0..2 {
                    let ql = &b[64 * half..64 * half + 64];
                    let qh = &b[128 + 32 * half..128 + 32 * half + 32];
                    let y = &mut codes[128 * half..128 * half + 128];
                    for l in 0..32 {
                        y[l] = (ql[l] & 0x0F) | ((qh[l] & 3) << 4);
                        y[l + 32] = (ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4);
                        y[l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
                        y[l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
                    }
                }
                for j in 0..QK_K / 16 {
                    let dj = d * (b[192 + j] as i8) as f32;
                    let mut s = SubBlock { d: dj, m: -32.0 * dj, ..Default::default() };
                    s.codes[..16].copy_from_slice(&codes[16 * j..16 * j + 16]);
                    each(i * QK_K / 16 + j, &s);
                }
            }
        }
        DType::F32 | DType::F16 | DType::BF16 => unreachable!("float types are not decoded into sub-blocks"),
    }
}

/// ggml's `get_scale_min_k4`: 6-bit scale and min `j` of the 12 packed bytes.
pub(crate) fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}
