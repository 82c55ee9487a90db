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

/// Which positions a layer's attention sees besides the causal limit.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SlidingWindow {
    /// Positions a windowed layer attends to, the current one included (transformers'
    /// `sliding_window`: key `p` is seen from query `q` when `q − p < size`); 0: none.
    pub size: usize,
    /// Per layer: whether it uses the window (empty when `size` is 0).
    pub layers: Vec<bool>,
}

impl SlidingWindow {
    /// The window of layer `layer` (`None`: full causal attention).
    pub fn of_layer(&self, layer: usize) -> Option<usize> {
        (self.size > 0 && self.layers.get(layer).copied().unwrap_or(false)).then_some(self.size)
    }

    /// The first position query `pos` attends to in layer `layer`.
    pub fn first_key(&self, layer: usize, pos: usize) -> usize {
        self.of_layer(layer).map_or(0, |w| (pos + 1).saturating_sub(w))
    }
}

/// How a Laneformer's lane states reach the LM head (`lm_head_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaneHead {
    /// `replicate`: one `[vocab, hidden]` head reads the mean of the normalised lanes.
    Replicate,
    /// `lane`: a `[vocab, lanes·hidden]` head reads the normalised lanes concatenated.
    Lane,
    /// `vocab_parallel`: lane `l`'s normalised state times its `[vocab/L, hidden]` rows
    /// gives logits `[l·vocab/L, (l+1)·vocab/L)`.
    VocabParallel,
}

impl LaneHead {
    /// The name `config.json` uses.
    pub fn name(self) -> &'static str {
        match self {
            LaneHead::Replicate => "replicate",
            LaneHead::Lane => "lane",
            LaneHead::VocabParallel => "vocab_parallel",
        }
    }
}

/// Lanes of Kog's Laneformer (Delayed Tensor Parallelism, docs/dtp.md): each lane keeps
/// its own residual stream and computes its shard of every block; partial sums reach the
/// other lanes `delay` layers late. An ordinary model is one lane ([`LaneConfig::default`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneConfig {
    /// L (`num_lanes`): lane `l` holds query heads `[l·H/L, …)`, KV heads `[l·KV/L, …)`
    /// and FFN columns `[l·F/L, …)`.
    pub count: usize,
    /// d (`broadcast_delay`): layer `n`'s partials reach the other lanes at layer `n + d`.
    pub delay: usize,
    /// `use_comm`: layers `n ≥ d` add the other lanes' partials of layer `n − d`; without
    /// it each lane adds `√L ·` its own partial.
    pub comm: bool,
    /// `use_early_comm`: layers `n < d` all-reduce at once; else `√L ·` own partial.
    pub early_comm: bool,
    pub head: LaneHead,
    /// `pre_norm_lane_agg`: the head reads `RMSNorm(Σ_l r_l)` (with `Replicate` only).
    pub sum_before_norm: bool,
    /// `replicated_rmsn_scale = false`: every norm holds one scale row per lane (`[L, hidden]`;
    /// the final norm too unless `sum_before_norm`).
    pub lane_norms: bool,
}

impl Default for LaneConfig {
    /// One lane: every block adds its whole output at once, as in an ordinary model.
    fn default() -> LaneConfig {
        LaneConfig {
            count: 1,
            delay: 0,
            comm: true,
            early_comm: true,
            head: LaneHead::Replicate,
            sum_before_norm: false,
            lane_norms: false,
        }
    }
}

impl LaneConfig {
    /// More than the ordinary single residual stream (anything only lane-aware runtimes run).
    pub fn is_laneformer(&self) -> bool {
        *self != LaneConfig::default()
    }

    /// Rows of a norm tensor: L with per-lane scales, else 1.
    pub fn norm_rows(&self) -> usize {
        if self.lane_norms {
            self.count
        } else {
            1
        }
    }

    /// Whether the final norm holds one scale row per lane (not when the lanes are
    /// summed before it).
    pub fn final_norm_per_lane(&self) -> bool {
        self.lane_norms && !self.sum_before_norm
    }

    /// Rows of the final norm.
    pub fn final_norm_rows(&self) -> usize {
        if self.final_norm_per_lane() {
            self.count
        } else {
            1
        }
    }

    /// Whether the LM head reads every lane's normalised state side by side (a `Lane`
    /// head of several lanes).
    pub fn concat_head(&self) -> bool {
        self.count > 1 && self.head == LaneHead::Lane
    }

    /// Columns of the LM head: `lanes · hidden` for a `Lane` head, else `hidden`.
    pub fn head_cols(&self, hidden: usize) -> usize {
        if self.concat_head() {
            self.count * hidden
        } else {
            hidden
        }
    }
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
    /// Layers with windowed attention (none for most models).
    pub sliding_window: SlidingWindow,
    /// Laneformer lanes (one for ordinary models).
    pub lanes: LaneConfig,
}

impl ModelConfig {
    /// Number of parameters (embedding counted once when tied).
    pub fn parameter_count(&self) -> u64 {
        let (d, f, h) = (self.hidden_size as u64, self.intermediate_size as u64, self.head_dim as u64);
        let q = self.num_heads as u64 * h;
        let kv = self.num_kv_heads as u64 * h;
        let attn = d * q + 2 * d * kv + q * d + if self.attention_bias { q + 2 * kv } else { 0 };
        let mlp = 3 * d * f;
        let norm_rows = self.lanes.norm_rows() as u64;
        let per_layer = attn + mlp + 2 * d * norm_rows;
        let embed = self.vocab_size as u64 * d;
        let head = if self.tie_embeddings { 0 } else { self.vocab_size as u64 * self.lanes.head_cols(self.hidden_size) as u64 };
        embed + head + d * self.lanes.final_norm_rows() as u64 + per_layer * self.num_layers as u64
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
        self.validate_lanes()?;
        let w = &self.sliding_window;
        if w.size > 0 && w.layers.len() != self.num_layers {
            return Err(format!("sliding window marks {} layers of {}", w.layers.len(), self.num_layers));
        }
        Ok(())
    }

    /// The lane shape: L divides the query heads, the KV heads, the FFN (and the
    /// vocabulary of a vocabulary-parallel head); the head kinds' own rules.
    fn validate_lanes(&self) -> std::result::Result<(), String> {
        let l = &self.lanes;
        if l.count == 0 {
            return Err("num_lanes is 0".into());
        }
        let divides = [
            ("num_attention_heads", self.num_heads),
            ("num_key_value_heads", self.num_kv_heads),
            ("intermediate_size", self.intermediate_size),
        ];
        if let Some((name, v)) = divides.iter().find(|(_, v)| !v.is_multiple_of(l.count)) {
            return Err(format!("{name} {v} is not a multiple of num_lanes {}", l.count));
        }
        if l.head == LaneHead::VocabParallel && !self.vocab_size.is_multiple_of(l.count) {
            return Err(format!("a vocab_parallel head needs vocab_size {} to be a multiple of num_lanes {}", self.vocab_size, l.count));
        }
        if l.sum_before_norm && l.head != LaneHead::Replicate {
            return Err(format!("pre_norm_lane_agg needs lm_head_type replicate, not {}", l.head.name()));
        }
        if self.tie_embeddings && l.head == LaneHead::Lane {
            return Err("a lane head ([vocab, lanes·hidden]) cannot be tied to the embedding".into());
        }
        if l.delay > self.num_layers {
            return Err(format!("broadcast_delay {} exceeds the {} layers", l.delay, self.num_layers));
        }
        Ok(())
    }
}
