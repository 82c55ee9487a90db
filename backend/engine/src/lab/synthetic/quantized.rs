//! Synthetic quantized models: random but valid GGUF blocks of each type whose values
//! have the spread of `synthetic_weights`' floats (zero mean, std 1/sqrt(fan_in)), and
//! llama.cpp's Q4_K_M choice of type per tensor (`llama_tensor_get_type` in
//! src/llama-quant.cpp), so quantized paths run on any shape without a checkpoint.

use std::sync::Arc;

use half::{bf16, f16};

use super::{build_weights, name_and_seed, random_tensor};
use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::lab::rng::SplitMix64;
use crate::tensor::{DType, Storage, Tensor};
use crate::weights::{LayerRole, WeightRole, Weights};

/// Half-width of the uniform per-block jitter of the scales around their mean (real
/// checkpoints' block scales vary; a constant scale would hide indexing bugs).
const SCALE_JITTER: f32 = 0.25;
/// Std of codes uniform on [-127, 127] (Q8_0): sqrt((255² − 1)/12).
const Q8_0_CODE_STD: f32 = 73.61;
/// Std of 4-bit codes uniform on 1..=15 around 8 (Q4_0, kept symmetric): sqrt((15² − 1)/12).
const Q4_0_CODE_STD: f32 = 4.32;
/// Std of 4-bit codes uniform on 0..=15: sqrt((16² − 1)/12).
const NIBBLE_STD: f32 = 4.61;
/// Std of 6-bit codes uniform on 0..=63: sqrt((64² − 1)/12).
const SIX_BIT_STD: f32 = 18.47;
/// K-quant sub-block scales are drawn from this range (6-bit for Q4_K, int8 for Q6_K).
const SUB_SCALES: std::ops::RangeInclusive<u8> = 33..=63;
/// Q4_K's dmin as a multiple of d: keeps every min's 6-bit code (≈ 7.5·sc/8) in range.
const Q4_K_DMIN_RATIO: f32 = 8.0;

/// Which quantized type each matrix of a synthetic model gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantMix {
    /// Every matrix (embedding and LM head included) in this type, where its rows allow.
    Uniform(DType),
    /// llama.cpp's Q4_K_M: see [`q4_k_m_type`].
    Q4KM,
    /// The default model file's mix (SmolLM2-135M-Instruct.Q4_1.gguf): Q4_1 layer
    /// matrices, a Q8_0 embedding (tied: also the LM head).
    Q4_1EmbedQ8_0,
}

/// The names `--weights` takes, bf16 (no mix) first.
pub const MIX_NAMES: [&str; 8] = ["bf16", "q8_0", "q4_0", "q4_1", "q4_k", "q6_k", "q4_k_m", "q4_1+q8_0"];

impl QuantMix {
    /// The mix a `--weights` name means (`bf16`: none), or None for an unknown name.
    pub fn from_name(name: &str) -> Option<Option<QuantMix>> {
        Some(Some(match name {
            "bf16" => return Some(None),
            "q8_0" => QuantMix::Uniform(DType::Q8_0),
            "q4_0" => QuantMix::Uniform(DType::Q4_0),
            "q4_1" => QuantMix::Uniform(DType::Q4_1),
            "q4_k" => QuantMix::Uniform(DType::Q4_K),
            "q6_k" => QuantMix::Uniform(DType::Q6_K),
            "q4_k_m" => QuantMix::Q4KM,
            "q4_1+q8_0" => QuantMix::Q4_1EmbedQ8_0,
            _ => return None,
        }))
    }
}

/// A `[rows, cols]` tensor of random valid `dtype` blocks, zero mean with std about
/// 1/sqrt(cols) like [`super::synthetic_weights`]' matrices; floats are uniform.
pub fn random_quant_tensor(name: &str, dtype: DType, rows: usize, cols: usize, seed: u64) -> Result<Tensor> {
    let bytes = rows.checked_mul(cols).and_then(|n| dtype.bytes_for(n));
    if !cols.is_multiple_of(dtype.block_size()) || bytes.is_none() {
        return Err(Error::TensorData {
            tensor: name.to_string(),
            reason: format!("{rows} rows of {cols} are not whole {:?} blocks of {}", dtype, dtype.block_size()),
        });
    }
    Ok(random_blocks(name.to_string(), dtype, rows, cols, seed))
}

/// Weights of `config`'s shape with matrices quantized as `mix` says (norms and biases
/// f32; a matrix in F32 is exactly `synthetic_weights`' tensor). Names and seeds follow
/// `synthetic_weights`, so equal `(config, seed, mix)` give equal weights.
pub fn synthetic_quant_weights(config: &ModelConfig, seed: u64, mix: QuantMix) -> Weights {
    build_weights(config, &|role| {
        let shape = role.expected_shape(config);
        let &[rows, cols] = shape.as_slice() else { return random_tensor(config, role, seed) };
        let wanted = match mix {
            QuantMix::Uniform(dtype) => dtype,
            QuantMix::Q4KM => q4_k_m_type(role, config),
            QuantMix::Q4_1EmbedQ8_0 => match role {
                WeightRole::Embed | WeightRole::LmHead => DType::Q8_0,
                _ => DType::Q4_1,
            },
        };
        match fit(wanted, cols) {
            DType::F32 => random_tensor(config, role, seed),
            dtype => {
                let (name, tensor_seed) = name_and_seed(role, seed);
                random_blocks(name, dtype, rows, cols, tensor_seed)
            }
        }
    })
}

/// llama.cpp's Q4_K_M type for `role` before the row-length fallback: Q6_K for the
/// output matrix (the embedding too when it is tied, as llama.cpp quantizes a shared
/// tensor as the output) and for attn_v / ffn_down where `use_more_bits`, Q4_K for the
/// other matrices, F32 for norms and biases.
pub fn q4_k_m_type(role: WeightRole, config: &ModelConfig) -> DType {
    match role {
        WeightRole::LmHead => DType::Q6_K,
        WeightRole::Embed if config.tie_embeddings => DType::Q6_K,
        WeightRole::Embed => DType::Q4_K,
        WeightRole::FinalNorm => DType::F32,
        WeightRole::Layer(_, LayerRole::AttnNorm | LayerRole::FfnNorm | LayerRole::QBias | LayerRole::KBias | LayerRole::VBias) => {
            DType::F32
        }
        WeightRole::Layer(i, LayerRole::V | LayerRole::Down) if use_more_bits(i, config.num_layers) => DType::Q6_K,
        WeightRole::Layer(..) => DType::Q4_K,
    }
}

/// llama.cpp's `use_more_bits`: the first and last eighth of the layers and every third in between.
fn use_more_bits(i: usize, n: usize) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// `dtype`, or the type llama.cpp falls back to when a row is not whole blocks of it:
/// K-quants to Q8_0 (llama.cpp takes Q5_0 for Q4_K, which Peregrine does not read), and
/// 32-blocks to F32.
fn fit(dtype: DType, cols: usize) -> DType {
    let mut dtype = dtype;
    if !cols.is_multiple_of(dtype.block_size()) && matches!(dtype, DType::Q4_K | DType::Q6_K) {
        dtype = DType::Q8_0;
    }
    if !cols.is_multiple_of(dtype.block_size()) {
        dtype = DType::F32;
    }
    dtype
}

/// Random blocks of `dtype` for a `[rows, cols]` matrix whose rows are whole blocks.
fn random_blocks(name: String, dtype: DType, rows: usize, cols: usize, seed: u64) -> Tensor {
    let mut rng = SplitMix64(seed);
    let std = 1.0 / (cols.max(1) as f32).sqrt();
    let blocks = rows * cols / dtype.block_size();
    let mut bytes = Vec::with_capacity(blocks * dtype.block_bytes());
    for _ in 0..blocks {
        let jitter = 1.0 + SCALE_JITTER * rng.next_signed();
        push_block(dtype, std * jitter, &mut rng, &mut bytes);
    }
    Tensor { name, dtype, shape: vec![rows, cols], storage: Storage::Owned(Arc::new(bytes)) }
}

/// Appends one random block of `dtype` whose values have std about `std`.
fn push_block(dtype: DType, std: f32, rng: &mut SplitMix64, out: &mut Vec<u8>) {
    let half = |v: f32| f16::from_f32(v).to_le_bytes();
    match dtype {
        // Floats: uniform on [-a, a], a = sqrt(3)·std.
        DType::F32 | DType::F16 | DType::BF16 => {
            let v = 3f32.sqrt() * std * rng.next_signed();
            match dtype {
                DType::F32 => out.extend_from_slice(&v.to_le_bytes()),
                DType::F16 => out.extend_from_slice(&half(v)),
                _ => out.extend_from_slice(&bf16::from_f32(v).to_le_bytes()),
            }
        }
        DType::Q8_0 => {
            out.extend_from_slice(&half(std / Q8_0_CODE_STD));
            let start = out.len();
            random_bytes(32, rng, out);
            // Codes uniform on [-127, 127]: ggml's quantizer never writes -128.
            for q in &mut out[start..] {
                *q = (((*q as u32 * 255) >> 8) as i32 - 127) as i8 as u8;
            }
        }
        DType::Q4_0 => {
            out.extend_from_slice(&half(std / Q4_0_CODE_STD));
            // Codes 1..=15, symmetric around Q4_0's zero of 8: 16 random bits per code.
            let mut codes = [0u8; 32];
            for four in codes.chunks_exact_mut(4) {
                let w = rng.next_u64();
                for (i, c) in four.iter_mut().enumerate() {
                    *c = 1 + ((((w >> (16 * i)) & 0xFFFF) * 15) >> 16) as u8;
                }
            }
            out.extend((0..16).map(|j| codes[j] | codes[j + 16] << 4));
        }
        DType::Q4_1 => {
            let d = f16::from_f32(std / NIBBLE_STD);
            out.extend_from_slice(&d.to_le_bytes());
            out.extend_from_slice(&half(-7.5 * d.to_f32()));
            random_bytes(16, rng, out);
        }
        DType::Q4_K => {
            let d = f16::from_f32(std / (NIBBLE_STD * mid_scale()));
            let dmin = f16::from_f32(d.to_f32() * Q4_K_DMIN_RATIO);
            out.extend_from_slice(&d.to_le_bytes());
            out.extend_from_slice(&dmin.to_le_bytes());
            let mut sc = [0u8; 8];
            let mut mn = [0u8; 8];
            for (s, m) in sc.iter_mut().zip(&mut mn) {
                *s = sub_scale(rng);
                // Centre each sub-block: dmin·mn ≈ 7.5·d·sc, the mean of d·sc·code.
                *m = (7.5 * d.to_f32() * *s as f32 / dmin.to_f32()).round().clamp(0.0, 63.0) as u8;
            }
            out.extend_from_slice(&pack_scale_min_k4(&sc, &mn));
            random_bytes(128, rng, out);
        }
        DType::Q6_K => {
            random_bytes(192, rng, out);
            for _ in 0..16 {
                out.push(sub_scale(rng));
            }
            out.extend_from_slice(&half(std / (SIX_BIT_STD * mid_scale())));
        }
    }
}

/// Appends `n` uniform random bytes (so two uniform 4-bit codes per byte).
fn random_bytes(n: usize, rng: &mut SplitMix64, out: &mut Vec<u8>) {
    let mut left = n;
    while left > 0 {
        let take = left.min(8);
        out.extend_from_slice(&rng.next_u64().to_le_bytes()[..take]);
        left -= take;
    }
}

/// The middle of [`SUB_SCALES`], the mean sub-block scale.
fn mid_scale() -> f32 {
    (*SUB_SCALES.start() as f32 + *SUB_SCALES.end() as f32) / 2.0
}

fn sub_scale(rng: &mut SplitMix64) -> u8 {
    let span = (SUB_SCALES.end() - SUB_SCALES.start()) as u64 + 1;
    SUB_SCALES.start() + (rng.next_u64() % span) as u8
}

/// The 12 bytes ggml's `get_scale_min_k4` reads eight 6-bit scales and mins from.
fn pack_scale_min_k4(sc: &[u8; 8], mn: &[u8; 8]) -> [u8; 12] {
    let mut q = [0u8; 12];
    for j in 0..4 {
        // Scales/mins 0..3 fill the low 6 bits of bytes 0..7; 4..7 put their low
        // nibbles in bytes 8..11 and their top two bits above 0..3's.
        q[j] = (sc[j] & 63) | (sc[j + 4] >> 4) << 6;
        q[j + 4] = (mn[j] & 63) | (mn[j + 4] >> 4) << 6;
        q[j + 8] = (sc[j + 4] & 0x0F) | (mn[j + 4] & 0x0F) << 4;
    }
    q
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::source_blocks::scale_min_k4;
    use crate::lab::synthetic::{preset, synthetic_weights};

    #[test]
    fn every_mix_name_parses_and_others_do_not() {
        assert_eq!(QuantMix::from_name("bf16"), Some(None));
        assert_eq!(QuantMix::from_name("q4_k_m"), Some(Some(QuantMix::Q4KM)));
        assert_eq!(QuantMix::from_name("q4_1+q8_0"), Some(Some(QuantMix::Q4_1EmbedQ8_0)));
        assert_eq!(QuantMix::from_name("q6_k"), Some(Some(QuantMix::Uniform(DType::Q6_K))));
        assert!(MIX_NAMES[1..].iter().all(|n| matches!(QuantMix::from_name(n), Some(Some(_)))));
        for bad in ["", "Q8_0", "q5_k", "bf16 "] {
            assert_eq!(QuantMix::from_name(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn packed_scales_read_back() {
        let mut rng = SplitMix64(3);
        for _ in 0..100 {
            let sc: [u8; 8] = std::array::from_fn(|_| (rng.next_u64() % 64) as u8);
            let mn: [u8; 8] = std::array::from_fn(|_| (rng.next_u64() % 64) as u8);
            let q = pack_scale_min_k4(&sc, &mn);
            assert!((0..8).all(|j| scale_min_k4(j, &q) == (sc[j], mn[j])));
        }
    }

    #[test]
    fn random_blocks_have_the_float_spread() {
        for dtype in [DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q4_K, DType::Q6_K] {
            let cols = 1536;
            let t = random_quant_tensor("w", dtype, 64, cols, 9).unwrap();
            let x = t.to_f32().unwrap();
            let n = x.len() as f64;
            let mean = x.iter().map(|&v| v as f64).sum::<f64>() / n;
            let std = (x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n).sqrt();
            let want = 1.0 / (cols as f64).sqrt();
            assert!((std / want - 1.0).abs() < 0.15, "{dtype:?}: std {std:.4} vs {want:.4}");
            assert!(mean.abs() < 0.05 * want, "{dtype:?}: mean {mean:.2e}");
        }
        assert!(random_quant_tensor("w", DType::Q4_K, 2, 384, 1).is_err());
        assert!(random_quant_tensor("w", DType::Q8_0, 2, 48, 1).is_err());
    }

    #[test]
    fn q4_k_m_follows_llama_cpp() {
        let mut c = preset("qwen2.5-coder-1.5b").unwrap();
        // 28 layers: the first 3, the last 4 and layers 5, 8, ..., 23 get Q6_K.
        let more: Vec<usize> = (0..28).filter(|&i| q4_k_m_type(WeightRole::Layer(i, LayerRole::V), &c) == DType::Q6_K).collect();
        assert_eq!(more, [0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 24, 25, 26, 27]);
        assert_eq!(q4_k_m_type(WeightRole::Layer(5, LayerRole::Down), &c), DType::Q6_K);
        assert_eq!(q4_k_m_type(WeightRole::Layer(4, LayerRole::Down), &c), DType::Q4_K);
        assert_eq!(q4_k_m_type(WeightRole::Layer(5, LayerRole::Up), &c), DType::Q4_K);
        assert_eq!(q4_k_m_type(WeightRole::Layer(5, LayerRole::QBias), &c), DType::F32);
        assert_eq!(q4_k_m_type(WeightRole::Embed, &c), DType::Q6_K, "tied: the embedding is the output");
        c.tie_embeddings = false;
        assert_eq!(q4_k_m_type(WeightRole::Embed, &c), DType::Q4_K);
        assert_eq!(q4_k_m_type(WeightRole::LmHead, &c), DType::Q6_K);
        // 640 is not whole 256-blocks: Q8_0; 48 is not whole 32-blocks either: F32.
        assert_eq!([fit(DType::Q6_K, 640), fit(DType::Q4_K, 8960), fit(DType::Q4_K, 48)], [DType::Q8_0, DType::Q4_K, DType::F32]);
    }

    fn tiny(layers: usize, tied: bool) -> ModelConfig {
        let mut c = preset("qwen2.5-coder-1.5b").unwrap();
        (c.vocab_size, c.hidden_size, c.intermediate_size, c.num_layers) = (300, 256, 640, layers);
        (c.num_heads, c.num_kv_heads, c.head_dim, c.max_context, c.tie_embeddings) = (4, 2, 64, 64, tied);
        c
    }

    #[test]
    fn weights_keep_names_and_take_the_mix() {
        let c = tiny(8, false);
        let (f, q) = (synthetic_weights(&c, 4), synthetic_quant_weights(&c, 4, QuantMix::Q4KM));
        let names = |w: &Weights| -> Vec<String> {
            let l = &w.layers[3];
            [&w.embed, w.lm_head(), &w.final_norm, &l.q, &l.v, &l.down, &l.attn_norm, l.q_bias.as_ref().unwrap()]
                .map(|t| t.name.clone())
                .to_vec()
        };
        assert_eq!(names(&f), names(&q));
        let l = &q.layers;
        assert_eq!(
            [q.embed.dtype, q.lm_head().dtype, l[3].q.dtype, l[3].v.dtype, l[4].v.dtype],
            [DType::Q4_K, DType::Q6_K, DType::Q4_K, DType::Q6_K, DType::Q4_K]
        );
        // ffn_down's rows are 640 long: Q8_0 where Q6_K or Q4_K does not fit.
        assert_eq!([l[0].down.dtype, l[1].down.dtype, l[0].ffn_norm.dtype], [DType::Q8_0, DType::Q8_0, DType::F32]);
        assert_eq!(f.layers[2].ffn_norm.bytes(), q.layers[2].ffn_norm.bytes());
        let u = synthetic_quant_weights(&c, 4, QuantMix::Uniform(DType::F32));
        assert_eq!(u.layers[1].gate.bytes(), f.layers[1].gate.bytes());
        let again = synthetic_quant_weights(&c, 4, QuantMix::Q4KM);
        assert_eq!(again.layers[5].up.bytes(), q.layers[5].up.bytes());
    }

    #[test]
    fn cpu_runtimes_run_a_quantized_model() {
        use crate::cpu::act_quant::ActPrecision;
        use crate::cpu::fast_runtime::{FastOptions, FastRuntime};
        use crate::cpu::isa::Isa;
        use crate::cpu::reference::{KvCache, ReferenceModel};
        let tokens: Vec<u32> = (0..12).map(|i| (i * 37 % 300) as u32).collect();
        let spread = |logits: &[Vec<f32>]| {
            let x: Vec<f64> = logits.iter().flatten().map(|&v| v as f64).collect();
            (x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64).sqrt()
        };
        for (c, mix) in [
            (tiny(8, false), QuantMix::Q4KM),
            (tiny(3, true), QuantMix::Q4KM),
            (tiny(2, false), QuantMix::Uniform(DType::Q4_0)),
            (tiny(2, true), QuantMix::Uniform(DType::Q4_1)),
        ] {
            let w = synthetic_quant_weights(&c, 21, mix);
            let reference = ReferenceModel::new(&c, &w).unwrap().forward(&mut KvCache::new(&c, 64), &tokens, true).unwrap();
            assert!(reference.iter().flatten().all(|v| v.is_finite()), "{mix:?}");
            // The float model of the same shape sets the scale the quantized one should keep.
            let float = synthetic_weights(&c, 21);
            let float_logits = ReferenceModel::new(&c, &float).unwrap().forward(&mut KvCache::new(&c, 64), &tokens, true).unwrap();
            let ratio = spread(&reference) / spread(&float_logits);
            assert!((0.5..2.0).contains(&ratio), "{mix:?}: logit spread {ratio:.2}× the float model's");
            let options = FastOptions { threads: 2, isa: Isa::detect(None), prefill_batch: 5, act_precision: ActPrecision::Int16 };
            let fast = FastRuntime::new(&c, &w, options).unwrap().forward(&tokens, true).unwrap();
            let d2: f64 = fast.iter().flatten().zip(reference.iter().flatten()).map(|(a, b)| ((a - b) as f64).powi(2)).sum();
            let r2: f64 = reference.iter().flatten().map(|b| (*b as f64).powi(2)).sum();
            assert!((d2 / r2).sqrt() < 1e-3, "{mix:?}: fast vs reference {:.2e}", (d2 / r2).sqrt());
        }
    }
}
