//! The attention phase of the fast forward pass: every (token, head) of the batch
//! attends its own sequence's f16 cache (`attend`), the query heads of one KV head in
//! one pass; each head's output is quantized for the o projection by its owner.

use super::Pass;
use crate::cpu::act_quant::QBLOCK;
use crate::cpu::attend::attend_heads;
use crate::cpu::kv_cache::KEY_TILE;
use crate::cpu::pool::Team;

impl Pass<'_> {
    /// Causal attention of every (head, token), dealt by [`attention_units`]; each
    /// head's output quantized by its owner.
    pub(super) fn attention(&self, team: &Team<'_>, li: usize, quantize: bool) {
        let c = &self.m.config;
        let (hd, nh, s) = (c.head_dim, c.num_heads, self.s);
        let group = nh / c.num_kv_heads;
        let scale = 1.0 / (hd as f32).sqrt();
        let per_head_quant = quantize && hd.is_multiple_of(QBLOCK);
        // SAFETY: each member has its own scores rows.
        let scores = unsafe { self.scores.part_mut(team.id * self.score_stride..(team.id + 1) * self.score_stride) };
        let mut units = attention_units(team, self.n(), nh, group).peekable();
        while let Some(u) = units.next() {
            // A run of this member's heads of one token that share a KV head: one pass.
            let (t, h) = (u / nh, u % nh);
            let mut heads = 1;
            while units.next_if(|&v| v == u + heads && v / nh == t && (v % nh) / group == h / group).is_some() {
                heads += 1;
            }
            let (pos, seq) = (self.rows.pos[t], self.rows.seq[t]);
            let len = pos + 1;
            let first = c.sliding_window.first_key(li, pos);
            let run = self.run_start(seq, li, h / group);
            let cache = &self.caches[seq];
            let (lo, hi) = (t * s.q + h * hd, t * s.q + (h + heads) * hd);
            // SAFETY: q and the cache are read-only in this phase (written before the
            // barrier); these heads of token t's output are this member's alone.
            unsafe {
                let q = self.q.part(lo..hi);
                let keys = cache.k.part(run..run + len.next_multiple_of(KEY_TILE) * hd);
                let values = cache.v.part(run..run + len * hd);
                let out = self.att.part_mut(t * s.qd + h * hd..t * s.qd + (h + heads) * hd);
                attend_heads(self.m.isa, hd, q, keys, values, first, scale, scores, out);
                if per_head_quant {
                    self.att_in.quant.quantize(self.m.isa, t, h * hd, out);
                }
            }
        }
        if quantize && !per_head_quant {
            team.barrier();
            for t in team.split(self.n()) {
                // SAFETY: att is read-only now; token t's blocks are this member's alone.
                unsafe { self.att_in.quant.quantize(self.m.isa, t, 0, self.att.part(t * s.qd..(t + 1) * s.qd)) };
            }
        }
    }
}

/// The (token, head) units `t·heads + h` a member attends. The query heads that share
/// a KV head go to one member together, so that head's cached keys and values come
/// from memory once per token and then from its own cache; blocks of them are dealt
/// round-robin so long and short rows of the causal triangle mix. With fewer blocks
/// than two per member (one decoding token) that would leave members idle, so the
/// units are split evenly in order instead.
fn attention_units(team: &Team<'_>, tokens: usize, heads: usize, group: usize) -> impl Iterator<Item = usize> {
    let blocks = tokens * heads / group;
    let in_order = blocks < 2 * team.threads;
    // One of the two is empty: the split in order, or the blocks dealt round-robin.
    let split = if in_order { team.split(tokens * heads) } else { 0..0 };
    let dealt = (if in_order { blocks } else { team.id }..blocks).step_by(team.threads);
    split.chain(dealt.flat_map(move |b| b * group..(b + 1) * group))
}
