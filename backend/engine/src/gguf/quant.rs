//! Dequantization to f32, block for block as ggml's reference `dequantize_row_*`
//! in ggml-quants.c (same operation order, so results match bit for bit).

use half::{bf16, f16};

use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

/// Elements in a K-quant super-block (`QK_K`).
const QK_K: usize = 256;

/// Dequantizes `src` (whole blocks of `dtype`) into `dst`, whose length must be
/// exactly the number of elements `src` encodes.
pub fn dequantize(dtype: DType, src: &[u8], dst: &mut [f32]) -> std::result::Result<(), String> {
    let (bs, bb) = (dtype.block_size(), dtype.block_bytes());
    if !src.len().is_multiple_of(bb) || src.len() / bb * bs != dst.len() {
        return Err(format!("{} bytes of {dtype:?} do not decode to {} values ({bb}-byte blocks of {bs})", src.len(), dst.len()));
    }
    let blocks = src.chunks_exact(bb).zip(dst.chunks_exact_mut(bs));
    match dtype {
        DType::F32 => blocks.for_each(|(s, d)| d[0] = f32::from_le_bytes([s[0], s[1], s[2], s[3]])),
        DType::F16 => blocks.for_each(|(s, d)| d[0] = half_at(s, 0)),
        DType::BF16 => blocks.for_each(|(s, d)| d[0] = bf16::from_le_bytes([s[0], s[1]]).to_f32()),
        DType::Q8_0 => blocks.for_each(|(s, d)| q8_0(s, d)),
        DType::Q4_0 => blocks.for_each(|(s, d)| q4_0(s, d)),
        DType::Q4_1 => blocks.for_each(|(s, d)| q4_1(s, d)),
        DType::Q4_K => blocks.for_each(|(s, d)| q4_k(s, d)),
        DType::Q6_K => blocks.for_each(|(s, d)| q6_k(s, d)),
    }
    Ok(())
}

impl Tensor {
    /// All elements as f32, row-major in `shape` order.
    pub fn to_f32(&self) -> Result<Vec<f32>> {
        let mut out = vec![0.0; self.numel()];
        dequantize(self.dtype, self.bytes(), &mut out).map_err(|reason| self.data_error(reason))?;
        Ok(out)
    }

    /// Row `row` of a matrix (outermost index) as f32 into `out`, whose length is the row length.
    pub fn row_to_f32(&self, row: usize, out: &mut [f32]) -> Result<()> {
        let cols = *self.shape.last().unwrap_or(&1);
        let rows = self.numel() / cols.max(1);
        if row >= rows || out.len() != cols {
            return Err(self.data_error(format!("row {row} of {rows} into a buffer of {} (row length {cols})", out.len())));
        }
        let row_bytes =
            self.dtype.bytes_for(cols).ok_or_else(|| self.data_error(format!("row length {cols} is not whole {:?} blocks", self.dtype)))?;
        let bytes = self
            .bytes()
            .get(row * row_bytes..(row + 1) * row_bytes)
            .ok_or_else(|| self.data_error("data shorter than its shape".into()))?;
        dequantize(self.dtype, bytes, out).map_err(|reason| self.data_error(reason))
    }

    fn data_error(&self, reason: String) -> Error {
        Error::TensorData { tensor: self.name.clone(), reason }
    }
}

fn half_at(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// `block_q8_0`: f16 d, 32 × i8.
fn q8_0(b: &[u8], y: &mut [f32]) {
    let d = half_at(b, 0);
    for (y, &q) in y.iter_mut().zip(&b[2..34]) {
        *y = (q as i8) as f32 * d;
    }
}

/// `block_q4_0`: f16 d, 16 bytes of nibbles; low nibbles are elements 0..16.
fn q4_0(b: &[u8], y: &mut [f32]) {
    let d = half_at(b, 0);
    for (j, &q) in b[2..18].iter().enumerate() {
        y[j] = ((q & 0x0F) as i32 - 8) as f32 * d;
        y[j + 16] = ((q >> 4) as i32 - 8) as f32 * d;
    }
}

/// `block_q4_1`: f16 d, f16 m, 16 bytes of nibbles.
fn q4_1(b: &[u8], y: &mut [f32]) {
    let (d, m) = (half_at(b, 0), half_at(b, 2));
    for (j, &q) in b[4..20].iter().enumerate() {
        y[j] = (q & 0x0F) as f32 * d + m;
        y[j + 16] = (q >> 4) as f32 * d + m;
    }
}

/// ggml's `get_scale_min_k4`: 6-bit scale and min `j` of the 12 packed bytes.
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

/// `block_q4_K`: f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes of nibbles.
fn q4_k(b: &[u8], y: &mut [f32]) {
    let (d, min) = (half_at(b, 0), half_at(b, 2));
    let scales = &b[4..16];
    let qs = &b[16..144];
    for (chunk, (q, y)) in qs.chunks_exact(32).zip(y.chunks_exact_mut(64)).enumerate() {
        let (sc1, m1) = scale_min_k4(2 * chunk, scales);
        let (sc2, m2) = scale_min_k4(2 * chunk + 1, scales);
        let (d1, m1) = (d * sc1 as f32, min * m1 as f32);
        let (d2, m2) = (d * sc2 as f32, min * m2 as f32);
        for l in 0..32 {
            y[l] = d1 * (q[l] & 0x0F) as f32 - m1;
            y[l + 32] = d2 * (q[l] >> 4) as f32 - m2;
        }
    }
}

/// `block_q6_K`: 128 bytes low nibbles, 64 bytes high 2-bit pairs, 16 × i8 scales, f16 d.
fn q6_k(b: &[u8], y: &mut [f32]) {
    let d = half_at(b, 208);
    for half in 0..QK_K / 128 {
        let ql = &b[64 * half..64 * half + 64];
        let qh = &b[128 + 32 * half..128 + 32 * half + 32];
        let sc = &b[192 + 8 * half..192 + 8 * half + 8];
        let y = &mut y[128 * half..128 * half + 128];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            let s = |i: usize| d * (sc[i] as i8) as f32;
            y[l] = s(is) * q1 as f32;
            y[l + 32] = s(is + 2) * q2 as f32;
            y[l + 64] = s(is + 4) * q3 as f32;
            y[l + 96] = s(is + 6) * q4 as f32;
        }
    }
}
