//! Which format each weight matrix takes on the GPU, decided once per load from the
//! tensors' types, the `--gpu-weights` choice and the tensor-parallel split: quantized
//! GGUF matrices stay in their own format, float ones are bf16 (or Q8_0 when asked),
//! and a matrix that cannot run natively falls back to bf16 with a note naming it.

use crate::config::ModelConfig;
use crate::dtp::ShardPlan;
use crate::error::{CudaError, Result};
use crate::options::GpuWeights;
use crate::tensor::Tensor;
use crate::weights::Weights;

use super::GpuFormat;

/// One layer's matrices (the kernel's layer slot FMTS, one byte each in this order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerFormats {
    pub q: GpuFormat,
    pub k: GpuFormat,
    pub v: GpuFormat,
    pub o: GpuFormat,
    pub gate_up: GpuFormat,
    pub down: GpuFormat,
}

impl LayerFormats {
    /// The FMTS word: byte i = the i-th matrix's tag.
    pub fn word(&self) -> u64 {
        [self.q, self.k, self.v, self.o, self.gate_up, self.down].iter().enumerate().map(|(i, f)| (f.tag() as u64) << (8 * i)).sum()
    }

    fn all(&self) -> [GpuFormat; 6] {
        [self.q, self.k, self.v, self.o, self.gate_up, self.down]
    }
}

/// Every matrix's format for one load.
#[derive(Debug, Clone)]
pub struct WeightPlan {
    pub layers: Vec<LayerFormats>,
    pub lm_head: GpuFormat,
    /// Float matrices are quantized to Q8_0 at upload (`--gpu-weights q8_0`).
    pub quantize_floats: bool,
    /// One line per matrix that runs as bf16 although its file type is quantized.
    pub notes: Vec<String>,
}

impl WeightPlan {
    /// The plan for `weights` split over `tp` GPUs under `choice`.
    pub fn new(c: &ModelConfig, w: &Weights, choice: GpuWeights, tp: usize) -> Result<WeightPlan> {
        let shards = ShardPlan::new(c, tp)?;
        let mut notes = Vec::new();
        let quantize_floats = choice == GpuWeights::Q8_0;
        // The format of `t` when read whole-row (row splits never cut a block).
        let own = |t: &Tensor| -> GpuFormat {
            match choice {
                GpuWeights::Bf16 => GpuFormat::Bf16,
                _ => match GpuFormat::native(t.dtype) {
                    Some(GpuFormat::Bf16) if quantize_floats => GpuFormat::Q8_0,
                    Some(f) => f,
                    None => GpuFormat::Bf16,
                },
            }
        };
        // Columns `cols` of every rank must be whole blocks of the format.
        let col_split = |t: &Tensor, f: GpuFormat, starts: Vec<(usize, usize)>, notes: &mut Vec<String>| -> Result<GpuFormat> {
            if f == GpuFormat::Bf16 {
                return Ok(f);
            }
            let b = f.block();
            if starts.iter().all(|&(c0, c1)| c0 % b == 0 && c1 % b == 0) {
                return Ok(f);
            }
            let why = format!("{}: {} columns split over {tp} GPUs off its {b}-element blocks", t.name, f.name());
            if choice == GpuWeights::Native {
                return Err(CudaError::Unsupported(format!("--gpu-weights native: {why}")).into());
            }
            notes.push(format!("{why}: runs as bf16"));
            Ok(GpuFormat::Bf16)
        };
        let hd = c.head_dim;
        let mut layers = Vec::with_capacity(w.layers.len());
        for l in &w.layers {
            let o =
                col_split(&l.o, own(&l.o), shards.lanes.iter().map(|s| (s.q_heads.start * hd, s.q_heads.end * hd)).collect(), &mut notes)?;
            let down = col_split(&l.down, own(&l.down), shards.lanes.iter().map(|s| (s.ffn.start, s.ffn.end)).collect(), &mut notes)?;
            let (g, u) = (own(&l.gate), own(&l.up));
            let gate_up = if g == u {
                g
            } else {
                let why = format!("{} is {} but {} is {}", l.gate.name, g.name(), l.up.name, u.name());
                if choice == GpuWeights::Native {
                    return Err(
                        CudaError::Unsupported(format!("--gpu-weights native: {why} (the fused gate/up rows need one format)")).into()
                    );
                }
                notes.push(format!("{why}: both run as bf16"));
                GpuFormat::Bf16
            };
            layers.push(LayerFormats { q: own(&l.q), k: own(&l.k), v: own(&l.v), o, gate_up, down });
        }
        let mut lm_head = own(w.lm_head());
        // A `lane` head's rows span every lane's h: the kernel reads it as bf16 only.
        if lm_head != GpuFormat::Bf16 && c.lanes.concat_head() {
            notes.push(format!("{}: a `lane` LM head runs as bf16", w.lm_head().name));
            lm_head = GpuFormat::Bf16;
        }
        Ok(WeightPlan { layers, lm_head, quantize_floats, notes })
    }

    /// Bit f set when some layer matrix is in format tag f (bf16 not counted): the
    /// kernel's `weight_formats`.
    pub fn layer_mask(&self) -> u8 {
        self.layers.iter().flat_map(|l| l.all()).filter(|f| *f != GpuFormat::Bf16).fold(0, |m, f| m | (1 << f.tag()))
    }

    /// Whether anything is quantized (the batched prefill then needs bf16 copies).
    #[cfg(feature = "lab")]
    pub fn any_quantized(&self) -> bool {
        self.layer_mask() != 0 || self.lm_head != GpuFormat::Bf16
    }

    /// One line for the load log: how many matrices take each format.
    pub fn describe(&self) -> String {
        let mut counts: Vec<(GpuFormat, usize)> = Vec::new();
        for f in self.layers.iter().flat_map(|l| l.all()).chain([self.lm_head]) {
            match counts.iter_mut().find(|(g, _)| *g == f) {
                Some((_, n)) => *n += 1,
                None => counts.push((f, 1)),
            }
        }
        counts.iter().map(|(f, n)| format!("{n} {}", f.name())).collect::<Vec<_>>().join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::synthetic::{preset, synthetic_quant_weights, synthetic_weights, QuantMix};
    use crate::tensor::DType;

    /// 12 heads of 64 (o's 768 columns split over 2 GPUs: 384 each, off Q4_K's
    /// 256-blocks), FFN 1024 (512 per GPU: whole blocks of every type).
    fn config() -> ModelConfig {
        let mut c = preset("qwen2.5-coder-1.5b").unwrap();
        (c.vocab_size, c.hidden_size, c.intermediate_size, c.num_layers) = (300, 512, 1024, 2);
        (c.num_heads, c.num_kv_heads, c.head_dim, c.max_context, c.tie_embeddings) = (12, 2, 64, 64, true);
        c
    }

    #[test]
    fn quantized_matrices_keep_their_format_and_floats_are_bf16() {
        let c = config();
        let w = synthetic_quant_weights(&c, 1, QuantMix::Uniform(DType::Q4_K));
        let p = WeightPlan::new(&c, &w, GpuWeights::Auto, 1).unwrap();
        assert!(p.notes.is_empty(), "{:?}", p.notes);
        assert!(p.layers.iter().all(|l| l.all().iter().all(|f| *f == GpuFormat::Q4_K)));
        assert_eq!((p.lm_head, p.layer_mask()), (GpuFormat::Q4_K, 1 << GpuFormat::Q4_K.tag()));
        assert_eq!(p.layers[0].word(), (0..6).map(|i| 4u64 << (8 * i)).sum::<u64>());
        assert!(p.describe().contains("q4_K"), "{}", p.describe());
        // bf16 converts everything; a float model is bf16 unless q8_0 is asked for.
        let b = WeightPlan::new(&c, &w, GpuWeights::Bf16, 1).unwrap();
        assert!(!b.any_quantized());
        let f = synthetic_weights(&c, 1);
        assert!(!WeightPlan::new(&c, &f, GpuWeights::Auto, 1).unwrap().any_quantized());
        let q8 = WeightPlan::new(&c, &f, GpuWeights::Q8_0, 1).unwrap();
        assert!(q8.quantize_floats && q8.layers.iter().all(|l| l.all().iter().all(|f| *f == GpuFormat::Q8_0)));
    }

    #[test]
    fn a_split_off_the_block_boundary_falls_back_to_bf16_or_is_refused() {
        let c = config();
        let w = synthetic_quant_weights(&c, 1, QuantMix::Uniform(DType::Q4_K));
        let p = WeightPlan::new(&c, &w, GpuWeights::Auto, 2).unwrap();
        assert!(p.layers.iter().all(|l| l.o == GpuFormat::Bf16 && l.down == GpuFormat::Q4_K && l.q == GpuFormat::Q4_K));
        assert_eq!(p.notes.len(), c.num_layers, "{:?}", p.notes);
        assert!(p.notes[0].contains(&w.layers[0].o.name) && p.notes[0].contains("off its 256-element blocks"), "{}", p.notes[0]);
        let e = WeightPlan::new(&c, &w, GpuWeights::Native, 2).expect_err("native refuses");
        assert!(e.to_string().contains("--gpu-weights native"), "{e}");
        // Q8_0's 32-element blocks split fine.
        let w8 = synthetic_quant_weights(&c, 1, QuantMix::Uniform(DType::Q8_0));
        assert!(WeightPlan::new(&c, &w8, GpuWeights::Native, 2).unwrap().notes.is_empty());
    }

    #[test]
    fn gate_and_up_of_different_types_run_as_bf16() {
        let c = config();
        let mut w = synthetic_quant_weights(&c, 1, QuantMix::Uniform(DType::Q4_K));
        w.layers[1].up = synthetic_quant_weights(&c, 1, QuantMix::Uniform(DType::Q6_K)).layers[1].up.clone();
        let p = WeightPlan::new(&c, &w, GpuWeights::Auto, 1).unwrap();
        assert_eq!((p.layers[0].gate_up, p.layers[1].gate_up), (GpuFormat::Q4_K, GpuFormat::Bf16));
        assert!(p.notes.len() == 1 && p.notes[0].contains("both run as bf16"), "{:?}", p.notes);
        assert!(WeightPlan::new(&c, &w, GpuWeights::Native, 1).is_err());
    }
}
