//! The fast runtime's model: every linear weight repacked for the SIMD kernels
//! (in parallel at load), norms and biases as f32, the embedding kept as stored
//! (one row is dequantized per token).

use crate::config::ModelConfig;
use crate::cpu::isa::Isa;
use crate::cpu::packed::{Format, PackedMatrix};
use crate::cpu::rope;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::weights::Weights;

/// One transformer block.
pub struct FastLayer {
    pub attn_norm: Vec<f32>,
    pub q: PackedMatrix,
    pub k: PackedMatrix,
    pub v: PackedMatrix,
    pub q_bias: Option<Vec<f32>>,
    pub k_bias: Option<Vec<f32>>,
    pub v_bias: Option<Vec<f32>>,
    pub o: PackedMatrix,
    pub ffn_norm: Vec<f32>,
    pub gate: PackedMatrix,
    pub up: PackedMatrix,
    pub down: PackedMatrix,
}

/// The whole model, ready for [`crate::cpu::forward`].
pub struct FastModel {
    pub config: ModelConfig,
    /// Kernel family every operation uses.
    pub isa: Isa,
    embed: Tensor,
    pub layers: Vec<FastLayer>,
    pub final_norm: Vec<f32>,
    /// The LM head (the embedding, repacked, when tied).
    pub head: PackedMatrix,
    pub inv_freq: Vec<f32>,
}

impl FastModel {
    /// Repacks `weights` (shapes already checked by the loaders) using `threads` threads.
    pub fn new(config: &ModelConfig, weights: &Weights, isa: Isa, threads: usize) -> Result<FastModel> {
        if !config.head_dim.is_multiple_of(2) {
            return Err(Error::InvalidRequest(format!("head_dim {} is odd; RoPE needs pairs", config.head_dim)));
        }
        let mut tensors: Vec<&Tensor> = Vec::new();
        for l in &weights.layers {
            tensors.extend([&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down]);
        }
        tensors.push(weights.lm_head());
        let mut packed = pack_all(&tensors, threads)?.into_iter();
        let mut next = || packed.next().expect("one packed matrix per tensor");
        let f32_of = |t: &Tensor| t.to_f32();
        let opt = |t: &Option<Tensor>| t.as_ref().map(f32_of).transpose();
        let mut layers = Vec::with_capacity(weights.layers.len());
        for l in &weights.layers {
            layers.push(FastLayer {
                attn_norm: f32_of(&l.attn_norm)?,
                q: next(),
                k: next(),
                v: next(),
                q_bias: opt(&l.q_bias)?,
                k_bias: opt(&l.k_bias)?,
                v_bias: opt(&l.v_bias)?,
                o: next(),
                ffn_norm: f32_of(&l.ffn_norm)?,
                gate: next(),
                up: next(),
                down: next(),
            });
        }
        let model = FastModel {
            config: config.clone(),
            isa,
            embed: weights.embed.clone(),
            layers,
            final_norm: f32_of(&weights.final_norm)?,
            head: next(),
            inv_freq: rope::inv_freq(config),
        };
        // Decode the first and last embedding rows now, so a bad tensor fails the
        // load rather than a request.
        let mut row = vec![0.0; config.hidden_size];
        model.embed.row_to_f32(0, &mut row)?;
        model.embed.row_to_f32(config.vocab_size - 1, &mut row)?;
        Ok(model)
    }

    /// Token `id`'s embedding into `out` (`hidden_size` floats).
    pub fn embed_row(&self, id: u32, out: &mut [f32]) -> Result<()> {
        if id as usize >= self.config.vocab_size {
            return Err(Error::TokenOutOfRange { id, vocab_size: self.config.vocab_size });
        }
        self.embed.row_to_f32(id as usize, out)
    }

    /// Bytes of packed weights (for the load message).
    #[cfg(feature = "lab")]
    pub fn packed_bytes(&self) -> usize {
        let layer = |l: &FastLayer| [&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down].iter().map(|m| m.size_bytes()).sum::<usize>();
        self.layers.iter().map(layer).sum::<usize>() + self.head.size_bytes()
    }

    /// Whether any of `matrices` reads quantized activations.
    pub fn any_quantized(matrices: &[&PackedMatrix]) -> bool {
        matrices.iter().any(|m| matches!(m.format, Format::Quant(_)))
    }
}

/// Repacks every tensor, spread over `threads` scoped threads, in input order.
pub(crate) fn pack_all(tensors: &[&Tensor], threads: usize) -> Result<Vec<PackedMatrix>> {
    let threads = threads.clamp(1, tensors.len().max(1));
    let results: Vec<Result<Vec<(usize, PackedMatrix)>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    (t..tensors.len())
                        .step_by(threads)
                        .map(|i| PackedMatrix::from_tensor(tensors[i]).map(|m| (i, m)))
                        .collect::<Result<Vec<_>>>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    });
    let mut all = Vec::with_capacity(tensors.len());
    for r in results {
        all.extend(r?);
    }
    all.sort_by_key(|(i, _)| *i);
    Ok(all.into_iter().map(|(_, m)| m).collect())
}
