//! The one normalised model description every runtime reads. File formats
//! (HF `config.json`, GGUF metadata) are parsed into their own serde structs
//! elsewhere and converted into this plain struct with no `Option`s.

/// Model families the runtimes implement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    /// Llama 2/3.x, SmolLM2, Mistral-style (no sliding window).
    Llama,
    /// Qwen2 / Qwen2.5(-Coder): Llama with q/k/v biases.
    Qwen2,
}

/// How rotary embedding frequencies are scaled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RopeScaling {
    /// Plain RoPE: inv_freq[i] = theta^(-2i/head_dim).
    None,
    /// Llama 3.x "llama3" rope_scaling (matches transformers' `_compute_llama3_parameters`).
    Llama3 { factor: f32, low_freq_factor: f32, high_freq_factor: f32, original_max_position: usize },
}

/// Which pairs of a head's dimensions RoPE rotates together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeLayout {
    /// Dimension i pairs with i + head_dim/2 (HF `rotate_half`; llama.cpp "NEOX").
    /// HF checkpoints of every family and Qwen2 GGUFs use this.
    HalfSplit,
    /// Dimension 2i pairs with 2i+1 (llama.cpp "NORM"): Llama-family GGUFs, whose
    /// converter permuted the q/k rows.
    Interleaved,
}

/// Everything a runtime needs to know about a model's shape.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// Human-readable name (GGUF `general.name`, else the file or folder name).
    pub name: String,
    pub architecture: Architecture,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    /// Longest sequence (prompt + generated) the model supports.
    pub max_context: usize,
    pub rms_norm_eps: f32,
    pub rope_theta: f32,
    pub rope_scaling: RopeScaling,
    pub rope_layout: RopeLayout,
    /// q/k/v projections carry biases (Qwen2).
    pub attention_bias: bool,
    /// The LM head reuses the token embedding matrix.
    pub tie_embeddings: bool,
}

impl ModelConfig {
    /// Number of parameters (embedding counted once when tied).
    pub fn parameter_count(&self) -> u64 {
        let (d, f, h) = (self.hidden_size as u64, self.intermediate_size as u64, self.head_dim as u64);
        let q = self.num_heads as u64 * h;
        let kv = self.num_kv_heads as u64 * h;
        let attn = d * q + 2 * d * kv + q * d + if self.attention_bias { q + 2 * kv } else { 0 };
        let mlp = 3 * d * f;
        let per_layer = attn + mlp + 2 * d;
        let embed = self.vocab_size as u64 * d;
        let head = if self.tie_embeddings { 0 } else { embed };
        embed + head + d + per_layer * self.num_layers as u64
    }

    /// Checks the invariants every runtime relies on; the reason names the field.
    pub fn validate(&self) -> std::result::Result<(), String> {
        let sizes = [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_layers", self.num_layers),
            ("num_heads", self.num_heads),
            ("num_kv_heads", self.num_kv_heads),
            ("head_dim", self.head_dim),
            ("max_context", self.max_context),
        ];
        if let Some((name, _)) = sizes.iter().find(|(_, v)| *v == 0) {
            return Err(format!("{name} is 0"));
        }
        if !self.num_heads.is_multiple_of(self.num_kv_heads) {
            return Err(format!("num_heads {} is not a multiple of num_kv_heads {}", self.num_heads, self.num_kv_heads));
        }
        if !self.head_dim.is_multiple_of(2) {
            return Err(format!("head_dim {} is odd; RoPE needs pairs", self.head_dim));
        }
        if !(self.rms_norm_eps.is_finite() && self.rms_norm_eps > 0.0) {
            return Err(format!("rms_norm_eps {} is not a positive number", self.rms_norm_eps));
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0) {
            return Err(format!("rope_theta {} is not a positive number", self.rope_theta));
        }
        if let RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position } = self.rope_scaling {
            let ok = factor >= 1.0 && low_freq_factor > 0.0 && high_freq_factor > low_freq_factor && original_max_position > 0;
            if !ok {
                return Err(format!("llama3 rope scaling {:?} is out of range", self.rope_scaling));
            }
        }
        Ok(())
    }
}
