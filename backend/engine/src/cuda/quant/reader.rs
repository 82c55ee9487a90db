//! The CPU model of what the kernel reads: a packed row back to f32 in original
//! element order, following the layout contract word by word (little-endian u32
//! reads, bit positions as written in the spec) and computing each value with
//! ggml's operations in ggml's order, so it is bit-identical to `Tensor::row_to_f32`.

use half::{bf16, f16};

use super::format::{original_group, GpuFormat, BYTE_CODE_BYTES, CHUNK, GROUP, GROUPS, HIGH_BITS_BYTES, NIBBLE_CODE_BYTES};

/// Chunks per K-quant super-block.
const CHUNKS_PER_SUPER: usize = 8;
/// Q4_K and Q4_1 codes are unsigned; Q4_0 centers them on this.
const Q4_0_ZERO: i32 = 8;
/// Q8_0's offset-binary zero (code = i8 q ^ 0x80).
const Q8_0_ZERO: i32 = 128;
/// Q6_K's zero for its 6-bit codes.
const Q6_K_ZERO: i32 = 32;

/// Row `row` of a `fmt` matrix with `k` elements per row, dequantized. Empty when `k` is
/// not whole blocks of `fmt` or `row` is shorter than its planes (a test model: the
/// caller compares lengths).
pub fn dequant_row(fmt: GpuFormat, k: usize, row: &[u8]) -> Vec<f32> {
    let Some(planes) = fmt.plane_offsets(k) else { return Vec::new() };
    if row.len() < planes.end {
        return Vec::new();
    }
    if fmt == GpuFormat::Bf16 {
        return row[..2 * k].chunks_exact(2).map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect();
    }
    let word = |at: usize| u32::from_le_bytes([row[at], row[at + 1], row[at + 2], row[at + 3]]);
    let half = |at: usize| f16::from_le_bytes([row[at], row[at + 1]]).to_f32();
    let chunk_at = planes.chunk_scales.unwrap_or(planes.end);
    let super_at = planes.super_scales.unwrap_or(planes.end);
    let mut out = vec![0.0f32; k];
    for c in 0..k / CHUNK {
        let s = c / CHUNKS_PER_SUPER;
        for stored in 0..GROUPS {
            let j = original_group(stored, c);
            for e in 0..GROUP {
                // The code of stored group `stored`, element `e`, exactly as the spec places it.
                let nibble = || (word(planes.codes + NIBBLE_CODE_BYTES * c + 4 * (stored / 2)) >> (16 * (stored % 2) + 4 * e)) & 0x0F;
                let x = match fmt {
                    GpuFormat::Q8_0 => {
                        let code = (word(planes.codes + BYTE_CODE_BYTES * c + 4 * stored) >> (8 * e)) & 0xFF;
                        (code as i32 - Q8_0_ZERO) as f32 * half(chunk_at + 2 * c)
                    }
                    GpuFormat::Q4_0 => (nibble() as i32 - Q4_0_ZERO) as f32 * half(chunk_at + 2 * c),
                    GpuFormat::Q4_1 => nibble() as f32 * half(chunk_at + 4 * c) + half(chunk_at + 4 * c + 2),
                    GpuFormat::Q4_K => {
                        let (sc, mn) = (row[chunk_at + 2 * c] as f32, row[chunk_at + 2 * c + 1] as f32);
                        let (d, dmin) = (half(super_at + 4 * s), half(super_at + 4 * s + 2));
                        (d * sc) * nibble() as f32 - dmin * mn
                    }
                    GpuFormat::Q6_K => {
                        let high_at = planes.high.unwrap_or(planes.end) + HIGH_BITS_BYTES * c;
                        let high = (word(high_at + 4 * (stored / 4)) >> (8 * (stored % 4) + 2 * e)) & 3;
                        let code = nibble() | high << 4;
                        // sc_lo covers original groups 0..3, sc_hi 4..7: scales are not rotated.
                        let sc = row[chunk_at + 2 * c + usize::from(j >= GROUPS / 2)] as i8;
                        (half(super_at + 2 * s) * sc as f32) * (code as i32 - Q6_K_ZERO) as f32
                    }
                    GpuFormat::Bf16 => unreachable!("returned above"),
                };
                out[CHUNK * c + GROUP * j + e] = x;
            }
        }
    }
    out
}
