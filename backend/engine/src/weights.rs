//! The weights of one model, named by role rather than by file-format key.

mod assemble;
mod roles;

pub use roles::{LayerRole, WeightRole};

use crate::tensor::Tensor;

/// One transformer block's weights. Linear weights are `[out, in]`.
#[derive(Debug, Clone)]
pub struct LayerWeights {
    pub attn_norm: Tensor,
    pub q: Tensor,
    pub k: Tensor,
    pub v: Tensor,
    /// Present exactly when `ModelConfig::attention_bias`.
    pub q_bias: Option<Tensor>,
    pub k_bias: Option<Tensor>,
    pub v_bias: Option<Tensor>,
    pub o: Tensor,
    pub ffn_norm: Tensor,
    pub gate: Tensor,
    pub up: Tensor,
    pub down: Tensor,
}

impl LayerWeights {
    /// Every tensor of the layer (biases where present).
    #[cfg(feature = "lab")]
    pub fn tensors(&self) -> impl Iterator<Item = &Tensor> {
        [&self.attn_norm, &self.q, &self.k, &self.v, &self.o, &self.ffn_norm, &self.gate, &self.up, &self.down]
            .into_iter()
            .chain([&self.q_bias, &self.k_bias, &self.v_bias].into_iter().flatten())
    }
}

/// All weights of a model.
#[derive(Debug, Clone)]
pub struct Weights {
    /// `[vocab, hidden]`.
    pub embed: Tensor,
    pub layers: Vec<LayerWeights>,
    pub final_norm: Tensor,
    /// `[vocab, hidden]`; `None` when the embedding is tied.
    pub lm_head: Option<Tensor>,
}

impl Weights {
    /// The matrix the LM head multiplies by (the embedding when tied).
    pub fn lm_head(&self) -> &Tensor {
        self.lm_head.as_ref().unwrap_or(&self.embed)
    }
}
