//! Quantization to Q8_0 exactly as ggml's `quantize_row_q8_0_ref` (ggml-quants.c):
//! d = amax/127 stored as f16, codes round(x/d) half away from zero, computed with the
//! f32 reciprocal of the unrounded d as ggml does, so the bytes match llama.cpp's.

use std::sync::Arc;

use half::f16;

use crate::error::{Error, Result};
use crate::tensor::{DType, Storage, Tensor};

/// Elements per Q8_0 block (`QK8_0`).
const QK8_0: usize = 32;
/// Largest Q8_0 code magnitude, `(1 << 7) - 1`.
const Q8_0_MAX: f32 = 127.0;

/// `values` as Q8_0 blocks (34 bytes per 32 values). A partial last block is quantized
/// as if padded with zeros (ggml requires whole blocks; [`q8_0_tensor`] checks them).
pub fn quantize_q8_0(values: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len().div_ceil(QK8_0) * DType::Q8_0.block_bytes());
    for block in values.chunks(QK8_0) {
        // ggml's MAX(amax, fabsf(v)) keeps its exact NaN behaviour: `a > b ? a : b`.
        let amax = block.iter().fold(0.0f32, |amax, v| if amax > v.abs() { amax } else { v.abs() });
        let d = amax / Q8_0_MAX;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
        // f32::round is C's roundf (half away from zero); the cast saturates like the
        // in-range conversion ggml relies on.
        out.extend(block.iter().map(|&x| (x * id).round() as i8 as u8));
        out.resize(out.len() + QK8_0 - block.len(), 0);
    }
    out
}

/// An owned Q8_0 tensor of `shape` (rows along the last dimension) from `values` in row-major order.
pub fn q8_0_tensor(name: impl Into<String>, shape: Vec<usize>, values: &[f32]) -> Result<Tensor> {
    let name = name.into();
    let numel: usize = shape.iter().product();
    let row = shape.last().copied().unwrap_or(0);
    if numel != values.len() || !row.is_multiple_of(QK8_0) {
        return Err(Error::TensorData {
            tensor: name,
            reason: format!("{} values for shape {shape:?} (Q8_0 rows must be whole {QK8_0}-element blocks)", values.len()),
        });
    }
    Ok(Tensor { name, dtype: DType::Q8_0, shape, storage: Storage::Owned(Arc::new(quantize_q8_0(values))) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::quant::dequantize;
    use crate::lab::rng::SplitMix64;

    #[test]
    fn hand_made_block_has_known_bytes() {
        // amax 127 gives d = 1 exactly: codes are the values rounded half away from zero.
        let mut x = [0.0f32; 32];
        x[..8].copy_from_slice(&[127.0, -127.0, 2.5, -2.5, 0.49, 3.5, -0.5, 100.2]);
        let q = quantize_q8_0(&x);
        assert_eq!(q.len(), 34);
        assert_eq!(q[..2], [0x00, 0x3C]);
        assert_eq!(q[2..10].iter().map(|&b| b as i8).collect::<Vec<_>>(), [127, -127, 3, -3, 0, 4, -1, 100]);
        assert!(q[10..].iter().all(|&b| b == 0));
        assert_eq!(quantize_q8_0(&[0.0; 32]), vec![0; 34]);
        // A partial block is zero padded.
        assert_eq!(quantize_q8_0(&x[..5])[..7], q[..7]);
        assert_eq!(quantize_q8_0(&x[..5]).len(), 34);
    }

    #[test]
    fn round_trip_is_within_half_a_step() {
        let mut rng = SplitMix64(5);
        let values: Vec<f32> = (0..32 * 64).map(|i| rng.next_signed() * (1 + i % 7) as f32 * 0.1).collect();
        let t = q8_0_tensor("q", vec![16, 128], &values).unwrap();
        let back = t.to_f32().unwrap();
        for (b, (x, y)) in values.chunks(32).zip(back.chunks(32)).enumerate() {
            let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            let (d, d16) = (amax / 127.0, half::f16::from_le_bytes([t.bytes()[34 * b], t.bytes()[34 * b + 1]]).to_f32());
            // Codes use the exact d, values the stored f16: half a step plus 127 × the scale's rounding.
            let tol = d / 2.0 + 127.0 * (d - d16).abs() + 1e-7;
            for (x, y) in x.iter().zip(y) {
                assert!((x - y).abs() <= tol, "block {b}: {x} -> {y}, tol {tol}");
            }
        }
        // With d a power of two the f16 is exact and the bound is d/2 itself.
        let x: Vec<f32> = (0..32).map(|i| if i == 0 { 127.0 / 64.0 } else { rng.next_signed() * 1.9 }).collect();
        let mut y = vec![0.0; 32];
        dequantize(DType::Q8_0, &quantize_q8_0(&x), &mut y).unwrap();
        assert!(x.iter().zip(&y).all(|(a, b)| (a - b).abs() <= 0.5 / 64.0));
        assert!(q8_0_tensor("bad", vec![2, 48], &[0.0; 96]).is_err());
        assert!(q8_0_tensor("bad", vec![2, 32], &[0.0; 96]).is_err());
    }
}
