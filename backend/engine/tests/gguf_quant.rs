//! Dequantization matches llama.cpp's gguf-py bit for bit on random blocks
//! (fixtures written by scripts/fixtures/make_quant_fixtures.py).

use std::path::PathBuf;
use std::sync::Arc;

use peregrine_engine::tensor::{DType, Storage, Tensor};

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/quant").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn check(name: &str, dtype: DType) {
    let raw = fixture(&format!("{name}.bin"));
    let expected: Vec<f32> =
        fixture(&format!("{name}.f32")).chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    let t = Tensor { name: name.into(), dtype, shape: vec![expected.len()], storage: Storage::Owned(Arc::new(raw)) };
    let got = t.to_f32().unwrap();
    assert_eq!(got.len(), expected.len(), "{name}: length");
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        assert!(g.to_bits() == e.to_bits(), "{name}[{i}]: got {g}, expected {e}");
    }
    assert!(expected.iter().any(|v| *v != 0.0), "{name}: fixture is all zeros");
}

#[test]
fn f32_matches_gguf_py() {
    check("f32", DType::F32);
}

#[test]
fn f16_matches_gguf_py() {
    check("f16", DType::F16);
}

#[test]
fn bf16_matches_gguf_py() {
    check("bf16", DType::BF16);
}

#[test]
fn q8_0_matches_gguf_py() {
    check("q8_0", DType::Q8_0);
}

#[test]
fn q4_0_matches_gguf_py() {
    check("q4_0", DType::Q4_0);
}

#[test]
fn q4_1_matches_gguf_py() {
    check("q4_1", DType::Q4_1);
}

#[test]
fn q4_k_matches_gguf_py() {
    check("q4_k", DType::Q4_K);
}

#[test]
fn q6_k_matches_gguf_py() {
    check("q6_k", DType::Q6_K);
}

#[test]
fn rows_match_whole_tensor() {
    let raw = fixture("q4_k.bin");
    let t = Tensor { name: "m".into(), dtype: DType::Q4_K, shape: vec![3, 512], storage: Storage::Owned(Arc::new(raw)) };
    let all = t.to_f32().unwrap();
    let mut row = vec![0.0; 512];
    t.row_to_f32(2, &mut row).unwrap();
    assert_eq!(&row[..], &all[1024..]);
    assert!(t.row_to_f32(3, &mut row).is_err());
}

#[test]
fn length_mismatch_is_an_error() {
    let t = Tensor { name: "bad".into(), dtype: DType::Q8_0, shape: vec![64], storage: Storage::Owned(Arc::new(vec![0; 50])) };
    let err = t.to_f32().unwrap_err().to_string();
    assert!(err.contains("bad"), "{err}");
}

#[test]
fn ggml_type_ids() {
    assert_eq!(DType::from_ggml(0), Some(DType::F32));
    assert_eq!(DType::from_ggml(3), Some(DType::Q4_1));
    assert_eq!(DType::from_ggml(14), Some(DType::Q6_K));
    assert_eq!(DType::from_ggml(30), Some(DType::BF16));
    assert_eq!(DType::from_ggml(6), None);
    assert_eq!((DType::Q6_K.block_size(), DType::Q6_K.block_bytes()), (256, 210));
}
