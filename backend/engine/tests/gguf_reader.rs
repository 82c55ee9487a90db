//! The GGUF reader on small files written here: round trip of every metadata
//! type, and corrupt or truncated files that must fail with a message, never panic.

mod common;

use common::gguf_writer::{temp_dir, GgufWriter};
use peregrine_engine::gguf::{GgufFile, MetaValue};
use peregrine_engine::Error;

fn sample() -> GgufWriter {
    GgufWriter::default()
        .kv("general.architecture", MetaValue::String("llama".into()))
        .kv("t.u8", MetaValue::U8(7))
        .kv("t.i8", MetaValue::I8(-7))
        .kv("t.u16", MetaValue::U16(700))
        .kv("t.i16", MetaValue::I16(-700))
        .kv("t.i32", MetaValue::I32(-70_000))
        .kv("t.u64", MetaValue::U64(1 << 40))
        .kv("t.i64", MetaValue::I64(-(1 << 40)))
        .kv("t.f64", MetaValue::F64(0.25))
        .kv("t.bool", MetaValue::Bool(true))
        .kv("t.arr", MetaValue::Array(vec![MetaValue::String("a".into()), MetaValue::String("bc".into())]))
        // First, so that truncating the file cuts a known-type tensor before it.
        .raw_tensor("odd.weight", 6, vec![32], vec![0; 22])
        .f32_tensor("a.weight", vec![3, 4], 1)
        .raw_tensor("q.weight", 8, vec![2, 32], vec![0; 68])
}

#[test]
fn round_trip_metadata_and_tensors() {
    let dir = temp_dir("gguf-roundtrip");
    let g = GgufFile::open(&sample().write(&dir, "s.gguf")).unwrap();
    assert_eq!(g.get_str("general.architecture"), Some("llama"));
    assert_eq!(g.get_u64("t.u8"), Some(7));
    assert_eq!(g.get_u64("t.i8"), None);
    assert_eq!(g.get("t.i8").and_then(MetaValue::as_i64), Some(-7));
    assert_eq!(g.get_u64("t.u16"), Some(700));
    assert_eq!(g.get("t.i16").and_then(MetaValue::as_i64), Some(-700));
    assert_eq!(g.get_f32("t.i32"), Some(-70_000.0));
    assert_eq!(g.get_u64("t.u64"), Some(1 << 40));
    assert_eq!(g.get("t.i64").and_then(MetaValue::as_i64), Some(-(1 << 40)));
    assert_eq!(g.get_f32("t.f64"), Some(0.25));
    assert_eq!(g.get("t.bool").and_then(MetaValue::as_bool), Some(true));
    let arr = g.get("t.arr").and_then(MetaValue::as_array).unwrap();
    assert_eq!(arr.iter().filter_map(MetaValue::as_str).collect::<Vec<_>>(), ["a", "bc"]);

    let a = g.tensor("a.weight").unwrap();
    assert_eq!(a.shape, vec![3, 4]);
    assert_eq!(a.to_f32().unwrap().len(), 12);
    assert!(g.tensors.iter().all(|t| t.offset % 32 == 0));
    let q = g.tensor("q.weight").unwrap();
    assert_eq!((q.shape.clone(), q.bytes().len()), (vec![2, 32], 68));
}

#[test]
fn unknown_type_fails_only_when_used() {
    let dir = temp_dir("gguf-unknown-type");
    let path = sample().write(&dir, "s.gguf");
    let g = GgufFile::open(&path).unwrap();
    let err = g.tensor("odd.weight").unwrap_err();
    assert!(matches!(err, Error::UnsupportedDType { .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("odd.weight") && msg.contains("s.gguf") && msg.contains("unsupported quant type"), "{msg}");
    let missing = g.tensor("nope.weight").unwrap_err().to_string();
    assert!(missing.contains("missing tensor `nope.weight`"), "{missing}");
}

#[test]
fn every_truncation_is_an_error() {
    let dir = temp_dir("gguf-truncated");
    let bytes = sample().to_bytes();
    for len in 0..bytes.len() {
        let path = dir.join("t.gguf");
        std::fs::write(&path, &bytes[..len]).unwrap();
        let err = GgufFile::open(&path).expect_err(&format!("prefix of {len} bytes opened"));
        assert!(err.to_string().contains("t.gguf"), "{err}");
    }
}

#[test]
fn bad_magic_version_and_counts() {
    let dir = temp_dir("gguf-bad-header");
    let good = sample().to_bytes();
    let cases: [(usize, &[u8], &str); 4] = [
        (0, b"GGML", "magic"),
        (4, &7u32.to_le_bytes(), "version"),
        (8, &u64::MAX.to_le_bytes(), "tensor count"),
        (16, &(u64::MAX / 2).to_le_bytes(), "metadata count"),
    ];
    for (at, patch, word) in cases {
        let mut bytes = good.clone();
        bytes[at..at + patch.len()].copy_from_slice(patch);
        let path = dir.join("h.gguf");
        std::fs::write(&path, &bytes).unwrap();
        let msg = GgufFile::open(&path).unwrap_err().to_string();
        assert!(msg.contains(word) && msg.contains("corrupt"), "{word}: {msg}");
    }
}

#[test]
fn misaligned_or_out_of_bounds_tensor_data() {
    let dir = temp_dir("gguf-bounds");
    let big = GgufWriter::default().f32_tensor("x", vec![4], 0);
    let mut bytes = big.to_bytes();
    bytes.truncate(bytes.len() - 1);
    std::fs::write(dir.join("b.gguf"), &bytes).unwrap();
    let msg = GgufFile::open(&dir.join("b.gguf")).unwrap_err().to_string();
    assert!(msg.contains("past the end"), "{msg}");

    let align = GgufWriter::default().kv("general.alignment", MetaValue::U32(24)).f32_tensor("x", vec![4], 0);
    let msg = GgufFile::open(&align.write(&dir, "a.gguf")).unwrap_err().to_string();
    assert!(msg.contains("alignment"), "{msg}");
}

#[test]
fn random_corruption_never_panics() {
    let dir = temp_dir("gguf-fuzz");
    let good = sample().to_bytes();
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let path = dir.join("f.gguf");
    for _ in 0..400 {
        let mut bytes = good.clone();
        for _ in 0..1 + next() % 4 {
            let at = (next() as usize) % bytes.len();
            bytes[at] = next() as u8;
        }
        std::fs::write(&path, &bytes).unwrap();
        if let Ok(g) = GgufFile::open(&path) {
            for t in &g.tensors {
                if let Ok(t) = g.tensor(&t.name) {
                    let _ = t.to_f32();
                }
            }
        }
    }
}

#[test]
fn missing_file_is_an_io_error() {
    let err = GgufFile::open(std::path::Path::new("/nonexistent/model.gguf")).unwrap_err();
    assert!(matches!(err, Error::Io { .. }) && err.to_string().contains("/nonexistent/model.gguf"), "{err}");
}
