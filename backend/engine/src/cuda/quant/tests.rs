//! The packed layout against ggml: random valid blocks of every type, repacked whole
//! and sliced, read back by the CPU model bit for bit as `Tensor::row_to_f32` reads
//! the source; hand-made blocks pin the rotation and bit positions byte by byte.

use std::ops::Range;
use std::sync::Arc;

use half::{bf16, f16};

use super::*;
use crate::lab::rng::SplitMix64;
use crate::tensor::{DType, Storage, Tensor};

const QUANT: [DType; 5] = [DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q4_K, DType::Q6_K];

fn owned(name: &str, dtype: DType, shape: Vec<usize>, bytes: Vec<u8>) -> Tensor {
    Tensor { name: name.into(), dtype, shape, storage: Storage::Owned(Arc::new(bytes)) }
}

/// A small finite f16, ±[0.001, 0.05].
fn small_half(rng: &mut SplitMix64) -> [u8; 2] {
    let v = 0.001 + 0.049 * (rng.next_signed() * 0.5 + 0.5);
    let v = if rng.next_u64() & 1 == 0 { v } else { -v };
    f16::from_f32(v).to_le_bytes()
}

/// Random bytes everywhere, then small finite halves where the block keeps its f16s
/// (codes, Q4_K's 12 scale bytes and Q6_K's int8 scales stay random).
fn random_blocks(dtype: DType, blocks: usize, rng: &mut SplitMix64) -> Vec<u8> {
    let bb = dtype.block_bytes();
    let mut bytes: Vec<u8> = (0..blocks * bb).map(|_| rng.next_u64() as u8).collect();
    let halves: &[usize] = match dtype {
        DType::Q8_0 | DType::Q4_0 => &[0],
        DType::Q4_1 | DType::Q4_K => &[0, 2],
        DType::Q6_K => &[208],
        _ => &[],
    };
    for b in bytes.chunks_exact_mut(bb) {
        for &at in halves {
            b[at..at + 2].copy_from_slice(&small_half(rng));
        }
    }
    bytes
}

fn random_tensor(dtype: DType, rows: usize, cols: usize, seed: u64) -> Tensor {
    let blocks = rows * cols / dtype.block_size();
    owned(&format!("w.{dtype:?}"), dtype, vec![rows, cols], random_blocks(dtype, blocks, &mut SplitMix64(seed)))
}

/// Repacks `rows` × `cols` of `t` and checks every packed row reads back as ggml reads the source.
fn check(t: &Tensor, rows: Range<usize>, cols: Range<usize>) {
    let (fmt, packed) = repack(t, rows.clone(), cols.clone()).unwrap();
    assert_eq!(Some(fmt), GpuFormat::native(t.dtype));
    let k = cols.len();
    let rb = fmt.row_bytes(k).unwrap();
    assert_eq!(packed.len(), rows.len() * rb);
    let mut full = vec![0.0; t.shape[1]];
    for (r, row) in rows.zip(packed.chunks_exact(rb)) {
        t.row_to_f32(r, &mut full).unwrap();
        let got = dequant_row(fmt, k, row);
        let want = &full[cols.clone()];
        assert_eq!(got.len(), k);
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert_eq!(g.to_bits(), w.to_bits(), "{:?} row {r} column {}: {g} != {w}", t.dtype, cols.start + i);
        }
    }
}

#[test]
fn whole_tensors_read_back_bit_for_bit() {
    for (n, dtype) in QUANT.into_iter().enumerate() {
        // Ten legacy chunks: chunk indices past 8 wrap the rotation.
        let cols = if dtype.block_size() == 32 { 320 } else { 768 };
        let t = random_tensor(dtype, 5, cols, 100 + n as u64);
        check(&t, 0..5, 0..cols);
    }
}

#[test]
fn row_and_column_slices_read_back_bit_for_bit() {
    for (n, dtype) in QUANT.into_iter().enumerate() {
        let (cols, slices): (usize, &[Range<usize>]) =
            if dtype.block_size() == 32 { (320, &[32..96, 96..288, 288..320]) } else { (768, &[256..512, 0..256, 512..768]) };
        let t = random_tensor(dtype, 6, cols, 200 + n as u64);
        for s in slices {
            check(&t, 1..4, s.clone());
        }
        check(&t, 5..6, 0..cols);
        // A slice is repacked as its own row: the same bytes as a tensor of just those columns.
        let s = slices[0].clone();
        let (bs, bb) = (dtype.block_size(), dtype.block_bytes());
        let stride = cols / bs * bb;
        let sub: Vec<u8> = (0..6).flat_map(|r| t.bytes()[r * stride + s.start / bs * bb..r * stride + s.end / bs * bb].to_vec()).collect();
        let narrow = owned("narrow", dtype, vec![6, s.len()], sub);
        assert_eq!(repack(&t, 0..6, s.clone()).unwrap().1, repack(&narrow, 0..6, 0..s.len()).unwrap().1);
    }
    let legacy = random_tensor(DType::Q4_1, 3, 128, 7);
    check(&legacy, 0..3, 32..96);
}

#[test]
fn misaligned_or_bad_ranges_are_errors() {
    let q8 = random_tensor(DType::Q8_0, 4, 128, 1);
    let k4 = random_tensor(DType::Q4_K, 4, 768, 2);
    let err = repack(&k4, 0..4, 128..384).unwrap_err().to_string();
    assert!(err.contains("w.Q4_K") && err.contains("Q4_K") && err.contains("128..384"), "{err}");
    let err = repack(&q8, 0..4, 16..48).unwrap_err().to_string();
    assert!(err.contains("w.Q8_0") && err.contains("Q8_0") && err.contains("16..48"), "{err}");
    assert!(repack(&q8, 0..4, 32..100).is_err());
    assert!(repack(&q8, 0..5, 0..128).is_err());
    assert!(repack(&q8, 0..4, 64..64).is_err());
    assert!(repack(&q8, 0..4, 0..160).is_err());
    let vector = owned("v", DType::Q8_0, vec![128], q8.bytes()[..4 * 34].to_vec());
    assert!(repack(&vector, 0..1, 0..128).is_err());
    let short = owned("short", DType::Q8_0, vec![4, 128], q8.bytes()[..3 * 4 * 34].to_vec());
    assert!(repack(&short, 0..1, 0..128).is_err());
    // The fallback takes any columns.
    let bf = repack_bf16(&k4, 1..3, 128..384).unwrap();
    let mut full = vec![0.0; 768];
    k4.row_to_f32(2, &mut full).unwrap();
    let want: Vec<u8> = full[128..384].iter().flat_map(|&v| bf16::from_f32(v).to_le_bytes()).collect();
    assert_eq!(&bf[512..], &want[..]);
}

#[test]
fn gate_and_up_rows_alternate() {
    let gate = random_tensor(DType::Q4_K, 4, 512, 11);
    let up = owned("up", DType::Q4_K, vec![4, 512], random_blocks(DType::Q4_K, 8, &mut SplitMix64(12)));
    let (fmt, fused) = repack_rows_interleaved(&gate, &up, 1..3).unwrap();
    assert_eq!(fmt, GpuFormat::Q4_K);
    let one = |t: &Tensor, r: usize| repack(t, r..r + 1, 0..512).unwrap().1;
    assert_eq!(fused, [one(&gate, 1), one(&up, 1), one(&gate, 2), one(&up, 2)].concat());
    let rb = fmt.row_bytes(512).unwrap();
    let mut want = vec![0.0; 512];
    up.row_to_f32(2, &mut want).unwrap();
    assert_eq!(dequant_row(fmt, 512, &fused[3 * rb..4 * rb]), want);
    let q6 = random_tensor(DType::Q6_K, 4, 512, 13);
    assert!(repack_rows_interleaved(&gate, &q6, 0..4).is_err());
    let wide = random_tensor(DType::Q4_K, 4, 768, 14);
    assert!(repack_rows_interleaved(&gate, &wide, 0..4).is_err());
    assert!(repack_rows_interleaved(&gate, &up, 0..5).is_err());
}

#[test]
fn row_bytes_are_whole_16_byte_lines() {
    for fmt in GpuFormat::ALL.into_iter().filter(|&f| f != GpuFormat::Bf16) {
        for blocks in 1..40 {
            let k = blocks * fmt.block();
            let (p, rb) = (fmt.plane_offsets(k).unwrap(), fmt.row_bytes(k).unwrap());
            assert!(rb.is_multiple_of(16) && rb >= p.end && rb < p.end + 16, "{} k={k}", fmt.name());
        }
        assert_eq!(fmt.row_bytes(fmt.block() + 16), None);
    }
    let rb = |f: GpuFormat, k| f.row_bytes(k).unwrap();
    assert_eq!(
        [rb(GpuFormat::Q8_0, 32), rb(GpuFormat::Q4_0, 32), rb(GpuFormat::Q4_1, 64), rb(GpuFormat::Q4_K, 256), rb(GpuFormat::Q6_K, 256)],
        [48, 32, 48, 160, 224]
    );
    assert_eq!(rb(GpuFormat::Bf16, 5), 10);
    let p = GpuFormat::Q6_K.plane_offsets(512).unwrap();
    assert_eq!((p.codes, p.high, p.super_scales, p.chunk_scales, p.end), (0, Some(256), Some(384), Some(388), 420));
    let p = GpuFormat::Q4_K.plane_offsets(512).unwrap();
    assert_eq!((p.high, p.super_scales, p.chunk_scales, p.end), (None, Some(256), Some(264), 296));
    let p = GpuFormat::Q4_1.plane_offsets(64).unwrap();
    assert_eq!((p.high, p.super_scales, p.chunk_scales, p.end), (None, None, Some(32), 40));
}

#[test]
fn tags_and_native_formats() {
    for fmt in GpuFormat::ALL {
        assert_eq!(GpuFormat::from_tag(fmt.tag()), Some(fmt));
    }
    assert_eq!(GpuFormat::from_tag(6), None);
    assert_eq!(GpuFormat::Q6_K.tag(), 5);
    for d in [DType::F32, DType::F16, DType::BF16] {
        assert_eq!(GpuFormat::native(d), Some(GpuFormat::Bf16));
    }
    assert_eq!(QUANT.map(|d| GpuFormat::native(d).unwrap().name()), ["q8_0", "q4_0", "q4_1", "q4_K", "q6_K"]);
}

#[test]
fn q8_0_rotation_and_codes_are_pinned() {
    // Two blocks with q = 0..31 and d = 1: chunk 0 is stored as is, chunk 1 starts with original group 1.
    let block: Vec<u8> = f16::from_f32(1.0).to_le_bytes().into_iter().chain(0..32u8).collect();
    let t = owned("pin", DType::Q8_0, vec![1, 64], [block.clone(), block].concat());
    let (_, p) = repack(&t, 0..1, 0..64).unwrap();
    assert_eq!(p.len(), 80);
    assert_eq!(p[..32], (128..160u8).collect::<Vec<_>>()[..]);
    assert_eq!(p[32..36], [132, 133, 134, 135]);
    for k in 0..8 {
        let j = (k + 1) % 8;
        let want: Vec<u8> = (0..4).map(|e| 128 + 4 * j as u8 + e).collect();
        assert_eq!(p[32 + 4 * k..36 + 4 * k], want[..], "stored group {k}");
    }
    assert_eq!(p[64..68], [0x00, 0x3C, 0x00, 0x3C]);
    assert!(p[68..].iter().all(|&b| b == 0));
}

#[test]
fn nibble_positions_are_pinned() {
    // Q4_0 byte j holds elements j and j+16: with code = element % 16 every byte is j | j << 4.
    let block: Vec<u8> = [0u8, 0x3C].into_iter().chain((0..16u8).map(|j| j | j << 4)).collect();
    let t = owned("pin", DType::Q4_0, vec![1, 64], [block.clone(), block].concat());
    let (_, p) = repack(&t, 0..1, 0..64).unwrap();
    assert_eq!(p[..16], [0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE, 0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE]);
    // Chunk 1, stored group 0 = elements 4..7; stored group 7 = elements 0..3.
    assert_eq!(p[16..18], [0x54, 0x76]);
    assert_eq!(p[30..32], [0x10, 0x32]);
}

/// A `block_q6_K` from 256 six-bit codes (ggml's ql/qh interleave, inverted).
fn q6_k_block(codes: &[u8], scales: [i8; 16], d: f32) -> Vec<u8> {
    let mut b = vec![0u8; 210];
    for half in 0..2 {
        let y = &codes[128 * half..128 * half + 128];
        for l in 0..32 {
            b[64 * half + l] = (y[l] & 15) | (y[l + 64] & 15) << 4;
            b[64 * half + l + 32] = (y[l + 32] & 15) | (y[l + 96] & 15) << 4;
            b[128 + 32 * half + l] = (y[l] >> 4) | (y[l + 32] >> 4) << 2 | (y[l + 64] >> 4) << 4 | (y[l + 96] >> 4) << 6;
        }
    }
    for (s, v) in b[192..208].iter_mut().zip(scales) {
        *s = v as u8;
    }
    b[208..210].copy_from_slice(&f16::from_f32(d).to_le_bytes());
    b
}

#[test]
fn q6_k_high_bits_and_scales_are_pinned() {
    let codes: Vec<u8> = (0..256).map(|i| (i % 64) as u8).collect();
    let scales: [i8; 16] = std::array::from_fn(|i| i as i8 - 8);
    let t = owned("pin", DType::Q6_K, vec![1, 256], q6_k_block(&codes, scales, 0.5));
    let mut x = vec![0.0; 256];
    t.row_to_f32(0, &mut x).unwrap();
    assert!(x.iter().enumerate().all(|(i, &v)| v == 0.5 * scales[i / 16] as f32 * ((i % 64) as f32 - 32.0)), "builder");
    let (_, p) = repack(&t, 0..1, 0..256).unwrap();
    // Chunk 0 (codes 0..31): groups 0..3 have high bits 0, groups 4..7 have 1.
    assert_eq!(p[128..136], [0x00, 0x00, 0x00, 0x00, 0x55, 0x55, 0x55, 0x55]);
    // Chunk 1 (codes 32..63) starts at original group 1: high 2 for groups 1..3, 3 for 4..7, then group 0.
    assert_eq!(p[136..144], [0xAA, 0xAA, 0xAA, 0xFF, 0xFF, 0xFF, 0xFF, 0xAA]);
    assert_eq!(p[16..18], [0x54, 0x76]);
    assert_eq!(p[192..194], f16::from_f32(0.5).to_le_bytes());
    // Chunk scales are the int8 scales in order, unrotated: chunk 1 holds scales 2 and 3.
    assert_eq!(p[194 + 2..194 + 4], [(-6i8) as u8, (-5i8) as u8]);
    check(&t, 0..1, 0..256);
}

#[test]
fn floats_become_round_to_nearest_even_bf16() {
    let ulp = 2f32.powi(-7);
    let values = [1.0, 1.0 + ulp / 2.0, 1.0 + 1.5 * ulp, -2.5, 3.0e38, 1.0e-40, 0.1, -0.0];
    let t = Tensor::from_f32("f", vec![2, 4], &values);
    let (fmt, p) = repack(&t, 0..2, 0..4).unwrap();
    assert_eq!(fmt, GpuFormat::Bf16);
    let bits: Vec<u16> = p.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect();
    assert_eq!(bits, values.map(|v| bf16::from_f32(v).to_bits()));
    // Ties go to the even mantissa: 1 + ulp/2 → 1, 1 + 1.5 ulp → 1 + 2 ulp.
    assert_eq!(bits[..3], [0x3F80, 0x3F80, 0x3F82]);
    // Float columns need no alignment; F16 sources read as f32 first.
    let h: Vec<u8> = [0.5f32, 0.3, -7.0, 65504.0, 1.0e-3, 2.0].iter().flat_map(|&v| f16::from_f32(v).to_le_bytes()).collect();
    let t16 = owned("h", DType::F16, vec![2, 3], h);
    let (_, p) = repack(&t16, 1..2, 1..3).unwrap();
    let mut row = vec![0.0; 3];
    t16.row_to_f32(1, &mut row).unwrap();
    assert_eq!(dequant_row(GpuFormat::Bf16, 2, &p), row[1..3].iter().map(|&v| bf16::from_f32(v).to_f32()).collect::<Vec<_>>());
}

#[test]
fn reader_refuses_short_rows() {
    assert!(dequant_row(GpuFormat::Q4_K, 256, &[0; 100]).is_empty());
    assert!(dequant_row(GpuFormat::Q8_0, 33, &[0; 100]).is_empty());
}
