//! The fast forward pass over a batch of tokens (a prompt chunk, or one token when
//! decoding): one job on the thread team, phases separated by barriers, each phase
//! split so members write disjoint parts (rows of a matrix, tokens, heads). Same
//! math as `reference.rs` (transformers' LlamaForCausalLM), with activations of the
//! quantized matmuls in 8 bits as llama.cpp does.

use std::ops::Range;
use std::sync::Mutex;

use crate::cpu::act_quant::{ActPrecision, QuantActs, QuantView, TokenActs, QBLOCK};
use crate::cpu::fast_model::{FastLayer, FastModel};
use crate::cpu::kernels::{matmul, MatmulIo};
use crate::cpu::kv_cache::{key_offset, KvCache, KEY_TILE};
use crate::cpu::packed::{PackedMatrix, GROUP_ROWS};
use crate::cpu::pool::{Pool, Team};
use crate::cpu::shared::SharedSlice;
use crate::cpu::vecops;
use crate::config::RopeLayout;
use crate::error::{Error, Result};

/// Which positions of a batch need logits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogitsFor {
    /// Only the last (generation).
    Last,
    /// Every position (prompt scoring).
    All,
}

/// Scratch buffers for batches of up to `batch` tokens, reused across calls.
pub struct Workspace {
    batch: usize,
    threads: usize,
    x: Vec<f32>,
    h: Vec<f32>,
    hq: QuantActs,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    att: Vec<f32>,
    attq: QuantActs,
    proj: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    act: Vec<f32>,
    actq: QuantActs,
    logits: Vec<f32>,
    scores: Vec<f32>,
    cos: Vec<f32>,
    sin: Vec<f32>,
    vocab_stride: usize,
}

/// Row strides (outputs padded to whole 16-row groups).
#[derive(Clone, Copy)]
struct Strides {
    d: usize,
    qd: usize,
    q: usize,
    k: usize,
    v: usize,
    proj: usize,
    ffn: usize,
    gate: usize,
    up: usize,
}

impl Strides {
    fn of(m: &FastModel) -> Strides {
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
        }
    }
}

impl Workspace {
    /// Buffers for batches of up to `batch` tokens, all needing logits.
    pub fn new(model: &FastModel, batch: usize, threads: usize, precision: ActPrecision) -> Workspace {
        let s = Strides::of(model);
        let c = &model.config;
        let pad = |n: usize| n.next_multiple_of(QBLOCK);
        Workspace {
            batch,
            threads,
            x: vec![0.0; batch * s.d],
            h: vec![0.0; batch * s.d],
            hq: QuantActs::new(pad(s.d), batch, precision),
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
            logits: vec![0.0; batch * model.head.padded_rows()],
            scores: Vec::new(),
            cos: vec![0.0; batch * c.head_dim / 2],
            sin: vec![0.0; batch * c.head_dim / 2],
            vocab_stride: model.head.padded_rows(),
        }
    }

    /// Most tokens per forward call.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Logits of row `i` of the last forward call.
    pub fn logits(&self, i: usize, vocab: usize) -> &[f32] {
        &self.logits[i * self.vocab_stride..i * self.vocab_stride + vocab]
    }
}

/// Runs `tokens` at the positions after the cache's, appends their keys and values,
/// and leaves the wanted logits in `ws` (row 0 = last token for [`LogitsFor::Last`]).
/// Returns the number of logit rows.
pub fn forward(model: &FastModel, pool: &Pool, ws: &mut Workspace, cache: &mut KvCache, tokens: &[u32], want: LogitsFor) -> Result<usize> {
    let c = &model.config;
    let n = tokens.len();
    assert!(n > 0 && n <= ws.batch, "batch of {n} tokens for a workspace of {}", ws.batch);
    assert_eq!(ws.threads, pool.threads());
    if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= c.vocab_size) {
        return Err(Error::TokenOutOfRange { id: bad, vocab_size: c.vocab_size });
    }
    let start = cache.len();
    if start + n > c.max_context {
        return Err(Error::ContextOverflow { prompt: start + n, max_tokens: 0, context: c.max_context });
    }
    cache.reserve(start + n);
    let (score_stride, head_stride) = (cache.capacity(), cache.head_stride());
    if ws.scores.len() < ws.threads * score_stride {
        ws.scores = vec![0.0; ws.threads * score_stride];
    }
    let half = c.head_dim / 2;
    for t in 0..n {
        for (i, &f) in model.inv_freq.iter().enumerate() {
            // f32 product then sin_cos, as rope::apply, so rotations match the reference.
            let (sin, cos) = ((start + t) as f32 * f).sin_cos();
            ws.sin[t * half + i] = sin;
            ws.cos[t * half + i] = cos;
        }
    }
    let logit_rows = match want {
        LogitsFor::Last => n - 1..n,
        LogitsFor::All => 0..n,
    };
    let s = Strides::of(model);
    let (hq, attq, actq) = (ws.hq.view(), ws.attq.view(), ws.actq.view());
    let (kc, vc) = cache.keys_values_mut();
    let pass = Pass {
        m: model,
        tokens,
        start,
        logit_rows: logit_rows.clone(),
        s,
        kv_heads: c.num_kv_heads,
        head_stride,
        io: Io::new(&s, n, ws, hq, attq, actq),
        x: SharedSlice::new(&mut ws.x),
        h: SharedSlice::new(&mut ws.h),
        q: SharedSlice::new(&mut ws.q),
        k: SharedSlice::new(&mut ws.k),
        v: SharedSlice::new(&mut ws.v),
        att: SharedSlice::new(&mut ws.att),
        proj: SharedSlice::new(&mut ws.proj),
        gate: SharedSlice::new(&mut ws.gate),
        up: SharedSlice::new(&mut ws.up),
        act: SharedSlice::new(&mut ws.act),
        kc: SharedSlice::new(kc),
        vc: SharedSlice::new(vc),
        scores: SharedSlice::new(&mut ws.scores),
        score_stride,
        cos: &ws.cos,
        sin: &ws.sin,
        hq,
        attq,
        actq,
        error: Mutex::new(None),
    };
    pool.run(&|team| pass.run(team));
    if let Some(e) = pass.error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(e);
    }
    cache.advance(n);
    Ok(logit_rows.len())
}

/// Per-token pointer tables the kernels take (built once per call).
struct Io {
    hq: Vec<TokenActs>,
    h: Vec<*const f32>,
    attq: Vec<TokenActs>,
    att: Vec<*const f32>,
    actq: Vec<TokenActs>,
    act: Vec<*const f32>,
    q: Vec<*mut f32>,
    k: Vec<*mut f32>,
    v: Vec<*mut f32>,
    proj: Vec<*mut f32>,
    gate: Vec<*mut f32>,
    up: Vec<*mut f32>,
    logits: Vec<*mut f32>,
}

// SAFETY: the pointers address the workspace, which outlives the job; which member
// writes through which pointer (and when) follows the phase discipline of `Pass`.
unsafe impl Sync for Io {}

impl Io {
    fn new(s: &Strides, n: usize, ws: &mut Workspace, hq: QuantView, attq: QuantView, actq: QuantView) -> Io {
        fn rows<T>(buf: &mut [f32], stride: usize, n: usize, f: impl Fn(*mut f32) -> T) -> Vec<T> {
            (0..n).map(|t| f(buf[t * stride..].as_mut_ptr())).collect()
        }
        Io {
            hq: (0..n).map(|t| hq.token(t)).collect(),
            h: rows(&mut ws.h, s.d, n, |p| p.cast_const()),
            attq: (0..n).map(|t| attq.token(t)).collect(),
            att: rows(&mut ws.att, s.qd, n, |p| p.cast_const()),
            actq: (0..n).map(|t| actq.token(t)).collect(),
            act: rows(&mut ws.act, s.ffn, n, |p| p.cast_const()),
            q: rows(&mut ws.q, s.q, n, |p| p),
            k: rows(&mut ws.k, s.k, n, |p| p),
            v: rows(&mut ws.v, s.v, n, |p| p),
            proj: rows(&mut ws.proj, s.proj, n, |p| p),
            gate: rows(&mut ws.gate, s.gate, n, |p| p),
            up: rows(&mut ws.up, s.up, n, |p| p),
            logits: rows(&mut ws.logits, ws.vocab_stride, n, |p| p),
        }
    }
}

/// One forward call's shared state; `run` is what every member executes.
struct Pass<'a> {
    m: &'a FastModel,
    tokens: &'a [u32],
    start: usize,
    logit_rows: Range<usize>,
    s: Strides,
    kv_heads: usize,
    head_stride: usize,
    io: Io,
    x: SharedSlice<'a, f32>,
    h: SharedSlice<'a, f32>,
    q: SharedSlice<'a, f32>,
    k: SharedSlice<'a, f32>,
    v: SharedSlice<'a, f32>,
    att: SharedSlice<'a, f32>,
    proj: SharedSlice<'a, f32>,
    gate: SharedSlice<'a, f32>,
    up: SharedSlice<'a, f32>,
    act: SharedSlice<'a, f32>,
    kc: SharedSlice<'a, f32>,
    vc: SharedSlice<'a, f32>,
    scores: SharedSlice<'a, f32>,
    score_stride: usize,
    cos: &'a [f32],
    sin: &'a [f32],
    hq: QuantView,
    attq: QuantView,
    actq: QuantView,
    error: Mutex<Option<Error>>,
}

impl Pass<'_> {
    fn n(&self) -> usize {
        self.tokens.len()
    }

    fn fail(&self, e: Error) {
        let mut slot = self.error.lock().unwrap_or_else(|e| e.into_inner());
        slot.get_or_insert(e);
    }

    fn run(&self, team: &Team<'_>) {
        let d = self.s.d;
        for t in team.split(self.n()) {
            // SAFETY: token t's row of x is this member's alone in this phase.
            let row = unsafe { self.x.part_mut(t * d..(t + 1) * d) };
            if let Err(e) = self.m.embed_row(self.tokens[t], row) {
                self.fail(e);
            }
        }
        team.barrier();
        for (li, layer) in self.m.layers.iter().enumerate() {
            self.norm_rows(team, 0..self.n(), &layer.attn_norm, FastModel::any_quantized(&[&layer.q, &layer.k, &layer.v]));
            team.barrier();
            self.split_matmuls(team, &[(&layer.q, &self.io.q), (&layer.k, &self.io.k), (&layer.v, &self.io.v)], Input::Normed);
            team.barrier();
            self.rope_and_cache(team, li, layer);
            team.barrier();
            self.attention(team, li, FastModel::any_quantized(&[&layer.o]));
            team.barrier();
            self.project_add(team, &layer.o, Input::Attention);
            team.barrier();
            self.norm_rows(team, 0..self.n(), &layer.ffn_norm, FastModel::any_quantized(&[&layer.gate, &layer.up]));
            team.barrier();
            self.gate_up(team, layer);
            team.barrier();
            self.project_add(team, &layer.down, Input::Ffn);
            team.barrier();
        }
        let head_quant = FastModel::any_quantized(&[&self.m.head]);
        self.norm_rows(team, self.logit_rows.clone(), &self.m.final_norm, head_quant);
        team.barrier();
        let rows = self.logit_rows.len();
        let total = self.m.head.groups();
        let io = MatmulIo { quant: &self.io.hq[..rows], precision: self.hq.precision(), float: &self.io.h[..rows], out: &self.io.logits[..rows] };
        // SAFETY: this member's groups of every logit row are its alone; the inputs
        // were written before the barrier above.
        unsafe { matmul(self.m.isa, &self.m.head, team.split(total), io) };
    }

    /// RMSNorm of x's `rows` into slots 0.. of `h` (and `hq` when a quantized matmul reads it).
    fn norm_rows(&self, team: &Team<'_>, rows: Range<usize>, w: &[f32], quantize: bool) {
        let (d, c) = (self.s.d, &self.m.config);
        for j in team.split(rows.len()) {
            let t = rows.start + j;
            // SAFETY: x is read-only in this phase; slot j of h/hq is this member's alone.
            unsafe {
                let x = self.x.part(t * d..(t + 1) * d);
                let h = self.h.part_mut(j * d..(j + 1) * d);
                vecops::rms_norm(self.m.isa, x, w, c.rms_norm_eps, h);
                if quantize {
                    self.hq.quantize(self.m.isa, j, 0, h);
                }
            }
        }
    }

    /// The kernels' inputs for the given activation source.
    fn input(&self, which: Input) -> (&[TokenActs], &[*const f32]) {
        match which {
            Input::Normed => (&self.io.hq, &self.io.h),
            Input::Attention => (&self.io.attq, &self.io.att),
            Input::Ffn => (&self.io.actq, &self.io.act),
        }
    }

    /// Splits the row groups of several matrices (same input) over the team.
    fn split_matmuls(&self, team: &Team<'_>, jobs: &[(&PackedMatrix, &Vec<*mut f32>)], which: Input) {
        let (quant, float) = self.input(which);
        let precision = self.hq.precision();
        let total: usize = jobs.iter().map(|(m, _)| m.groups()).sum();
        let mine = team.split(total);
        let mut base = 0;
        for (m, out) in jobs {
            let g = m.groups();
            let lo = mine.start.clamp(base, base + g) - base;
            let hi = mine.end.clamp(base, base + g) - base;
            if lo < hi {
                // SAFETY: groups lo..hi of every token's output row are this member's
                // alone in this phase; inputs were written before the last barrier.
                unsafe { matmul(self.m.isa, m, lo..hi, MatmulIo { quant, precision, float, out }) };
            }
            base += g;
        }
    }

    /// Biases, RoPE on q and k, and k/v appended to the cache (split by token).
    fn rope_and_cache(&self, team: &Team<'_>, li: usize, layer: &FastLayer) {
        let c = &self.m.config;
        let (hd, half, s) = (c.head_dim, c.head_dim / 2, self.s);
        let kvd = c.num_kv_heads * hd;
        for t in team.split(self.n()) {
            let pos = self.start + t;
            let (cos, sin) = (&self.cos[t * half..(t + 1) * half], &self.sin[t * half..(t + 1) * half]);
            // SAFETY: token t's q/k/v rows and cache position `pos` of every head are
            // this member's alone in this phase.
            unsafe {
                let q = self.q.part_mut(t * s.q..t * s.q + s.qd);
                let k = self.k.part_mut(t * s.k..t * s.k + kvd);
                let v = self.v.part_mut(t * s.v..t * s.v + kvd);
                for (y, b) in [(&mut *q, &layer.q_bias), (&mut *k, &layer.k_bias), (&mut *v, &layer.v_bias)] {
                    if let Some(b) = b {
                        y.iter_mut().zip(b).for_each(|(y, b)| *y += b);
                    }
                }
                for head in q.chunks_exact_mut(hd).chain(k.chunks_exact_mut(hd)) {
                    rotate(head, cos, sin, c.rope_layout);
                }
                for g in 0..self.kv_heads {
                    let run = self.run_start(li, g);
                    self.vc.part_mut(run + pos * hd..run + (pos + 1) * hd).copy_from_slice(&v[g * hd..(g + 1) * hd]);
                    // Key tiles interleave positions, which other members may be writing
                    // (other tokens): element-wise writes through raw pointers, never a
                    // slice over the shared tile.
                    for (i, &x) in k[g * hd..(g + 1) * hd].iter().enumerate() {
                        *self.kc.ptr_at(run + key_offset(pos, i, hd)) = x;
                    }
                }
            }
        }
    }

    fn run_start(&self, layer: usize, kv_head: usize) -> usize {
        (layer * self.kv_heads + kv_head) * self.head_stride
    }

    /// Causal attention of every (head, token), dealt round-robin so long and short
    /// rows of the causal triangle mix; each head's output quantized by its owner.
    fn attention(&self, team: &Team<'_>, li: usize, quantize: bool) {
        let c = &self.m.config;
        let (hd, nh, s) = (c.head_dim, c.num_heads, self.s);
        let group = nh / c.num_kv_heads;
        let scale = 1.0 / (hd as f32).sqrt();
        let per_head_quant = quantize && hd % QBLOCK == 0;
        // SAFETY: each member has its own scores row.
        let scores = unsafe { self.scores.part_mut(team.id * self.score_stride..(team.id + 1) * self.score_stride) };
        for u in (team.id..nh * self.n()).step_by(team.threads) {
            let (t, h) = (u / nh, u % nh);
            let len = self.start + t + 1;
            let run = self.run_start(li, h / group);
            // SAFETY: q and the cache are read-only in this phase (written before the
            // barrier); head h of token t's output is this member's alone.
            unsafe {
                let q = self.q.part(t * s.q + h * hd..t * s.q + (h + 1) * hd);
                let keys = self.kc.part(run..run + len.next_multiple_of(KEY_TILE) * hd);
                let values = self.vc.part(run..run + len * hd);
                let out = self.att.part_mut(t * s.qd + h * hd..t * s.qd + (h + 1) * hd);
                vecops::attend(self.m.isa, q, keys, values, scale, scores, out);
                if per_head_quant {
                    self.attq.quantize(self.m.isa, t, h * hd, out);
                }
            }
        }
        if quantize && !per_head_quant {
            team.barrier();
            for t in team.split(self.n()) {
                // SAFETY: att is read-only now; token t's blocks are this member's alone.
                unsafe { self.attq.quantize(self.m.isa, t, 0, self.att.part(t * s.qd..(t + 1) * s.qd)) };
            }
        }
    }

    /// `x += w · input` for this member's row groups of `w` (o and down projections).
    fn project_add(&self, team: &Team<'_>, w: &PackedMatrix, which: Input) {
        let d = self.s.d;
        self.split_matmuls(team, &[(w, &self.io.proj)], which);
        // One matrix: this member's groups are its plain share.
        let mine = team.split(w.groups());
        let rows = (mine.start * GROUP_ROWS).min(d)..(mine.end * GROUP_ROWS).min(d);
        for t in 0..self.n() {
            // SAFETY: these rows of x and proj are this member's alone in this phase.
            unsafe {
                let x = self.x.part_mut(t * d + rows.start..t * d + rows.end);
                let p = self.proj.part(t * self.s.proj + rows.start..t * self.s.proj + rows.end);
                x.iter_mut().zip(p).for_each(|(x, p)| *x += p);
            }
        }
    }

    /// Gate and up for this member's units of two groups (one activation block), then SiLU·up and its quantization,
    /// so the down projection's input needs no extra phase.
    fn gate_up(&self, team: &Team<'_>, layer: &FastLayer) {
        let s = self.s;
        let (quant, float) = self.input(Input::Normed);
        let precision = self.hq.precision();
        let groups = layer.gate.groups();
        let units = groups.div_ceil(2);
        let mine = team.split(units);
        let g = (2 * mine.start).min(groups)..(2 * mine.end).min(groups);
        if g.is_empty() {
            return;
        }
        // SAFETY: groups g of every token's gate/up rows are this member's alone.
        unsafe {
            matmul(self.m.isa, &layer.gate, g.clone(), MatmulIo { quant, precision, float, out: &self.io.gate });
            matmul(self.m.isa, &layer.up, g.clone(), MatmulIo { quant, precision, float, out: &self.io.up });
        }
        let rows = (g.start * GROUP_ROWS).min(s.ffn)..(g.end * GROUP_ROWS).min(s.ffn);
        let quantize = FastModel::any_quantized(&[&layer.down]);
        for t in 0..self.n() {
            // SAFETY: these rows of gate/up/act (and their act blocks, 32-aligned) are
            // this member's alone in this phase.
            unsafe {
                let gate = self.gate.part(t * s.gate + rows.start..t * s.gate + rows.end);
                let up = self.up.part(t * s.up + rows.start..t * s.up + rows.end);
                let act = self.act.part_mut(t * s.ffn + rows.start..t * s.ffn + rows.end);
                vecops::silu_mul(self.m.isa, gate, up, act);
                if quantize {
                    self.actq.quantize(self.m.isa, t, rows.start, act);
                }
            }
        }
    }
}

/// Which activations a matmul reads.
#[derive(Clone, Copy)]
enum Input {
    /// The RMSNorm output.
    Normed,
    /// The attention output (o projection).
    Attention,
    /// SiLU(gate)·up (down projection).
    Ffn,
}

/// Rotates one head by the position's table (same arithmetic as `rope::apply`).
fn rotate(head: &mut [f32], cos: &[f32], sin: &[f32], layout: RopeLayout) {
    let half = head.len() / 2;
    match layout {
        RopeLayout::HalfSplit => {
            let (a, b) = head.split_at_mut(half);
            for i in 0..half {
                let (x0, x1) = (a[i], b[i]);
                a[i] = x0 * cos[i] - x1 * sin[i];
                b[i] = x1 * cos[i] + x0 * sin[i];
            }
        }
        RopeLayout::Interleaved => {
            for (i, pair) in head.chunks_exact_mut(2).enumerate() {
                let (x0, x1) = (pair[0], pair[1]);
                pair[0] = x0 * cos[i] - x1 * sin[i];
                pair[1] = x1 * cos[i] + x0 * sin[i];
            }
        }
    }
}
