//! The fast CPU kernels on random blocks of every weight type: the packed form
//! dequantizes exactly as the loaders do, activation quantization and every SIMD
//! matmul equal the portable fallback bit for bit, and the portable result is the
//! dot product of the dequantized operands.

use std::sync::Arc;

use half::f16;
use peregrine_engine::cpu::act_quant::{ActPrecision, QuantActs, HI_SCALE, QBLOCK};
use peregrine_engine::cpu::isa::Isa;
use peregrine_engine::cpu::kernels::{matmul, MatmulIo};
use peregrine_engine::cpu::packed::PackedMatrix;
use peregrine_engine::lab::rng::SplitMix64;
use peregrine_engine::tensor::{DType, Storage, Tensor};

/// Every weight type the loaders accept.
const ALL_TYPES: [DType; 8] = [DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::F32, DType::F16, DType::BF16];
/// Rows: two whole groups plus a partial one (padding must not leak).
const ROWS: usize = 40;
/// Columns: two K-quant super-blocks.
const COLS: usize = 512;
/// Largest batch tried: one full tile of 4 plus a remainder of 3.
const MAX_TOKENS: usize = 7;

/// A [rows, cols] tensor of random blocks with sane (finite, small) scales.
fn random_tensor(dtype: DType, rows: usize, cols: usize, rng: &mut SplitMix64) -> Tensor {
    let n = rows * cols;
    let mut bytes: Vec<u8> = (0..dtype.bytes_for(n).unwrap()).map(|_| rng.next_u64() as u8).collect();
    let put_half = |b: &mut [u8], at: usize, v: f32| b[at..at + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes());
    let bb = dtype.block_bytes();
    match dtype {
        DType::F32 => bytes.chunks_exact_mut(4).for_each(|c| c.copy_from_slice(&rng.next_signed().to_le_bytes())),
        DType::F16 => bytes.chunks_exact_mut(2).for_each(|c| put_half(c, 0, rng.next_signed())),
        DType::BF16 => bytes.chunks_exact_mut(2).for_each(|c| c.copy_from_slice(&half::bf16::from_f32(rng.next_signed()).to_le_bytes())),
        DType::Q4_0 | DType::Q8_0 => bytes.chunks_exact_mut(bb).for_each(|b| put_half(b, 0, 0.01 * rng.next_signed())),
        DType::Q4_1 | DType::Q4_K => bytes.chunks_exact_mut(bb).for_each(|b| {
            put_half(b, 0, 0.01 * rng.next_signed());
            put_half(b, 2, 0.02 * rng.next_signed());
        }),
        DType::Q6_K => bytes.chunks_exact_mut(bb).for_each(|b| put_half(b, 208, 0.001 * rng.next_signed())),
    }
    Tensor { name: format!("{dtype:?}"), dtype, shape: vec![rows, cols], storage: Storage::Owned(Arc::new(bytes)) }
}

fn activations(tokens: usize, rng: &mut SplitMix64) -> Vec<Vec<f32>> {
    // A few outliers per row, as real hidden states have.
    (0..tokens).map(|_| (0..COLS).map(|i| rng.next_signed() * if i % 97 == 0 { 8.0 } else { 1.0 }).collect()).collect()
}

/// Both activation precisions.
const PRECISIONS: [ActPrecision; 2] = [ActPrecision::Int8, ActPrecision::Int16];

/// Runs the matmul with `isa` and returns `[token][row]`.
fn run(isa: Isa, precision: ActPrecision, w: &PackedMatrix, x: &[Vec<f32>]) -> Vec<Vec<f32>> {
    let mut q = QuantActs::new(COLS, x.len(), precision);
    let view = q.view();
    for (t, row) in x.iter().enumerate() {
        // SAFETY: single-threaded; nothing else touches the buffers.
        unsafe { view.quantize(isa, t, 0, row) };
    }
    let acts: Vec<_> = (0..x.len()).map(|t| view.token(t)).collect();
    let float: Vec<*const f32> = x.iter().map(|r| r.as_ptr()).collect();
    let mut out = vec![vec![f32::NAN; w.padded_rows()]; x.len()];
    let out_ptrs: Vec<*mut f32> = out.iter_mut().map(|r| r.as_mut_ptr()).collect();
    // SAFETY: isa is supported; buffers have cols inputs and padded_rows outputs.
    unsafe { matmul(isa, w, 0..w.groups(), MatmulIo { quant: &acts, precision, float: &float, out: &out_ptrs }) };
    out.iter_mut().for_each(|r| r.truncate(w.rows));
    out
}

#[test]
fn packed_rows_dequantize_exactly_as_the_loader() {
    let mut rng = SplitMix64(1);
    for dtype in ALL_TYPES {
        let t = random_tensor(dtype, ROWS, COLS, &mut rng);
        let w = PackedMatrix::from_tensor(&t).unwrap();
        let mut expected = vec![0.0; COLS];
        for r in 0..ROWS {
            t.row_to_f32(r, &mut expected).unwrap();
            let got = w.row_to_f32(r);
            for (c, (g, e)) in got.iter().zip(&expected).enumerate() {
                // Equal values (the sign of a zero may differ: d·c + m vs (c − 8)·d).
                assert!(g == e, "{dtype:?} row {r} col {c}: packed {g}, loader {e}");
            }
        }
    }
}

#[test]
fn simd_activation_quantization_equals_portable() {
    let mut rng = SplitMix64(2);
    // COLS is whole gangs of 16 blocks; two more blocks take the per-block path.
    let cols = COLS + 2 * QBLOCK;
    let mut x: Vec<Vec<f32>> = activations(3, &mut rng);
    for row in &mut x {
        row.extend((0..2 * QBLOCK).map(|i| rng.next_signed() * if i == 7 { 8.0 } else { 1.0 }));
    }
    let mut zeros = vec![0.0; cols];
    zeros[5] = -0.0;
    // One block all zeros among others (a zero scale inside a gang).
    x[1][3 * QBLOCK..4 * QBLOCK].fill(0.0);
    for (isa, precision) in Isa::available().into_iter().flat_map(|i| PRECISIONS.map(|p| (i, p))) {
        for row in x.iter().chain([&zeros]) {
            let (mut a, mut b) = (QuantActs::new(cols, 1, precision), QuantActs::new(cols, 1, precision));
            let (va, vb) = (a.view(), b.view());
            // SAFETY: single-threaded.
            unsafe {
                va.quantize(Isa::Portable, 0, 0, row);
                vb.quantize(isa, 0, 0, row);
            }
            let (ta, tb) = (va.token(0), vb.token(0));
            // SAFETY: each buffer holds `cols` codes and cols/32 (/16) block values.
            unsafe {
                for i in 0..cols {
                    assert_eq!(*ta.hi.add(i), *tb.hi.add(i), "{isa:?} {precision:?}: code {i}");
                    if precision == ActPrecision::Int16 {
                        assert_eq!(*ta.lo.add(i), *tb.lo.add(i), "{isa:?}: low code {i}");
                        assert!((-64..64).contains(&*tb.lo.add(i)) && *tb.hi.add(i) != i8::MIN);
                    }
                }
                for b in 0..cols / QBLOCK {
                    assert_eq!((*ta.d.add(b)).to_bits(), (*tb.d.add(b)).to_bits(), "{isa:?}: scale {b}");
                    assert_eq!((*ta.s32.add(b)).to_bits(), (*tb.s32.add(b)).to_bits(), "{isa:?}: sum {b}");
                }
                for h in 0..cols / 16 {
                    assert_eq!(*ta.isum16.add(h), *tb.isum16.add(h), "{isa:?}: half sum {h}");
                    assert_eq!((*ta.s16.add(h)).to_bits(), (*tb.s16.add(h)).to_bits(), "{isa:?}: half sum {h}");
                }
            }
        }
    }
}

#[test]
fn simd_matmul_equals_portable_for_every_type() {
    let mut rng = SplitMix64(3);
    eprintln!("instruction sets on this CPU: {:?}", Isa::available());
    for dtype in ALL_TYPES {
        let w = PackedMatrix::from_tensor(&random_tensor(dtype, ROWS, COLS, &mut rng)).unwrap();
        for (tokens, precision) in (1..=MAX_TOKENS).flat_map(|t| PRECISIONS.map(|p| (t, p))) {
            let x = activations(tokens, &mut rng);
            let reference = run(Isa::Portable, precision, &w, &x);
            for isa in Isa::available() {
                let got = run(isa, precision, &w, &x);
                for (t, (g, r)) in got.iter().zip(&reference).enumerate() {
                    for (row, (a, b)) in g.iter().zip(r).enumerate() {
                        assert_eq!(
                            a.to_bits(),
                            b.to_bits(),
                            "{dtype:?} {isa:?} {precision:?} {tokens} tokens: token {t} row {row}: {a} vs portable {b}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn portable_matmul_is_the_dot_of_dequantized_operands() {
    let mut rng = SplitMix64(4);
    for (dtype, precision) in ALL_TYPES.into_iter().flat_map(|d| PRECISIONS.map(|p| (d, p))) {
        let t = random_tensor(dtype, ROWS, COLS, &mut rng);
        let w = PackedMatrix::from_tensor(&t).unwrap();
        let x = activations(2, &mut rng);
        let got = run(Isa::Portable, precision, &w, &x);
        // Float weights see f32 activations; quantized ones the dequantized codes.
        let mut q = QuantActs::new(COLS, x.len(), precision);
        let view = q.view();
        let mut worst_act_err = 0.0f64;
        for (tok, row) in x.iter().enumerate() {
            // SAFETY: single-threaded.
            unsafe { view.quantize(Isa::Portable, tok, 0, row) };
            let a = view.token(tok);
            let xa: Vec<f64> = if matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
                row.iter().map(|&v| v as f64).collect()
            } else {
                // SAFETY: COLS codes per plane and COLS/32 scales.
                (0..COLS)
                    .map(|i| unsafe {
                        let code = match precision {
                            ActPrecision::Int8 => *a.hi.add(i) as i32,
                            ActPrecision::Int16 => HI_SCALE * *a.hi.add(i) as i32 + *a.lo.add(i) as i32,
                        };
                        code as f64 * *a.d.add(i / QBLOCK) as f64
                    })
                    .collect()
            };
            let err = xa.iter().zip(row).map(|(a, &b)| (a - b as f64).powi(2)).sum::<f64>().sqrt()
                / row.iter().map(|&b| (b as f64).powi(2)).sum::<f64>().sqrt();
            worst_act_err = worst_act_err.max(err);
            let mut wr = vec![0.0; COLS];
            for (r, &value) in got[tok].iter().enumerate() {
                t.row_to_f32(r, &mut wr).unwrap();
                let exact: f64 = wr.iter().zip(&xa).map(|(&w, &x)| w as f64 * x).sum();
                let norm: f64 = wr.iter().zip(&xa).map(|(&w, &x)| (w as f64 * x).abs()).sum();
                let err = (value as f64 - exact).abs();
                assert!(
                    err <= 1e-5 * norm.max(1e-30),
                    "{dtype:?} {precision:?} token {tok} row {r}: {value} vs exact {exact} (scale {norm})"
                );
            }
        }
        // The activations themselves: 8 bits ≈ 1 %, 15 bits ≈ 0.01 % relative error.
        let bound = match precision {
            ActPrecision::Int8 => 2e-2,
            ActPrecision::Int16 => 2e-4,
        };
        assert!(worst_act_err < bound, "{dtype:?} {precision:?}: activation error {worst_act_err:.2e}");
    }
}
