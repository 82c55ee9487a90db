//! Scratch buffers of the fast forward pass, sized once for the largest batch and
//! reused by every call (no allocation per token besides small pointer tables).

use crate::cpu::act_quant::{ActPrecision, QuantActs, QBLOCK};
use crate::cpu::fast_model::FastModel;

/// Batches of at most this many rows have every member normalise them into its own
/// buffer (a few hundred floats each) instead of splitting the work and meeting at
/// a barrier: decoding saves three barriers per layer.
pub const OWN_NORM_ROWS: usize = 4;

/// Row strides of the activation buffers (matmul outputs padded to 16-row groups).
#[derive(Debug, Clone, Copy)]
pub struct Strides {
    pub d: usize,
    pub qd: usize,
    pub q: usize,
    pub k: usize,
    pub v: usize,
    pub proj: usize,
    pub ffn: usize,
    pub gate: usize,
    pub up: usize,
    pub vocab: usize,
}

impl Strides {
    /// The strides of `m` (every layer has the first one's shapes).
    pub fn of(m: &FastModel) -> Strides {
        let c = &m.config;
        let l = &m.layers[0];
        Strides {
            d: c.hidden_size,
            qd: c.num_heads * c.head_dim,
            q: l.q.padded_rows(),
            k: l.k.padded_rows(),
            v: l.v.padded_rows(),
            proj: l.o.padded_rows().max(l.down.padded_rows()),
            ffn: c.intermediate_size,
            gate: l.gate.padded_rows(),
            up: l.up.padded_rows(),
            vocab: m.head.padded_rows(),
        }
    }
}

/// Normalised activations (f32 for float weights, quantized for the others).
pub struct NormBuffer {
    pub h: Vec<f32>,
    pub hq: QuantActs,
}

impl NormBuffer {
    fn new(d: usize, rows: usize, precision: ActPrecision) -> NormBuffer {
        NormBuffer { h: vec![0.0; rows * d], hq: QuantActs::new(d.next_multiple_of(QBLOCK), rows, precision) }
    }
}

/// Every buffer a forward call touches besides the weights and the KV cache.
pub struct Workspace {
    pub batch: usize,
    pub threads: usize,
    pub strides: Strides,
    /// The residual stream, `[batch][d]`.
    pub x: Vec<f32>,
    /// Shared normalised activations (large batches, split over members).
    pub normed: NormBuffer,
    /// One per member (small batches, each member normalises all rows itself).
    pub own: Vec<NormBuffer>,
    pub q: Vec<f32>,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
    pub att: Vec<f32>,
    pub attq: QuantActs,
    pub proj: Vec<f32>,
    pub gate: Vec<f32>,
    pub up: Vec<f32>,
    pub act: Vec<f32>,
    pub actq: QuantActs,
    pub logits: Vec<f32>,
    /// Attention scores, one row per member (grown with the KV cache).
    pub scores: Vec<f32>,
    /// RoPE tables of the batch's positions, `[batch][head_dim/2]`.
    pub cos: Vec<f32>,
    pub sin: Vec<f32>,
}

impl Workspace {
    /// Buffers for batches of up to `batch` tokens (all may need logits).
    pub fn new(model: &FastModel, batch: usize, threads: usize, precision: ActPrecision) -> Workspace {
        let s = Strides::of(model);
        let c = &model.config;
        let pad = |n: usize| n.next_multiple_of(QBLOCK);
        Workspace {
            batch,
            threads,
            strides: s,
            x: vec![0.0; batch * s.d],
            normed: NormBuffer::new(s.d, batch, precision),
            own: (0..threads).map(|_| NormBuffer::new(s.d, OWN_NORM_ROWS, precision)).collect(),
            q: vec![0.0; batch * s.q],
            k: vec![0.0; batch * s.k],
            v: vec![0.0; batch * s.v],
            att: vec![0.0; batch * s.qd],
            attq: QuantActs::new(pad(s.qd), batch, precision),
            proj: vec![0.0; batch * s.proj],
            gate: vec![0.0; batch * s.gate],
            up: vec![0.0; batch * s.up],
            act: vec![0.0; batch * s.ffn],
            actq: QuantActs::new(pad(s.ffn), batch, precision),
            logits: vec![0.0; batch * s.vocab],
            scores: Vec::new(),
            cos: vec![0.0; batch * c.head_dim / 2],
            sin: vec![0.0; batch * c.head_dim / 2],
        }
    }

    /// Most tokens per forward call.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Logits of row `i` of the last forward call.
    pub fn logits(&self, i: usize, vocab: usize) -> &[f32] {
        let at = i * self.strides.vocab;
        &self.logits[at..at + vocab]
    }
}
