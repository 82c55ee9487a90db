//! Which format each weight matrix takes on the GPU, decided once per load from the
//! tensors' types, the `--gpu-weights` choice and the tensor-parallel split: quantized
//! GGUF matrices stay in their own format, float ones are bf16 (or Q8_0 when asked),
//! and a matrix that cannot run natively falls back to bf16 with a note naming it.

use crate::config::ModelConfig;
use crate::dtp::ShardPlan;
use crate::error::{Error, Result};
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
        let col_split = |t: &Tensor, f: GpuFormat, starts: Vec<(usize, usize)>, notes: &mut Vec<String>| {
            if f == GpuFormat::Bf16 {
                return Ok(f);
            }
            let b = f.block();
            if starts.iter().all(|&(c0, c1)| c0 % b == 0 && c1 % b == 0) {
                return Ok(f);
            }
            let why = format!("{}: {} columns split over {tp} GPUs off its {b}-element blocks", t.name, f.name());
            if choice == GpuWeights::Native {
                return Err(Error::Cuda(format!("--gpu-weights native: {why}")));
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
                    return Err(Error::Cuda(format!("--gpu-weights native: {why} (the fused gate/up rows need one format)")));
                }
                notes.push(format!("{why}: both run as bf16"));
                GpuFormat::Bf16
            };
            layers.push(LayerFormats { q: own(&l.q), k: own(&l.k), v: own(&l.v), o, gate_up, down });
        }
        let lm_head = own(w.lm_head());
        Ok(WeightPlan { layers, lm_head, quantize_floats, notes })
    }

    /// Bit f set when some layer matrix is in format tag f (bf16 not counted): the
    /// kernel's `weight_formats`.
    pub fn layer_mask(&self) -> u8 {
        self.layers.iter().flat_map(|l| l.all()).filter(|f| *f != GpuFormat::Bf16).fold(0, |m, f| m | (1 << f.tag()))
    }

    /// Whether anything is quantized (the batched prefill then needs bf16 copies).
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
