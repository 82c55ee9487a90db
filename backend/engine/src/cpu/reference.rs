//! The float32 reference forward pass: clear code, no tricks. Used by tests, as the
//! GPU engine's reference, and to serve until a faster runtime is chosen. Matches
//! transformers' LlamaForCausalLM / Qwen2ForCausalLM evaluated in float32.

use crate::config::ModelConfig;
use crate::cpu::rope;
use crate::error::{Error, Result};
use crate::weights::Weights;

/// One layer's weights as f32, linear weights `[out, in]` row-major.
struct Layer {
    attn_norm: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    q_bias: Option<Vec<f32>>,
    k_bias: Option<Vec<f32>>,
    v_bias: Option<Vec<f32>>,
    o: Vec<f32>,
    ffn_norm: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    down: Vec<f32>,
}

/// A model with every weight dequantized to f32.
pub struct ReferenceModel {
    pub config: ModelConfig,
    embed: Vec<f32>,
    layers: Vec<Layer>,
    final_norm: Vec<f32>,
    lm_head: Option<Vec<f32>>,
    inv_freq: Vec<f32>,
    /// Stop after this many layers (bisecting a mismatch); `num_layers` normally.
    pub layer_limit: usize,
}

/// Keys and values of every past position: `[layer][pos][kv_heads × head_dim]`.
pub struct KvCache {
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    kv_dim: usize,
    capacity: usize,
    len: usize,
}

impl KvCache {
    /// An empty cache for `capacity` positions.
    pub fn new(config: &ModelConfig, capacity: usize) -> KvCache {
        let kv_dim = config.num_kv_heads * config.head_dim;
        let layer = || Vec::with_capacity(capacity.min(4096) * kv_dim);
        KvCache {
            k: (0..config.num_layers).map(|_| layer()).collect(),
            v: (0..config.num_layers).map(|_| layer()).collect(),
            kv_dim,
            capacity,
            len: 0,
        }
    }

    /// Positions filled so far.
    #[cfg(feature = "lab")]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is cached.
    #[cfg(feature = "lab")]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Keeps the first `n` positions (a draft's rejected rows leave; keys and values
    /// are appended per layer, so dropping their tails leaves nothing stale).
    pub fn truncate(&mut self, n: usize) {
        let n = n.min(self.len);
        let kv_dim = self.kv_dim;
        self.k.iter_mut().chain(self.v.iter_mut()).for_each(|l| l.truncate(n * kv_dim));
        self.len = n;
    }

    /// Positions filled so far (for rolling back).
    pub fn filled(&self) -> usize {
        self.len
    }

    /// Forgets every position (a new sequence).
    pub fn clear(&mut self) {
        self.k.iter_mut().chain(self.v.iter_mut()).for_each(Vec::clear);
        self.len = 0;
    }
}

fn deq(t: &crate::tensor::Tensor) -> Result<Vec<f32>> {
    t.to_f32()
}

impl ReferenceModel {
    /// Dequantizes `weights` (the loaders already checked shapes against `config`).
    pub fn new(config: &ModelConfig, weights: &Weights) -> Result<ReferenceModel> {
        let opt = |t: &Option<crate::tensor::Tensor>| t.as_ref().map(deq).transpose();
        let layers = weights
            .layers
            .iter()
            .map(|l| {
                Ok(Layer {
                    attn_norm: deq(&l.attn_norm)?,
                    q: deq(&l.q)?,
                    k: deq(&l.k)?,
                    v: deq(&l.v)?,
                    q_bias: opt(&l.q_bias)?,
                    k_bias: opt(&l.k_bias)?,
                    v_bias: opt(&l.v_bias)?,
                    o: deq(&l.o)?,
                    ffn_norm: deq(&l.ffn_norm)?,
                    gate: deq(&l.gate)?,
                    up: deq(&l.up)?,
                    down: deq(&l.down)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(ReferenceModel {
            config: config.clone(),
            embed: deq(&weights.embed)?,
            layers,
            final_norm: deq(&weights.final_norm)?,
            lm_head: opt(&weights.lm_head)?,
            inv_freq: rope::inv_freq(config),
            layer_limit: config.num_layers,
        })
    }

    /// Runs `tokens` at the positions after the cache's and returns the logits of
    /// every one of them (`all_logits`) or only of the last.
    pub fn forward(&self, cache: &mut KvCache, tokens: &[u32], all_logits: bool) -> Result<Vec<Vec<f32>>> {
        if cache.len + tokens.len() > cache.capacity {
            return Err(Error::ContextOverflow { prompt: cache.len + tokens.len(), max_tokens: 0, context: cache.capacity });
        }
        let mut out = Vec::new();
        for (i, &t) in tokens.iter().enumerate() {
            let logits = self.step(cache, t)?;
            if all_logits || i + 1 == tokens.len() {
                out.push(logits);
            }
        }
        Ok(out)
    }

    /// The hidden state after `layer_limit` layers and the final norm, for one token.
    fn step(&self, cache: &mut KvCache, token: u32) -> Result<Vec<f32>> {
        let c = &self.config;
        let d = c.hidden_size;
        if token as usize >= c.vocab_size {
            return Err(Error::InvalidRequest(format!("token id {token} is outside the vocabulary ({})", c.vocab_size)));
        }
        let pos = cache.len;
        let mut x = self.embed[token as usize * d..(token as usize + 1) * d].to_vec();
        for (li, layer) in self.layers.iter().enumerate().take(self.layer_limit) {
            let h = rms_norm(&x, &layer.attn_norm, c.rms_norm_eps);
            let attn = self.attention(layer, li, &h, pos, cache);
            add_in_place(&mut x, &matvec(&layer.o, &attn, d));
            let h = rms_norm(&x, &layer.ffn_norm, c.rms_norm_eps);
            let gate = matvec(&layer.gate, &h, c.intermediate_size);
            let up = matvec(&layer.up, &h, c.intermediate_size);
            let act: Vec<f32> = gate.iter().zip(&up).map(|(&g, &u)| silu(g) * u).collect();
            add_in_place(&mut x, &matvec(&layer.down, &act, d));
        }
        cache.len += 1;
        let h = rms_norm(&x, &self.final_norm, c.rms_norm_eps);
        let head = self.lm_head.as_ref().unwrap_or(&self.embed);
        Ok(matvec(head, &h, c.vocab_size))
    }

    /// Self-attention of one position over the cache; appends this position's k/v.
    fn attention(&self, layer: &Layer, li: usize, h: &[f32], pos: usize, cache: &mut KvCache) -> Vec<f32> {
        let c = &self.config;
        let (hd, kv_dim) = (c.head_dim, cache.kv_dim);
        let [q, k, v] = project_qkv(
            [&layer.q, &layer.k, &layer.v],
            [&layer.q_bias, &layer.k_bias, &layer.v_bias],
            h,
            [c.num_heads * hd, kv_dim, kv_dim],
            pos,
            &self.inv_freq,
            c,
        );
        cache.k[li].extend_from_slice(&k);
        cache.v[li].extend_from_slice(&v);
        let (keys, values) = (&cache.k[li], &cache.v[li]);
        let group = c.num_heads / c.num_kv_heads;
        let scale = 1.0 / (hd as f32).sqrt();
        let mut out = vec![0.0; c.num_heads * hd];
        for head in 0..c.num_heads {
            let kvh = head / group;
            let qh = &q[head * hd..(head + 1) * hd];
            let first = c.sliding_window.first_key(li, pos);
            let mut scores: Vec<f32> =
                (first..=pos).map(|p| dot(qh, &keys[p * kv_dim + kvh * hd..p * kv_dim + (kvh + 1) * hd]) * scale).collect();
            softmax_in_place(&mut scores);
            let oh = &mut out[head * hd..(head + 1) * hd];
            for (p, &s) in (first..=pos).zip(&scores) {
                let vh = &values[p * kv_dim + kvh * hd..p * kv_dim + (kvh + 1) * hd];
                oh.iter_mut().zip(vh).for_each(|(o, &vv)| *o += s * vv);
            }
        }
        out
    }
}

/// q, k and v of one position (`rows` each) from `h`, biases added, q and k roped:
/// the attention input of the reference and of every DTP lane.
pub(crate) fn project_qkv(
    w: [&[f32]; 3],
    bias: [&Option<Vec<f32>>; 3],
    h: &[f32],
    rows: [usize; 3],
    pos: usize,
    inv_freq: &[f32],
    c: &ModelConfig,
) -> [Vec<f32>; 3] {
    let mut out = [0, 1, 2].map(|i| matvec(w[i], h, rows[i]));
    for (y, b) in out.iter_mut().zip(bias) {
        if let Some(b) = b {
            add_in_place(y, b);
        }
    }
    for y in &mut out[..2] {
        rope::apply(y, c.head_dim, pos, inv_freq, c.rope_layout);
    }
    out
}

/// `y = W x` for `W` of `[rows, x.len()]`.
pub fn matvec(w: &[f32], x: &[f32], rows: usize) -> Vec<f32> {
    let cols = x.len();
    debug_assert_eq!(w.len(), rows * cols);
    (0..rows).map(|r| dot(&w[r * cols..(r + 1) * cols], x)).collect()
}

/// Dot product in f32 with eight partial sums (as a float32 GEMV would), which also
/// lets the compiler vectorise it.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac.remainder().iter().zip(bc.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ac.zip(bc) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// RMSNorm: `x / sqrt(mean(x²) + eps) * w`.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let ms = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let scale = 1.0 / (ms + eps).sqrt();
    x.iter().zip(w).map(|(&v, &g)| v * scale * g).collect()
}

pub(crate) fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

pub(crate) fn add_in_place(y: &mut [f32], x: &[f32]) {
    y.iter_mut().zip(x).for_each(|(a, b)| *a += b);
}

pub(crate) fn softmax_in_place(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    x.iter_mut().for_each(|v| {
        *v = (*v - max).exp();
        sum += *v;
    });
    x.iter_mut().for_each(|v| *v /= sum);
}
