//! The role each weight plays in a Llama/Qwen2 block and the shape the config
//! implies for it; loaders map roles to their file's tensor names.

use crate::config::ModelConfig;

/// A weight inside one transformer block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerRole {
    AttnNorm,
    Q,
    K,
    V,
    QBias,
    KBias,
    VBias,
    O,
    FfnNorm,
    Gate,
    Up,
    Down,
}

impl LayerRole {
    /// Every role, in file order.
    #[cfg(feature = "lab")]
    pub const ALL: [LayerRole; 12] = [
        LayerRole::AttnNorm,
        LayerRole::Q,
        LayerRole::K,
        LayerRole::V,
        LayerRole::QBias,
        LayerRole::KBias,
        LayerRole::VBias,
        LayerRole::O,
        LayerRole::FfnNorm,
        LayerRole::Gate,
        LayerRole::Up,
        LayerRole::Down,
    ];

    /// q/k/v biases, present only when the config has `attention_bias`.
    #[cfg(feature = "lab")]
    pub fn is_bias(self) -> bool {
        matches!(self, LayerRole::QBias | LayerRole::KBias | LayerRole::VBias)
    }
}

/// Any weight of the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightRole {
    Embed,
    FinalNorm,
    LmHead,
    Layer(usize, LayerRole),
}

impl WeightRole {
    /// Outermost-first shape (`[out, in]` for linear weights) that `config` implies.
    pub fn expected_shape(self, c: &ModelConfig) -> Vec<usize> {
        let (d, f) = (c.hidden_size, c.intermediate_size);
        let (q, kv) = (c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim);
        // Per-lane norm scales are `[lanes, hidden]` (one lane too); ordinary norms a vector.
        let norm = |per_lane: bool| if per_lane { vec![c.lanes.count, d] } else { vec![d] };
        match self {
            WeightRole::Embed => vec![c.vocab_size, d],
            WeightRole::LmHead => vec![c.vocab_size, c.lanes.head_cols(d)],
            WeightRole::FinalNorm => norm(c.lanes.final_norm_per_lane()),
            WeightRole::Layer(_, role) => match role {
                LayerRole::AttnNorm | LayerRole::FfnNorm => norm(c.lanes.lane_norms),
                LayerRole::Q => vec![q, d],
                LayerRole::K | LayerRole::V => vec![kv, d],
                LayerRole::QBias => vec![q],
                LayerRole::KBias | LayerRole::VBias => vec![kv],
                LayerRole::O => vec![d, q],
                LayerRole::Gate | LayerRole::Up => vec![f, d],
                LayerRole::Down => vec![d, f],
            },
        }
    }
}
