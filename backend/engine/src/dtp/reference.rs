//! The float32 CPU reference of lanes: a model split into lanes exactly as the kernel
//! splits it ([`ShardPlan`]), run as standard tensor parallelism or as Delayed Tensor
//! Parallelism ([`DtpSchedule`], docs/dtp.md) — Kog's Laneformer as published, with its
//! per-lane norm scales, sliding-window layers and three LM-head kinds
//! ([`crate::config::LaneConfig`]). Plain loops like `cpu::reference` (whose helpers it
//! reuses, so one lane is that model bit for bit); it anchors the GPU kernel, the fast
//! CPU runtime's lanes and scripts/fixtures/make_laneformer_fixtures.py.

use crate::config::{LaneHead, ModelConfig};
use crate::cpu::reference::{add_in_place, matvec, project_qkv, rms_norm, silu, softmax_in_place};
use crate::cpu::rope;
use crate::dtp::config::{Combine, DtpSchedule};
use crate::dtp::shard::{lane_row, slice_cols, slice_rows, LaneShard, ShardPlan};
use crate::error::{Error, Result};
use crate::weights::Weights;

/// One lane's slice of one layer, linear weights `[out, in]` row-major.
struct LaneLayer {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    q_bias: Option<Vec<f32>>,
    k_bias: Option<Vec<f32>>,
    v_bias: Option<Vec<f32>>,
    /// `[hidden, lane's q heads × head_dim]`: o_proj's columns of this lane's heads.
    o: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    /// `[hidden, lane's FFN columns]`.
    down: Vec<f32>,
}

/// Everything one GPU holds besides the replicated embedding and norms.
struct Lane {
    shard: LaneShard,
    layers: Vec<LaneLayer>,
    /// `[lane's vocab rows, hidden]` (empty for a `Lane` head, which reads every lane).
    lm_head: Vec<f32>,
}

/// The two blocks of a layer; DTP applies the same rule to both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Attention = 0,
    Mlp = 1,
}

/// A model split over `plan.degree` lanes, every weight in f32.
pub struct ShardedModel {
    pub config: ModelConfig,
    pub plan: ShardPlan,
    embed: Vec<f32>,
    /// `(attn_norm, ffn_norm)` per layer: one scale row, or one per lane (`lane_norms`).
    norms: Vec<(Vec<f32>, Vec<f32>)>,
    final_norm: Vec<f32>,
    /// A `Lane` head's `[vocab, lanes × hidden]` (empty otherwise).
    lane_head: Vec<f32>,
    inv_freq: Vec<f32>,
    lanes: Vec<Lane>,
}

/// How the lanes combine their partial sums.
#[derive(Debug, Clone, PartialEq)]
pub enum Execution {
    /// Standard tensor parallelism: one residual stream, every block all-reduced at once.
#[cfg(feature = "lab")]
    Standard,
    /// Delayed Tensor Parallelism: one residual stream per lane, combined per the schedule.
    Delayed(DtpSchedule),
}

impl ShardedModel {
    /// Dequantizes `weights` and splits them over `degree` lanes (an error when the shape
    /// does not divide, or when a Laneformer is split into other than its own lanes).
    pub fn new(config: &ModelConfig, weights: &Weights, degree: usize) -> Result<ShardedModel> {
        if config.lanes.is_laneformer() && degree != config.lanes.count {
            return Err(Error::InvalidRequest(format!(
                "{} has {} lanes; its reference runs all of them, not {degree}",
                config.name, config.lanes.count
            )));
        }
        let plan = ShardPlan::new(config, degree)?;
        let c = config;
        let (d, hd) = (c.hidden_size, c.head_dim);
        let head_rows = |r: &std::ops::Range<usize>| r.start * hd..r.end * hd;
        let layers = weights
            .layers
            .iter()
            .map(|l| {
                let f32s = |t: &crate::tensor::Tensor| t.to_f32();
                let bias = |t: &Option<crate::tensor::Tensor>| t.as_ref().map(f32s).transpose();
                Ok((
                    [f32s(&l.q)?, f32s(&l.k)?, f32s(&l.v)?, f32s(&l.o)?, f32s(&l.gate)?, f32s(&l.up)?, f32s(&l.down)?],
                    [bias(&l.q_bias)?, bias(&l.k_bias)?, bias(&l.v_bias)?],
                    (f32s(&l.attn_norm)?, f32s(&l.ffn_norm)?),
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let head = weights.lm_head().to_f32()?;
        let lane_head = config.lanes.head == LaneHead::Lane;
        let lanes = plan
            .lanes
            .iter()
            .map(|s| {
                let (qr, kvr) = (head_rows(&s.q_heads), head_rows(&s.kv_heads));
                let layers = layers
                    .iter()
                    .map(|([q, k, v, o, gate, up, down], [qb, kb, vb], _)| LaneLayer {
                        q: slice_rows(q, d, qr.clone()),
                        k: slice_rows(k, d, kvr.clone()),
                        v: slice_rows(v, d, kvr.clone()),
                        q_bias: qb.as_ref().map(|b| b[qr.clone()].to_vec()),
                        k_bias: kb.as_ref().map(|b| b[kvr.clone()].to_vec()),
                        v_bias: vb.as_ref().map(|b| b[kvr.clone()].to_vec()),
                        o: slice_cols(o, c.num_heads * hd, qr.clone()),
                        gate: slice_rows(gate, d, s.ffn.clone()),
                        up: slice_rows(up, d, s.ffn.clone()),
                        down: slice_cols(down, c.intermediate_size, s.ffn.clone()),
                    })
                    .collect();
                let lm_head = if lane_head { Vec::new() } else { slice_rows(&head, d, s.vocab.clone()) };
                Lane { shard: s.clone(), layers, lm_head }
            })
            .collect();
        Ok(ShardedModel {
            config: c.clone(),
            plan,
            embed: weights.embed.to_f32()?,
            norms: layers.into_iter().map(|(_, _, n)| n).collect(),
            final_norm: weights.final_norm.to_f32()?,
            lane_head: if lane_head { head } else { Vec::new() },
            inv_freq: rope::inv_freq(c),
            lanes,
        })
    }

    /// Number of lanes.
    pub fn degree(&self) -> usize {
        self.plan.degree
    }

    /// A fresh sequence run as `execution` (a DTP schedule must be bound to this model and degree).
    pub fn session(&self, execution: Execution) -> Result<ShardedSession<'_>> {
        // Without `lab` (no `Standard`) the pattern always matches.
        #[allow(irrefutable_let_patterns)]
        if let Execution::Delayed(s) = &execution {
            if s.lanes != self.degree() || s.num_layers != self.config.num_layers {
                return Err(Error::InvalidRequest(format!(
                    "dtp: schedule for {} lanes × {} layers does not fit a model of {} layers split over {} lanes",
                    s.lanes,
                    s.num_layers,
                    self.config.num_layers,
                    self.degree()
                )));
            }
        }
        let caches = (0..self.degree()).map(|_| LaneCache::new(self.config.num_layers)).collect();
        Ok(ShardedSession { model: self, execution, caches, len: 0 })
    }

    /// The norm scales lane `lane` applies before `block` of `layer`.
    fn norm(&self, layer: usize, block: Block, lane: usize) -> &[f32] {
        let all = match block {
            Block::Attention => &self.norms[layer].0,
            Block::Mlp => &self.norms[layer].1,
        };
        lane_row(all, self.config.hidden_size, lane)
    }

    /// The final norm's scales of lane `lane`.
    fn final_norm(&self, lane: usize) -> &[f32] {
        lane_row(&self.final_norm, self.config.hidden_size, lane)
    }

    /// Lane `lane`'s partial sum `p_lane ∈ R^hidden` of one block, from its input `h`.
    fn partial(&self, lane: usize, layer: usize, block: Block, h: &[f32], pos: usize, cache: &mut LaneCache) -> Vec<f32> {
        match block {
            Block::Attention => self.attention_partial(lane, layer, h, pos, cache),
            Block::Mlp => {
                let l = &self.lanes[lane].layers[layer];
                let cols = self.lanes[lane].shard.ffn.len();
                let gate = matvec(&l.gate, h, cols);
                let up = matvec(&l.up, h, cols);
                let act: Vec<f32> = gate.iter().zip(&up).map(|(&g, &u)| silu(g) * u).collect();
                matvec(&l.down, &act, self.config.hidden_size)
            }
        }
    }

    /// Attention of the lane's query heads over its own KV cache, through its o_proj columns.
    fn attention_partial(&self, lane: usize, li: usize, h: &[f32], pos: usize, cache: &mut LaneCache) -> Vec<f32> {
        let c = &self.config;
        let (lane, hd) = (&self.lanes[lane], c.head_dim);
        let l = &lane.layers[li];
        let (nq, nkv) = (lane.shard.q_heads.len(), lane.shard.kv_heads.len());
        let kv_dim = nkv * hd;
        let [q, k, v] =
            project_qkv([&l.q, &l.k, &l.v], [&l.q_bias, &l.k_bias, &l.v_bias], h, [nq * hd, kv_dim, kv_dim], pos, &self.inv_freq, c);
        cache.k[li].extend_from_slice(&k);
        cache.v[li].extend_from_slice(&v);
        let (keys, values) = (&cache.k[li], &cache.v[li]);
        let group = c.num_heads / c.num_kv_heads;
        let scale = 1.0 / (hd as f32).sqrt();
        let mut out = vec![0.0; nq * hd];
        for local in 0..nq {
            let kvh = (lane.shard.q_heads.start + local) / group - lane.shard.kv_heads.start;
            let qh = &q[local * hd..(local + 1) * hd];
            let at = |p: usize| p * kv_dim + kvh * hd..p * kv_dim + (kvh + 1) * hd;
            let first = c.sliding_window.first_key(li, pos);
            let mut scores: Vec<f32> = (first..=pos).map(|p| crate::cpu::reference::dot(qh, &keys[at(p)]) * scale).collect();
            softmax_in_place(&mut scores);
            let oh = &mut out[local * hd..(local + 1) * hd];
            for (p, &s) in (first..=pos).zip(&scores) {
                oh.iter_mut().zip(&values[at(p)]).for_each(|(o, &vv)| *o += s * vv);
            }
        }
        matvec(&l.o, &out, c.hidden_size)
    }

    /// Vocabulary-parallel LM head: each lane's rows of the logits from `h(lane)`, concatenated.
    fn logits(&self, h: impl Fn(usize) -> Vec<f32>) -> Vec<f32> {
        self.lanes.iter().enumerate().flat_map(|(i, l)| matvec(&l.lm_head, &h(i), l.shard.vocab.len())).collect()
    }

    /// The logits of the lanes' final residuals `r`, per the model's head kind.
    fn head(&self, r: &[Vec<f32>]) -> Vec<f32> {
        let (c, lanes) = (&self.config, &self.config.lanes);
        let eps = c.rms_norm_eps;
        if lanes.sum_before_norm {
            let h = rms_norm(&sum(r), self.final_norm(0), eps);
            return self.logits(|_| h.clone());
        }
        let hs: Vec<Vec<f32>> = r.iter().enumerate().map(|(i, ri)| rms_norm(ri, self.final_norm(i), eps)).collect();
        match lanes.head {
            LaneHead::Replicate => {
                // The lanes' mean (one small all-reduce on the GPU).
                let mean: Vec<f32> = sum(&hs).into_iter().map(|v| v / hs.len() as f32).collect();
                self.logits(|_| mean.clone())
            }
            LaneHead::VocabParallel => self.logits(|i| hs[i].clone()),
            LaneHead::Lane => matvec(&self.lane_head, &hs.concat(), c.vocab_size),
        }
    }
}

/// One lane's keys and values: `[layer][pos × lane's kv heads × head_dim]`.
struct LaneCache {
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
}

impl LaneCache {
    fn new(layers: usize) -> LaneCache {
        LaneCache { k: vec![Vec::new(); layers], v: vec![Vec::new(); layers] }
    }
}

/// One sequence on a [`ShardedModel`]: per-lane KV caches, one token at a time.
pub struct ShardedSession<'m> {
    model: &'m ShardedModel,
    execution: Execution,
    caches: Vec<LaneCache>,
    len: usize,
}

impl ShardedSession<'_> {
    /// Positions run so far.
    #[cfg(feature = "lab")]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True before the first token.
    #[cfg(feature = "lab")]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Teacher-forced logits of every token of `tokens`, after the positions already run.
    #[cfg(feature = "lab")]
    pub fn forward(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        tokens.iter().map(|&t| self.step(t)).collect()
    }

    /// Runs one token at the next position and returns its logits.
    pub fn step(&mut self, token: u32) -> Result<Vec<f32>> {
        let c = &self.model.config;
        if token as usize >= c.vocab_size {
            return Err(Error::TokenOutOfRange { id: token, vocab_size: c.vocab_size });
        }
        if self.len >= c.max_context {
            return Err(Error::ContextOverflow { prompt: self.len + 1, max_tokens: 0, context: c.max_context });
        }
        let d = c.hidden_size;
        let embedded = &self.model.embed[token as usize * d..(token as usize + 1) * d];
        let logits = match self.execution.clone() {
            #[cfg(feature = "lab")]
            Execution::Standard => self.standard(embedded),
            Execution::Delayed(schedule) => self.delayed(&schedule, embedded),
        };
        self.len += 1;
        Ok(logits)
    }

    /// Standard TP: `r += Σ_j p_j` after every block, summed in lane order.
    #[cfg(feature = "lab")]
    fn standard(&mut self, embedded: &[f32]) -> Vec<f32> {
        let (m, c) = (self.model, &self.model.config);
        let mut r = embedded.to_vec();
        for li in 0..c.num_layers {
            for block in [Block::Attention, Block::Mlp] {
                let h = rms_norm(&r, m.norm(li, block, 0), c.rms_norm_eps);
                let partials: Vec<Vec<f32>> =
                    self.caches.iter_mut().enumerate().map(|(j, cache)| m.partial(j, li, block, &h, self.len, cache)).collect();
                add_in_place(&mut r, &sum(&partials));
            }
        }
        m.head(&[r])
    }

    /// DTP, literally the rule of docs/dtp.md: lane `i` keeps its own `r_i`.
    fn delayed(&mut self, s: &DtpSchedule, embedded: &[f32]) -> Vec<f32> {
        let (m, c) = (self.model, &self.model.config);
        let lanes = m.degree();
        let mut r: Vec<Vec<f32>> = vec![embedded.to_vec(); lanes];
        // partials[layer][block][lane]: what other lanes may add d layers later.
        let mut partials: Vec<[Vec<Vec<f32>>; 2]> = Vec::with_capacity(c.num_layers);
        for li in 0..c.num_layers {
            let mut layer: [Vec<Vec<f32>>; 2] = [Vec::new(), Vec::new()];
            for block in [Block::Attention, Block::Mlp] {
                let p: Vec<Vec<f32>> = (0..lanes)
                    .map(|i| {
                        let h = rms_norm(&r[i], m.norm(li, block, i), c.rms_norm_eps);
                        m.partial(i, li, block, &h, self.len, &mut self.caches[i])
                    })
                    .collect();
                match s.combine(li) {
                    Combine::AllReduce => {
                        let total = sum(&p);
                        r.iter_mut().for_each(|ri| add_in_place(ri, &total));
                    }
                    Combine::LaneLocal { scale, .. } => {
                        for (ri, pi) in r.iter_mut().zip(&p) {
                            ri.iter_mut().zip(pi).for_each(|(a, &b)| *a += scale * b);
                        }
                    }
                    Combine::Delayed { received, .. } => {
                        // With delay 0 a layer receives its own partials.
                        let others = if received == li { &p } else { &partials[received][block as usize] };
                        for (i, ri) in r.iter_mut().enumerate() {
                            let mut add = p[i].clone();
                            for (_, pj) in others.iter().enumerate().filter(|(j, _)| *j != i) {
                                add_in_place(&mut add, pj);
                            }
                            add_in_place(ri, &add);
                        }
                    }
                }
                layer[block as usize] = p;
            }
            partials.push(layer);
        }
        m.head(&r)
    }
}

/// `Σ_j v_j` in lane order (the order a ring of peer writes sums in).
fn sum(vs: &[Vec<f32>]) -> Vec<f32> {
    let mut total = vs[0].clone();
    vs[1..].iter().for_each(|v| add_in_place(&mut total, v));
    total
}
