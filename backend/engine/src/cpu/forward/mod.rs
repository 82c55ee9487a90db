//! The fast forward pass over a batch of tokens (a prompt chunk, or one token when
//! decoding): one job on the thread team, phases separated by barriers, each phase
//! split so members write disjoint parts (row groups, heads, tokens). Same math as
//! `reference.rs` (transformers' LlamaForCausalLM); the integer kernels see
//! quantized activations (`act_quant`).
//!
//! Per layer, decoding meets at five barriers: after q/k/v (+ RoPE and the cache
//! write, done by the member that owns each head), after attention, after the o
//! projection, after gate/up (+ SiLU), after down. RMSNorm needs no barrier of its
//! own: small batches are normalised by every member into its own buffer.

mod attention;

use std::ops::Range;
use std::sync::Mutex;

use crate::cpu::act_quant::{QuantView, TokenActs, QBLOCK};
use crate::cpu::fast_model::{FastLayer, FastModel};
use crate::cpu::kernels::{matmul, MatmulIo};
use crate::cpu::attend::HEADS_PER_PASS;
use crate::cpu::kv_cache::{prefetch_key_write, prefetch_value_write, store_key, store_value, KvCache};
use crate::cpu::packed::{PackedMatrix, GROUP_ROWS};
use crate::cpu::pool::{Pool, Team};
use crate::cpu::rope::{rope_tables_at, rotate};
use crate::cpu::shared::SharedSlice;
use crate::cpu::vecops;
use crate::cpu::workspace::{NormBuffer, Strides, Workspace, OWN_NORM_ROWS};
use crate::error::{Error, Result};

/// Which positions of a batch need logits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogitsFor {
    /// Each sequence's last [`SeqChunk::logit_rows`] tokens (generation: the last
    /// token, or the token and its draft when verifying).
    Last,
    /// Every position (prompt scoring).
    All,
}

/// One sequence's share of a forward call: its cache and the tokens that follow what
/// the cache holds (a prompt chunk, or the one token it decodes).
pub struct SeqChunk<'a> {
    pub cache: &'a mut KvCache,
    pub tokens: &'a [u32],
    /// Trailing tokens that want logits under [`LogitsFor::Last`] (1 and up).
    pub logit_rows: usize,
}

/// Runs `tokens` at the positions after the cache's, appends their keys and values,
/// and leaves the wanted logits in `ws` (row 0 = last token for [`LogitsFor::Last`]).
/// Returns the number of logit rows.
pub fn forward(model: &FastModel, pool: &Pool, ws: &mut Workspace, cache: &mut KvCache, tokens: &[u32], want: LogitsFor) -> Result<usize> {
    forward_seqs(model, pool, ws, &mut [SeqChunk { cache, tokens, logit_rows: 1 }], want)
}

/// [`forward`] of several sequences in one pass over the weights: their tokens are the
/// rows of one batch (sequence by sequence), so every weight tile feeds all of them;
/// each row attends within its own sequence's cache. Logit rows: for
/// [`LogitsFor::Last`] each sequence's last `logit_rows` tokens, in order; for
/// [`LogitsFor::All`] every row. A row's values do not depend on the other rows (the
/// kernels compute each token alone), so a sequence decodes the same tokens batched
/// as alone. On an error no cache advances.
pub fn forward_seqs(model: &FastModel, pool: &Pool, ws: &mut Workspace, seqs: &mut [SeqChunk<'_>], want: LogitsFor) -> Result<usize> {
    let c = &model.config;
    let n: usize = seqs.iter().map(|q| q.tokens.len()).sum();
    assert!(n > 0 && n <= ws.batch, "batch of {n} tokens for a workspace of {}", ws.batch);
    assert_eq!(ws.threads, pool.threads());
    let mut rows = Rows::default();
    for (i, sq) in seqs.iter_mut().enumerate() {
        let start = begin_seq(c, sq.tokens, sq.cache)?;
        let first = rows.tokens.len();
        rows.tokens.extend_from_slice(sq.tokens);
        rows.pos.extend(start..start + sq.tokens.len());
        rows.seq.extend(std::iter::repeat_n(i, sq.tokens.len()));
        match want {
            LogitsFor::Last => rows.logits.extend(rows.tokens.len() - sq.logit_rows.clamp(1, sq.tokens.len())..rows.tokens.len()),
            LogitsFor::All => rows.logits.extend(first..rows.tokens.len()),
        }
    }
    // Each member's scores: a row per head of an attention pass.
    let score_stride = HEADS_PER_PASS * seqs.iter().map(|q| q.cache.capacity()).max().unwrap_or(0);
    if ws.scores.len() < ws.threads * score_stride {
        ws.scores = vec![0.0; ws.threads * score_stride];
    }
    rope_tables_at(&model.inv_freq, &rows.pos, &mut ws.sin, &mut ws.cos);
    let s = ws.strides;
    let caches: Vec<CacheView<'_>> = seqs
        .iter_mut()
        .map(|q| {
            let head_stride = q.cache.head_stride();
            let (kc, vc) = q.cache.keys_values_mut();
            CacheView { k: SharedSlice::new(kc), v: SharedSlice::new(vc), head_stride }
        })
        .collect();
    // Every pointer the job uses derives from these shares (one borrow per buffer).
    let (att, act) = (SharedSlice::new(&mut ws.att), SharedSlice::new(&mut ws.act));
    let (q, k, v) = (SharedSlice::new(&mut ws.q), SharedSlice::new(&mut ws.k), SharedSlice::new(&mut ws.v));
    let (proj, gate, up) = (SharedSlice::new(&mut ws.proj), SharedSlice::new(&mut ws.gate), SharedSlice::new(&mut ws.up));
    let logits = SharedSlice::new(&mut ws.logits);
    let (attq, actq) = (ws.attq.view(), ws.actq.view());
    let outputs = |buf: SharedSlice<'_, f32>, stride: usize| (0..n).map(|t| buf.ptr_at(t * stride)).collect::<Vec<_>>();
    let logit_count = rows.logits.len();
    let pass = Pass {
        m: model,
        all_rows: (0..n).collect(),
        rows,
        s,
        kv_heads: c.num_kv_heads,
        caches,
        normed: Normed::new_norm(&mut ws.normed, s.d, n),
        own: ws.own.iter_mut().map(|b| Normed::new_norm(b, s.d, n.min(OWN_NORM_ROWS))).collect(),
        att_in: Inputs::new(att, attq, s.qd, n),
        act_in: Inputs::new(act, actq, s.ffn, n),
        out_q: outputs(q, s.q),
        out_k: outputs(k, s.k),
        out_v: outputs(v, s.v),
        out_proj: outputs(proj, s.proj),
        out_gate: outputs(gate, s.gate),
        out_up: outputs(up, s.up),
        out_logits: outputs(logits, s.vocab),
        x: SharedSlice::new(&mut ws.x),
        q,
        k,
        v,
        att,
        proj,
        gate,
        up,
        act,
        scores: SharedSlice::new(&mut ws.scores),
        score_stride,
        cos: &ws.cos,
        sin: &ws.sin,
        error: Mutex::new(None),
    };
    pool.run(&|team| pass.run(team));
    take_error(pass.error)?;
    for sq in seqs.iter_mut() {
        sq.cache.advance(sq.tokens.len());
    }
    Ok(logit_count)
}

/// The rows of one forward call: each row's token, position and sequence, and which
/// rows need logits.
#[derive(Default)]
struct Rows {
    tokens: Vec<u32>,
    pos: Vec<usize>,
    seq: Vec<usize>,
    logits: Vec<usize>,
}

/// One sequence's cache as the members of a pass share it.
struct CacheView<'a> {
    /// f16 bits.
    k: SharedSlice<'a, u16>,
    v: SharedSlice<'a, u16>,
    /// Elements between two (layer, KV head) runs.
    head_stride: usize,
}

/// Keeps the first error a member of a pass met (`slot`: the pass's).
pub(crate) fn record_error(slot: &Mutex<Option<Error>>, e: Error) {
    slot.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(e);
}

/// The error a member of a pass met, if any.
fn take_error(error: Mutex<Option<Error>>) -> Result<()> {
    match error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// After a pass over `n` tokens: its error if a member met one, else the cache holds them.
pub(crate) fn end_pass(error: Mutex<Option<Error>>, cache: &mut KvCache, n: usize) -> Result<()> {
    take_error(error)?;
    cache.advance(n);
    Ok(())
}

/// What [`begin`] fixed for one forward call.
pub(crate) struct Begun {
    /// Position of the batch's first token.
    pub start: usize,
    /// Floats of one member's attention scores row (the cache's capacity).
    pub score_stride: usize,
    /// Floats between two (layer, KV head) runs of the cache.
    pub head_stride: usize,
    /// Positions of the batch that need logits.
    pub logit_rows: Range<usize>,
}

/// The checks and set-up every fast forward pass starts with: tokens in the vocabulary,
/// room in the context, the cache grown for the batch, one scores row per member.
pub(crate) fn begin(
    c: &crate::config::ModelConfig,
    tokens: &[u32],
    want: LogitsFor,
    cache: &mut KvCache,
    scores: &mut Vec<f32>,
    threads: usize,
) -> Result<Begun> {
    let n = tokens.len();
    let start = begin_seq(c, tokens, cache)?;
    let (score_stride, head_stride) = (cache.capacity(), cache.head_stride());
    if scores.len() < threads * score_stride {
        *scores = vec![0.0; threads * score_stride];
    }
    let logit_rows = match want {
        LogitsFor::Last => n - 1..n,
        LogitsFor::All => 0..n,
    };
    Ok(Begun { start, score_stride, head_stride, logit_rows })
}

/// One sequence's checks before a pass: its tokens in the vocabulary, room in the
/// context; grows its cache for them and returns the position of the first.
fn begin_seq(c: &crate::config::ModelConfig, tokens: &[u32], cache: &mut KvCache) -> Result<usize> {
    let n = tokens.len();
    if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= c.vocab_size) {
        return Err(Error::TokenOutOfRange { id: bad, vocab_size: c.vocab_size });
    }
    let start = cache.len();
    if start + n > c.max_context {
        return Err(Error::ContextOverflow { prompt: start + n, max_tokens: 0, context: c.max_context });
    }
    cache.reserve(start + n);
    Ok(start)
}

/// A matmul input: the activations in both forms and the kernels' per-token tables.
struct Inputs<'a> {
    f32s: SharedSlice<'a, f32>,
    quant: QuantView,
    /// Per token: quantized view and f32 row.
    quant_rows: Vec<TokenActs>,
    f32_rows: Vec<*const f32>,
}

impl<'a> Inputs<'a> {
    fn new(f32s: SharedSlice<'a, f32>, quant: QuantView, stride: usize, n: usize) -> Inputs<'a> {
        Inputs {
            f32s,
            quant,
            quant_rows: (0..n).map(|t| quant.token(t)).collect(),
            f32_rows: (0..n).map(|t| f32s.ptr_at(t * stride).cast_const()).collect(),
        }
    }

    /// The kernels' view of rows `0..rows`.
    fn io<'b>(&'b self, rows: usize, out: &'b [*mut f32]) -> MatmulIo<'b> {
        MatmulIo { quant: &self.quant_rows[..rows], precision: self.quant.precision(), float: &self.f32_rows[..rows], out: &out[..rows] }
    }
}

/// A normalised-activation buffer and its tables.
type Normed<'a> = Inputs<'a>;

impl<'a> Normed<'a> {
    fn new_norm(buf: &'a mut NormBuffer, d: usize, rows: usize) -> Normed<'a> {
        let q = buf.hq.view();
        Inputs::new(SharedSlice::new(&mut buf.h), q, d, rows)
    }
}

/// One forward call's shared state; `run` is what every member executes.
struct Pass<'a> {
    m: &'a FastModel,
    rows: Rows,
    /// `0..n`, the rows every layer normalises.
    all_rows: Vec<usize>,
    s: Strides,
    kv_heads: usize,
    /// One per sequence of the call.
    caches: Vec<CacheView<'a>>,
    normed: Normed<'a>,
    own: Vec<Normed<'a>>,
    att_in: Inputs<'a>,
    act_in: Inputs<'a>,
    out_q: Vec<*mut f32>,
    out_k: Vec<*mut f32>,
    out_v: Vec<*mut f32>,
    out_proj: Vec<*mut f32>,
    out_gate: Vec<*mut f32>,
    out_up: Vec<*mut f32>,
    out_logits: Vec<*mut f32>,
    x: SharedSlice<'a, f32>,
    q: SharedSlice<'a, f32>,
    k: SharedSlice<'a, f32>,
    v: SharedSlice<'a, f32>,
    att: SharedSlice<'a, f32>,
    proj: SharedSlice<'a, f32>,
    gate: SharedSlice<'a, f32>,
    up: SharedSlice<'a, f32>,
    act: SharedSlice<'a, f32>,
    scores: SharedSlice<'a, f32>,
    score_stride: usize,
    cos: &'a [f32],
    sin: &'a [f32],
    error: Mutex<Option<Error>>,
}

// SAFETY: the output tables point into workspace buffers that outlive the job;
// members write disjoint row groups of them between barriers (see each phase).
unsafe impl Sync for Pass<'_> {}

impl Pass<'_> {
    fn n(&self) -> usize {
        self.rows.tokens.len()
    }

    fn fail(&self, e: Error) {
        record_error(&self.error, e);
    }

    fn run(&self, team: &Team<'_>) {
        let d = self.s.d;
        for t in team.split(self.n()) {
            // SAFETY: token t's row of x is this member's alone in this phase.
            let row = unsafe { self.x.part_mut(t * d..(t + 1) * d) };
            if let Err(e) = self.m.embed_row(self.rows.tokens[t], row) {
                self.fail(e);
            }
        }
        team.barrier();
        for (li, layer) in self.m.layers.iter().enumerate() {
            let normed = self.norm(team, &self.all_rows, &layer.attn_norm, FastModel::any_quantized(&[&layer.q, &layer.k, &layer.v]));
            self.qkv(team, li, layer, normed);
            team.barrier();
            self.attention(team, li, FastModel::any_quantized(&[&layer.o]));
            team.barrier();
            self.project_add(team, &layer.o, &self.att_in);
            team.barrier();
            let normed = self.norm(team, &self.all_rows, &layer.ffn_norm, FastModel::any_quantized(&[&layer.gate, &layer.up]));
            self.gate_up(team, layer, normed);
            team.barrier();
            self.project_add(team, &layer.down, &self.act_in);
            team.barrier();
        }
        let normed = self.norm(team, &self.rows.logits, &self.m.final_norm, FastModel::any_quantized(&[&self.m.head]));
        let io = normed.io(self.rows.logits.len(), &self.out_logits);
        // SAFETY: this member's groups of every logit row are its alone; the inputs
        // are its own or were written before the barrier in `norm`.
        unsafe { matmul(self.m.isa, &self.m.head, team.split(self.m.head.groups()), io) };
    }

    /// RMSNorm of x's `rows` into slots 0.. of a normalised buffer (quantized too when
    /// a quantized matmul reads it), which it returns: the member's own for small
    /// batches (no barrier), else the shared one, split by row, after a barrier.
    fn norm(&self, team: &Team<'_>, rows: &[usize], w: &[f32], quantize: bool) -> &Normed<'_> {
        let (d, c) = (self.s.d, &self.m.config);
        let own = rows.len() <= OWN_NORM_ROWS;
        let (buf, mine) = if own { (&self.own[team.id], 0..rows.len()) } else { (&self.normed, team.split(rows.len())) };
        for j in mine {
            let t = rows[j];
            // SAFETY: x is read-only in this phase; slot j is this member's alone (its
            // own buffer, or its share of the shared one).
            unsafe {
                let x = self.x.part(t * d..(t + 1) * d);
                let h = buf.f32s.part_mut(j * d..(j + 1) * d);
                vecops::rms_norm(self.m.isa, x, w, c.rms_norm_eps, h);
                if quantize {
                    buf.quant.quantize(self.m.isa, j, 0, h);
                }
            }
        }
        if !own {
            team.barrier();
        }
        buf
    }

    /// q, k and v for this member's heads, then biases, RoPE and the cache write of
    /// the same heads, so no barrier separates the matmul from them.
    fn qkv(&self, team: &Team<'_>, li: usize, layer: &FastLayer, input: &Normed<'_>) {
        let c = &self.m.config;
        let hd = c.head_dim;
        let (nh, nkv) = (c.num_heads, c.num_kv_heads);
        if !hd.is_multiple_of(GROUP_ROWS) {
            // Heads do not align with row groups: matmul, barrier, then finish by token.
            self.split_matmuls(team, &[(&layer.q, &self.out_q), (&layer.k, &self.out_k), (&layer.v, &self.out_v)], input);
            team.barrier();
            for t in team.split(self.n()) {
                self.finish_heads(li, layer, t, 0..nh, 0..nkv, 0..nkv);
            }
            return;
        }
        let per_head = hd / GROUP_ROWS;
        // Each kind is split on its own, so every member writes its share of the keys
        // (a key's cache write costs more than its matmul); the splits start at
        // different members, so their remainders land on different members.
        let (kh, vh, qh) = (team.split_turned(nkv, 0), team.split_turned(nkv, 1), team.split_turned(nh, 1));
        self.prefetch_cache_writes(li, &kh, &vh);
        for (w, heads, out) in [(&layer.q, &qh, &self.out_q), (&layer.k, &kh, &self.out_k), (&layer.v, &vh, &self.out_v)] {
            if !heads.is_empty() {
                // SAFETY: these heads' row groups of every token are this member's alone.
                unsafe { matmul(self.m.isa, w, heads.start * per_head..heads.end * per_head, input.io(self.n(), out)) };
            }
        }
        for t in 0..self.n() {
            self.finish_heads(li, layer, t, qh.clone(), kh.clone(), vh.clone());
        }
    }

    /// Asks for the cache lines that this step's keys and values of the given KV heads
    /// go to, so the matmul before their writes hides the misses. A key is spread over
    /// `head_dim` lines (one per element of its position's tile), each long evicted by
    /// the weights streamed since the last step wrote that tile.
    /// Only for a few tokens (decode steps): a prompt chunk's lines would not fit L1.
    fn prefetch_cache_writes(&self, li: usize, kh: &Range<usize>, vh: &Range<usize>) {
        let hd = self.m.config.head_dim;
        if self.n() > PREFETCH_WRITE_TOKENS {
            return;
        }
        for t in 0..self.n() {
            let (pos, seq) = (self.rows.pos[t], self.rows.seq[t]);
            let cache = &self.caches[seq];
            for g in kh.clone() {
                prefetch_key_write(cache.k.ptr_at(self.run_start(seq, li, g)), pos, hd);
            }
            for g in vh.clone() {
                prefetch_value_write(cache.v.ptr_at(self.run_start(seq, li, g)), pos, hd);
            }
        }
    }

    /// Biases and RoPE of the given q/k heads of token t, and its k/v of the given kv
    /// heads appended to the cache. The caller owns these heads in this phase.
    fn finish_heads(&self, li: usize, layer: &FastLayer, t: usize, qh: Range<usize>, kh: Range<usize>, vh: Range<usize>) {
        let c = &self.m.config;
        let (hd, half, s) = (c.head_dim, c.head_dim / 2, self.s);
        let (pos, seq) = (self.rows.pos[t], self.rows.seq[t]);
        let (cos, sin) = (&self.cos[t * half..(t + 1) * half], &self.sin[t * half..(t + 1) * half]);
        let bias = |b: &Option<Vec<f32>>, y: &mut [f32], head: usize| {
            if let Some(b) = b {
                y.iter_mut().zip(&b[head * hd..(head + 1) * hd]).for_each(|(y, b)| *y += b);
            }
        };
        // SAFETY: the caller owns these heads of token t (and their cache entries at
        // `pos`) in this phase.
        unsafe {
            for h in qh {
                let q = self.q.part_mut(t * s.q + h * hd..t * s.q + (h + 1) * hd);
                bias(&layer.q_bias, q, h);
                rotate(q, cos, sin, c.rope_layout);
            }
            for g in kh {
                let k = self.k.part_mut(t * s.k + g * hd..t * s.k + (g + 1) * hd);
                bias(&layer.k_bias, k, g);
                rotate(k, cos, sin, c.rope_layout);
                store_key(self.caches[seq].k, self.run_start(seq, li, g), pos, k);
            }
            for g in vh {
                let v = self.v.part_mut(t * s.v + g * hd..t * s.v + (g + 1) * hd);
                bias(&layer.v_bias, v, g);
                store_value(self.caches[seq].v, self.run_start(seq, li, g), pos, v);
            }
        }
    }

    /// Splits the row groups of several matrices (same input) over the team.
    fn split_matmuls(&self, team: &Team<'_>, jobs: &[(&PackedMatrix, &Vec<*mut f32>)], input: &Inputs<'_>) {
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
                unsafe { matmul(self.m.isa, m, lo..hi, input.io(self.n(), out)) };
            }
            base += g;
        }
    }

    /// Where `(layer, kv_head)`'s run starts in sequence `seq`'s cache.
    fn run_start(&self, seq: usize, layer: usize, kv_head: usize) -> usize {
        (layer * self.kv_heads + kv_head) * self.caches[seq].head_stride
    }

    /// `x += w · input` for this member's row groups of `w` (o and down projections).
    fn project_add(&self, team: &Team<'_>, w: &PackedMatrix, input: &Inputs<'_>) {
        let d = self.s.d;
        let mine = team.split(w.groups());
        if !mine.is_empty() {
            // SAFETY: these row groups of every token's projection are this member's alone.
            unsafe { matmul(self.m.isa, w, mine.clone(), input.io(self.n(), &self.out_proj)) };
        }
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

    /// Gate and up for this member's units of two row groups (one activation block),
    /// then SiLU·up and its quantization, so the down projection needs no extra phase.
    fn gate_up(&self, team: &Team<'_>, layer: &FastLayer, input: &Normed<'_>) {
        let s = self.s;
        let groups = layer.gate.groups();
        let per_unit = QBLOCK / GROUP_ROWS;
        let mine = team.split(groups.div_ceil(per_unit));
        let g = (per_unit * mine.start).min(groups)..(per_unit * mine.end).min(groups);
        if g.is_empty() {
            return;
        }
        // SAFETY: groups g of every token's gate/up rows are this member's alone.
        unsafe {
            matmul(self.m.isa, &layer.gate, g.clone(), input.io(self.n(), &self.out_gate));
            matmul(self.m.isa, &layer.up, g.clone(), input.io(self.n(), &self.out_up));
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
                    self.act_in.quant.quantize(self.m.isa, t, rows.start, act);
                }
            }
        }
    }
}

/// Most tokens whose cache lines `prefetch_cache_writes` asks for.
const PREFETCH_WRITE_TOKENS: usize = 8;
