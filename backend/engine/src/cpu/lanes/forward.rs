//! The fast forward pass of a Laneformer over a batch of tokens: every lane's residual
//! stream, its shard of every block and the published reduction (docs/dtp.md) on the
//! thread team, phases separated by barriers. The same math as the float32 lane
//! reference (`dtp::reference`); rows of every activation buffer are (token, lane)
//! pairs, row `t·L + l`, so a lane's products read its own rows and a token's lanes
//! lie side by side (a `Lane` head reads them as one vector).

use std::ops::Range;
use std::sync::Mutex;

use crate::config::LaneHead;
use crate::cpu::act_quant::ActPrecision;
use crate::cpu::forward::{begin, end_pass, record_error, Begun, LogitsFor};
use crate::cpu::rope::{rope_tables, rotate};
use crate::cpu::kernels::{matmul, MatmulIo};
use crate::cpu::attend::attend;
use crate::cpu::kv_cache::{store_key, store_value, KvCache, KEY_TILE};
use crate::cpu::lanes::model::LaneModel;
use crate::cpu::packed::PackedMatrix;
use crate::cpu::pool::{Pool, Team};
use crate::cpu::shared::SharedSlice;
use crate::cpu::vecops;
use crate::dtp::config::Combine;
use crate::dtp::shard::lane_row;
use crate::error::{Error, Result};

/// Row strides (floats) of the lane buffers: matmul outputs padded to row groups.
#[derive(Debug, Clone, Copy)]
struct Strides {
    d: usize,
    /// A lane's query / KV / FFN width.
    qd: usize,
    kvd: usize,
    ffn: usize,
    q: usize,
    kv: usize,
    part: usize,
    gate: usize,
    head: usize,
}

/// Scratch buffers of [`forward`], sized for `batch` tokens.
pub struct LaneWorkspace {
    batch: usize,
    threads: usize,
    s: Strides,
    x: Vec<f32>,
    h: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    att: Vec<f32>,
    /// Block partials of the last `delay + 1` layers: `[slot][block][row][part]`.
    parts: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    act: Vec<f32>,
    /// The head's input per token (`Replicate`: the lanes' mean or the summed norm).
    hh: Vec<f32>,
    head_out: Vec<f32>,
    logits: Vec<f32>,
    scores: Vec<f32>,
}

impl LaneWorkspace {
    /// Buffers for batches of up to `batch` tokens on `threads` members.
    pub fn new(m: &LaneModel, batch: usize, threads: usize) -> LaneWorkspace {
        let c = &m.config;
        let (lanes, b) = (m.lanes(), &m.blocks[0][0]);
        let s = Strides {
            d: c.hidden_size,
            qd: b.q.rows,
            kvd: b.k.rows,
            ffn: b.gate.rows,
            q: b.q.padded_rows(),
            kv: b.k.padded_rows(),
            part: b.o.padded_rows().max(b.down.padded_rows()),
            gate: b.gate.padded_rows(),
            head: m.heads.iter().map(|h| h.padded_rows()).max().unwrap_or(0),
        };
        let rows = batch * lanes;
        LaneWorkspace {
            batch,
            threads,
            s,
            x: vec![0.0; rows * s.d],
            h: vec![0.0; rows * s.d],
            q: vec![0.0; rows * s.q],
            k: vec![0.0; rows * s.kv],
            v: vec![0.0; rows * s.kv],
            att: vec![0.0; rows * s.qd],
            parts: vec![0.0; (m.schedule.delay + 1) * 2 * rows * s.part],
            gate: vec![0.0; rows * s.gate],
            up: vec![0.0; rows * s.gate],
            act: vec![0.0; rows * s.ffn],
            hh: vec![0.0; batch * s.d],
            // A vocabulary-parallel head writes one row per (token, lane), the others one per token.
            head_out: vec![0.0; if m.heads.len() > 1 { rows } else { batch } * s.head],
            logits: vec![0.0; batch * c.vocab_size],
            scores: Vec::new(),
        }
    }

    /// Largest batch.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Logit row `r` of the last call.
    pub fn logits(&self, r: usize, vocab: usize) -> &[f32] {
        &self.logits[r * vocab..(r + 1) * vocab]
    }
}

/// Runs `tokens` after the cache's positions, appends their keys and values, and leaves
/// the wanted logits in `ws` (row 0 = last token for [`LogitsFor::Last`]); returns the
/// number of logit rows.
pub fn forward(m: &LaneModel, pool: &Pool, ws: &mut LaneWorkspace, cache: &mut KvCache, tokens: &[u32], want: LogitsFor) -> Result<usize> {
    let n = tokens.len();
    assert!(n > 0 && n <= ws.batch, "batch of {n} tokens for a workspace of {}", ws.batch);
    assert_eq!(ws.threads, pool.threads());
    let Begun { start, score_stride, head_stride, logit_rows } = begin(&m.config, tokens, want, cache, &mut ws.scores, ws.threads)?;
    let half = m.config.head_dim / 2;
    let (mut sin, mut cos) = (vec![0.0; n * half], vec![0.0; n * half]);
    rope_tables(&m.inv_freq, start, n, &mut sin, &mut cos);
    let (kc, vc) = cache.keys_values_mut();
    let pass = Pass {
        m,
        tokens,
        start,
        lanes: m.lanes(),
        logit_rows: logit_rows.clone(),
        s: ws.s,
        head_stride,
        score_stride,
        x: SharedSlice::new(&mut ws.x),
        h: SharedSlice::new(&mut ws.h),
        q: SharedSlice::new(&mut ws.q),
        k: SharedSlice::new(&mut ws.k),
        v: SharedSlice::new(&mut ws.v),
        att: SharedSlice::new(&mut ws.att),
        parts: SharedSlice::new(&mut ws.parts),
        gate: SharedSlice::new(&mut ws.gate),
        up: SharedSlice::new(&mut ws.up),
        act: SharedSlice::new(&mut ws.act),
        hh: SharedSlice::new(&mut ws.hh),
        head_out: SharedSlice::new(&mut ws.head_out),
        logits: SharedSlice::new(&mut ws.logits),
        scores: SharedSlice::new(&mut ws.scores),
        kc: SharedSlice::new(kc),
        vc: SharedSlice::new(vc),
        cos: &cos,
        sin: &sin,
        error: Mutex::new(None),
    };
    pool.run(&|team| pass.run(team));
    end_pass(pass.error, cache, n)?;
    Ok(logit_rows.len())
}

/// The two blocks of a layer; each has its own partials and the same rule.
#[derive(Debug, Clone, Copy)]
enum Block {
    Attention = 0,
    Mlp = 1,
}

/// A matrix product of one lane: `w` times the rows `inputs` into the rows `outputs`.
struct Job<'a> {
    w: &'a PackedMatrix,
    inputs: Vec<*const f32>,
    outputs: Vec<*mut f32>,
}

/// One forward call's shared state; `run` is what every member executes.
struct Pass<'a> {
    m: &'a LaneModel,
    tokens: &'a [u32],
    start: usize,
    lanes: usize,
    logit_rows: Range<usize>,
    s: Strides,
    head_stride: usize,
    score_stride: usize,
    x: SharedSlice<'a, f32>,
    h: SharedSlice<'a, f32>,
    q: SharedSlice<'a, f32>,
    k: SharedSlice<'a, f32>,
    v: SharedSlice<'a, f32>,
    att: SharedSlice<'a, f32>,
    parts: SharedSlice<'a, f32>,
    gate: SharedSlice<'a, f32>,
    up: SharedSlice<'a, f32>,
    act: SharedSlice<'a, f32>,
    hh: SharedSlice<'a, f32>,
    head_out: SharedSlice<'a, f32>,
    logits: SharedSlice<'a, f32>,
    scores: SharedSlice<'a, f32>,
    /// The KV cache (f16 bits).
    kc: SharedSlice<'a, u16>,
    vc: SharedSlice<'a, u16>,
    cos: &'a [f32],
    sin: &'a [f32],
    error: Mutex<Option<Error>>,
}

impl Pass<'_> {
    fn n(&self) -> usize {
        self.tokens.len()
    }

    /// Rows of the batch: (token, lane) pairs.
    fn rows(&self) -> usize {
        self.n() * self.lanes
    }

    fn fail(&self, e: Error) {
        record_error(&self.error, e);
    }

    fn run(&self, team: &Team<'_>) {
        let d = self.s.d;
        for t in team.split(self.n()) {
            // SAFETY: token t's lane rows of x are this member's alone in this phase.
            let rows = unsafe { self.x.part_mut(t * self.lanes * d..(t + 1) * self.lanes * d) };
            let (first, rest) = rows.split_at_mut(d);
            if let Err(e) = self.m.embed_row(self.tokens[t], first) {
                self.fail(e);
            }
            rest.chunks_exact_mut(d).for_each(|r| r.copy_from_slice(first));
        }
        team.barrier();
        for li in 0..self.m.config.num_layers {
            self.norm(team, &self.m.norms[li].0);
            team.barrier();
            self.products(team, &self.jobs(li, Block::Attention, 0));
            team.barrier();
            self.rope_and_cache(team, li);
            team.barrier();
            self.attention(team, li);
            team.barrier();
            self.products(team, &self.jobs(li, Block::Attention, 1));
            team.barrier();
            self.combine(team, li, Block::Attention);
            team.barrier();
            self.norm(team, &self.m.norms[li].1);
            team.barrier();
            self.products(team, &self.jobs(li, Block::Mlp, 0));
            team.barrier();
            self.silu(team);
            team.barrier();
            self.products(team, &self.jobs(li, Block::Mlp, 1));
            team.barrier();
            self.combine(team, li, Block::Mlp);
            team.barrier();
        }
        self.head(team);
    }

    /// RMSNorm of every row of x into h with its lane's scales.
    fn norm(&self, team: &Team<'_>, scales: &[f32]) {
        let d = self.s.d;
        for r in team.split(self.rows()) {
            // SAFETY: x is read-only in this phase; row r of h is this member's alone.
            unsafe {
                let x = self.x.part(r * d..(r + 1) * d);
                let h = self.h.part_mut(r * d..(r + 1) * d);
                vecops::rms_norm(self.m.isa, x, lane_row(scales, d, r % self.lanes), self.m.config.rms_norm_eps, h);
            }
        }
    }

    /// The products of one step of a block for every lane: `stage` 0 is q/k/v or
    /// gate/up (input: the normalised rows), 1 is o or down (into the partial slots).
    fn jobs(&self, li: usize, block: Block, stage: usize) -> Vec<Job<'_>> {
        let (s, lanes) = (self.s, self.lanes);
        let rows = |lane: usize| (0..self.n()).map(move |t| t * lanes + lane);
        let input =
            |buf: &SharedSlice<'_, f32>, stride: usize, lane: usize| rows(lane).map(|r| buf.ptr_at(r * stride).cast_const()).collect();
        let output = |buf: &SharedSlice<'_, f32>, stride: usize, lane: usize| rows(lane).map(|r| buf.ptr_at(r * stride)).collect();
        let part = self.part_slot(li, block);
        let mut jobs = Vec::new();
        for (lane, b) in self.m.blocks[li].iter().enumerate() {
            match (block, stage) {
                (Block::Attention, 0) => {
                    for (w, buf, stride) in [(&b.q, &self.q, s.q), (&b.k, &self.k, s.kv), (&b.v, &self.v, s.kv)] {
                        jobs.push(Job { w, inputs: input(&self.h, s.d, lane), outputs: output(buf, stride, lane) });
                    }
                }
                (Block::Mlp, 0) => {
                    for (w, buf) in [(&b.gate, &self.gate), (&b.up, &self.up)] {
                        jobs.push(Job { w, inputs: input(&self.h, s.d, lane), outputs: output(buf, s.gate, lane) });
                    }
                }
                (Block::Attention, _) => {
                    let outputs = rows(lane).map(|r| self.parts.ptr_at(part + r * s.part)).collect();
                    jobs.push(Job { w: &b.o, inputs: input(&self.att, s.qd, lane), outputs });
                }
                (Block::Mlp, _) => {
                    let outputs = rows(lane).map(|r| self.parts.ptr_at(part + r * s.part)).collect();
                    jobs.push(Job { w: &b.down, inputs: input(&self.act, s.ffn, lane), outputs });
                }
            }
        }
        jobs
    }

    /// Splits the row groups of `jobs` over the team.
    fn products(&self, team: &Team<'_>, jobs: &[Job<'_>]) {
        let total: usize = jobs.iter().map(|j| j.w.groups()).sum();
        let mine = team.split(total);
        let mut base = 0;
        for j in jobs {
            let g = j.w.groups();
            let (lo, hi) = (mine.start.clamp(base, base + g) - base, mine.end.clamp(base, base + g) - base);
            if lo < hi {
                let io = MatmulIo { quant: &[], precision: ActPrecision::Int8, float: &j.inputs, out: &j.outputs };
                // SAFETY: groups lo..hi of these output rows are this member's alone in this
                // phase (every job writes its own rows); the inputs were written before the
                // last barrier and hold `w.cols` floats; the outputs have padded rows.
                unsafe { matmul(self.m.isa, j.w, lo..hi, io) };
            }
            base += g;
        }
    }

    /// Start of the partial slot of `block` of layer `li` (a ring of `delay + 1` layers).
    fn part_slot(&self, li: usize, block: Block) -> usize {
        let slot = li % (self.m.schedule.delay + 1);
        (slot * 2 + block as usize) * self.rows() * self.s.part
    }

    /// RoPE of each row's query and key heads, and its keys and values into the cache at
    /// the lane's KV heads.
    fn rope_and_cache(&self, team: &Team<'_>, li: usize) {
        let (c, s) = (&self.m.config, self.s);
        let (hd, half) = (c.head_dim, c.head_dim / 2);
        for r in team.split(self.rows()) {
            let (t, lane) = (r / self.lanes, r % self.lanes);
            let pos = self.start + t;
            let (cos, sin) = (&self.cos[t * half..(t + 1) * half], &self.sin[t * half..(t + 1) * half]);
            let kv_first = self.m.plan.lanes[lane].kv_heads.start;
            // SAFETY: row r of q/k/v and the cache entries of its lane's KV heads at `pos`
            // are this member's alone in this phase (lanes hold disjoint KV heads).
            unsafe {
                for head in self.q.part_mut(r * s.q..r * s.q + s.qd).chunks_exact_mut(hd) {
                    rotate(head, cos, sin, c.rope_layout);
                }
                let keys = self.k.part_mut(r * s.kv..r * s.kv + s.kvd);
                let values = self.v.part(r * s.kv..r * s.kv + s.kvd);
                for (g, (k, v)) in keys.chunks_exact_mut(hd).zip(values.chunks_exact(hd)).enumerate() {
                    rotate(k, cos, sin, c.rope_layout);
                    let run = (li * c.num_kv_heads + kv_first + g) * self.head_stride;
                    store_key(self.kc, run, pos, k);
                    store_value(self.vc, run, pos, v);
                }
            }
        }
    }

    /// Causal (or windowed) attention of every (token, head), dealt round-robin.
    fn attention(&self, team: &Team<'_>, li: usize) {
        let (c, s) = (&self.m.config, self.s);
        let (hd, nh) = (c.head_dim, c.num_heads);
        let (per_lane, group) = (nh / self.lanes, nh / c.num_kv_heads);
        let scale = 1.0 / (hd as f32).sqrt();
        // SAFETY: each member has its own scores row.
        let scores = unsafe { self.scores.part_mut(team.id * self.score_stride..(team.id + 1) * self.score_stride) };
        for u in (team.id..nh * self.n()).step_by(team.threads) {
            let (t, head) = (u / nh, u % nh);
            let (lane, local) = (head / per_lane, head % per_lane);
            let r = t * self.lanes + lane;
            let len = self.start + t + 1;
            let first = c.sliding_window.first_key(li, len - 1);
            let run = (li * c.num_kv_heads + head / group) * self.head_stride;
            // SAFETY: q and the cache are read-only in this phase; this head of row r's
            // output is this member's alone.
            unsafe {
                let q = self.q.part(r * s.q + local * hd..r * s.q + (local + 1) * hd);
                let keys = self.kc.part(run..run + len.next_multiple_of(KEY_TILE) * hd);
                let values = self.vc.part(run..run + len * hd);
                let out = self.att.part_mut(r * s.qd + local * hd..r * s.qd + (local + 1) * hd);
                attend(self.m.isa, q, keys, values, first, scale, scores, out);
            }
        }
    }

    /// `act = silu(gate) · up` of every row.
    fn silu(&self, team: &Team<'_>) {
        let s = self.s;
        for r in team.split(self.rows()) {
            // SAFETY: gate/up are read-only now; row r of act is this member's alone.
            unsafe {
                let gate = self.gate.part(r * s.gate..r * s.gate + s.ffn);
                let up = self.up.part(r * s.gate..r * s.gate + s.ffn);
                vecops::silu_mul(self.m.isa, gate, up, self.act.part_mut(r * s.ffn..(r + 1) * s.ffn));
            }
        }
    }

    /// Adds the block's partials to every row's residual, as the schedule says.
    fn combine(&self, team: &Team<'_>, li: usize, block: Block) {
        let (d, part, lanes) = (self.s.d, self.s.part, self.lanes);
        let now = self.part_slot(li, block);
        for r in team.split(self.rows()) {
            let (t, lane) = (r / lanes, r % lanes);
            let at = |slot: usize, j: usize| slot + (t * lanes + j) * part;
            // SAFETY: the partial slots are read-only in this phase; row r of x is this
            // member's alone.
            unsafe {
                let x = self.x.part_mut(r * d..(r + 1) * d);
                let own = self.parts.part(at(now, lane)..at(now, lane) + d);
                match self.m.schedule.combine(li) {
                    Combine::AllReduce => {
                        // In lane order, as the reference sums.
                        let mut total = self.parts.part(at(now, 0)..at(now, 0) + d).to_vec();
                        for j in 1..lanes {
                            let pj = self.parts.part(at(now, j)..at(now, j) + d);
                            total.iter_mut().zip(pj).for_each(|(a, &b)| *a += b);
                        }
                        x.iter_mut().zip(&total).for_each(|(a, &b)| *a += b);
                    }
                    Combine::LaneLocal { scale, .. } => x.iter_mut().zip(own).for_each(|(a, &b)| *a += scale * b),
                    Combine::Delayed { received, .. } => {
                        let late = self.part_slot(received, block);
                        let mut add = own.to_vec();
                        for j in (0..lanes).filter(|&j| j != lane) {
                            let pj = self.parts.part(at(late, j)..at(late, j) + d);
                            add.iter_mut().zip(pj).for_each(|(a, &b)| *a += b);
                        }
                        x.iter_mut().zip(&add).for_each(|(a, &b)| *a += b);
                    }
                }
            }
        }
    }

    /// The final norm and the LM head of the wanted positions, per the head kind.
    fn head(&self, team: &Team<'_>) {
        let (c, s, lanes) = (&self.m.config, self.s, self.lanes);
        let (d, vocab, eps) = (s.d, c.vocab_size, c.rms_norm_eps);
        let kind = c.lanes.head;
        let want = self.logit_rows.clone();
        for j in team.split(want.len()) {
            let t = want.start + j;
            // SAFETY: x is read-only now; token t's rows of h and row j of hh are this member's alone.
            unsafe {
                let x = self.x.part(t * lanes * d..(t + 1) * lanes * d);
                let hh = self.hh.part_mut(j * d..(j + 1) * d);
                if c.lanes.sum_before_norm {
                    let mut sum = x[..d].to_vec();
                    for row in x.chunks_exact(d).skip(1) {
                        sum.iter_mut().zip(row).for_each(|(a, &b)| *a += b);
                    }
                    vecops::rms_norm(self.m.isa, &sum, &self.m.final_norm, eps, hh);
                    continue;
                }
                let h = self.h.part_mut(t * lanes * d..(t + 1) * lanes * d);
                for (lane, (xr, hr)) in x.chunks_exact(d).zip(h.chunks_exact_mut(d)).enumerate() {
                    vecops::rms_norm(self.m.isa, xr, lane_row(&self.m.final_norm, d, lane), eps, hr);
                }
                if kind == LaneHead::Replicate {
                    hh.copy_from_slice(&h[..d]);
                    for row in h.chunks_exact(d).skip(1) {
                        hh.iter_mut().zip(row).for_each(|(a, &b)| *a += b);
                    }
                    hh.iter_mut().for_each(|v| *v /= lanes as f32);
                }
            }
        }
        team.barrier();
        let out = |j: usize| self.head_out.ptr_at(j * s.head);
        let head = &self.m.heads[0];
        let per_token = |input: &dyn Fn(usize) -> *const f32| Job {
            w: head,
            inputs: (0..want.len()).map(input).collect(),
            outputs: (0..want.len()).map(out).collect(),
        };
        let jobs: Vec<Job<'_>> = if c.lanes.sum_before_norm || kind == LaneHead::Replicate {
            vec![per_token(&|j| self.hh.ptr_at(j * d).cast_const())]
        } else if kind == LaneHead::Lane {
            // A token's normalised lanes side by side are the head's `lanes × hidden` input.
            vec![per_token(&|j| self.h.ptr_at((want.start + j) * lanes * d).cast_const())]
        } else {
            (0..lanes)
                .map(|lane| Job {
                    w: &self.m.heads[lane],
                    inputs: want.clone().map(|t| self.h.ptr_at((t * lanes + lane) * d).cast_const()).collect(),
                    outputs: (0..want.len()).map(|j| out(j * lanes + lane)).collect(),
                })
                .collect()
        };
        self.products(team, &jobs);
        team.barrier();
        let per_lane = vocab / lanes;
        for j in team.split(want.len()) {
            // SAFETY: head_out is read-only now; logit row j is this member's alone.
            unsafe {
                let row = self.logits.part_mut(j * vocab..(j + 1) * vocab);
                if kind == LaneHead::VocabParallel && !c.lanes.sum_before_norm {
                    for (lane, chunk) in row.chunks_exact_mut(per_lane).enumerate() {
                        let at = (j * lanes + lane) * s.head;
                        chunk.copy_from_slice(self.head_out.part(at..at + per_lane));
                    }
                } else {
                    row.copy_from_slice(self.head_out.part(j * s.head..j * s.head + vocab));
                }
            }
        }
    }
}

// SAFETY: the pointer tables point into workspace buffers that outlive the job; members
// write disjoint parts of them between barriers (see each phase).
unsafe impl Sync for Pass<'_> {}
