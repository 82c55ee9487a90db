//! A tiny GGUF v3 writer for tests: metadata values and raw tensor blocks,
//! laid out as ggml's gguf.cpp writes them (data aligned to 32 bytes).
#![allow(dead_code)]

use peregrine_engine::config::ModelConfig;
use peregrine_engine::gguf::{tensor_name, MetaValue};
use peregrine_engine::weights::{LayerRole, WeightRole};

const ALIGN: usize = 32;

/// Metadata and tensors to serialise.
#[derive(Default)]
pub struct GgufWriter {
    pub kv: Vec<(String, MetaValue)>,
    /// name, ggml type id, shape outermost-first, raw bytes.
    pub tensors: Vec<(String, u32, Vec<usize>, Vec<u8>)>,
}

impl GgufWriter {
    pub fn kv(mut self, key: &str, v: MetaValue) -> Self {
        self.kv.push((key.into(), v));
        self
    }

    pub fn f32_tensor(mut self, name: &str, shape: Vec<usize>, seed: u32) -> Self {
        let n: usize = shape.iter().product();
        let bytes =
            (0..n).flat_map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) as f32 / u32::MAX as f32 - 0.5).to_le_bytes()).collect();
        self.tensors.push((name.into(), 0, shape, bytes));
        self
    }

    pub fn raw_tensor(mut self, name: &str, type_id: u32, shape: Vec<usize>, bytes: Vec<u8>) -> Self {
        self.tensors.push((name.into(), type_id, shape, bytes));
        self
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(b"GGUF");
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.kv.len() as u64).to_le_bytes());
        for (k, v) in &self.kv {
            put_str(&mut out, k);
            out.extend_from_slice(&type_id(v).to_le_bytes());
            put_value(&mut out, v);
        }
        let mut offset = 0usize;
        for (name, ty, shape, bytes) in &self.tensors {
            put_str(&mut out, name);
            out.extend_from_slice(&(shape.len() as u32).to_le_bytes());
            for d in shape.iter().rev() {
                out.extend_from_slice(&(*d as u64).to_le_bytes());
            }
            out.extend_from_slice(&ty.to_le_bytes());
            out.extend_from_slice(&(offset as u64).to_le_bytes());
            offset += bytes.len().div_ceil(ALIGN) * ALIGN;
        }
        for (_, _, _, bytes) in &self.tensors {
            out.resize(out.len().div_ceil(ALIGN) * ALIGN, 0);
            out.extend_from_slice(bytes);
        }
        out
    }

    pub fn write(&self, dir: &std::path::Path, name: &str) -> std::path::PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, self.to_bytes()).unwrap();
        path
    }
}

/// A complete F32 model of `config`'s shape under llama.cpp's names.
pub fn model_writer(arch: &str, config: &ModelConfig) -> GgufWriter {
    let a = |k: &str| format!("{arch}.{k}");
    let u = |v: usize| MetaValue::U32(v as u32);
    let mut w = GgufWriter::default()
        .kv("general.architecture", MetaValue::String(arch.into()))
        .kv("general.name", MetaValue::String(config.name.clone()))
        .kv(&a("embedding_length"), u(config.hidden_size))
        .kv(&a("feed_forward_length"), u(config.intermediate_size))
        .kv(&a("block_count"), u(config.num_layers))
        .kv(&a("attention.head_count"), u(config.num_heads))
        .kv(&a("attention.head_count_kv"), u(config.num_kv_heads))
        .kv(&a("attention.layer_norm_rms_epsilon"), MetaValue::F32(config.rms_norm_eps))
        .kv(&a("rope.freq_base"), MetaValue::F32(config.rope_theta))
        .kv(&a("context_length"), u(config.max_context));
    let mut roles = vec![WeightRole::Embed];
    for i in 0..config.num_layers {
        roles.extend(LayerRole::ALL.iter().filter(|r| config.attention_bias || !r.is_bias()).map(|&r| WeightRole::Layer(i, r)));
    }
    roles.push(WeightRole::FinalNorm);
    if !config.tie_embeddings {
        roles.push(WeightRole::LmHead);
    }
    for (seed, role) in roles.into_iter().enumerate() {
        w = w.f32_tensor(&tensor_name(role), role.expected_shape(config), seed as u32);
    }
    w
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn type_id(v: &MetaValue) -> u32 {
    match v {
        MetaValue::U8(_) => 0,
        MetaValue::I8(_) => 1,
        MetaValue::U16(_) => 2,
        MetaValue::I16(_) => 3,
        MetaValue::U32(_) => 4,
        MetaValue::I32(_) => 5,
        MetaValue::F32(_) => 6,
        MetaValue::Bool(_) => 7,
        MetaValue::String(_) => 8,
        MetaValue::Array(_) => 9,
        MetaValue::U64(_) => 10,
        MetaValue::I64(_) => 11,
        MetaValue::F64(_) => 12,
    }
}

fn put_value(out: &mut Vec<u8>, v: &MetaValue) {
    match v {
        MetaValue::U8(x) => out.push(*x),
        MetaValue::I8(x) => out.push(*x as u8),
        MetaValue::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::Bool(x) => out.push(*x as u8),
        MetaValue::String(s) => put_str(out, s),
        MetaValue::Array(items) => {
            let elem = items.first().map(type_id).unwrap_or(0);
            out.extend_from_slice(&elem.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            items.iter().for_each(|i| put_value(out, i));
        }
        MetaValue::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}

/// A fresh empty directory under Cargo's scratch folder for integration tests
/// (`target/tmp`): scratch stays in the build folder (`cargo clean` clears it), not in /tmp.
pub fn temp_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("peregrine-test-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
