//! A Laneformer for the fast CPU runtime: each lane's shard of every block packed as
//! its own matrices (query/KV heads and FFN columns by rows, o/down by columns, as
//! [`crate::dtp::ShardPlan`] splits them), so a lane's products read only its weights
//! and no lane boundary has to fall on a packed row group.

use std::ops::Range;
use std::sync::Arc;

use crate::config::{LaneHead, ModelConfig};
use crate::cpu::fast_model::pack_all;
use crate::cpu::isa::Isa;
use crate::cpu::packed::{Format, PackedMatrix};
use crate::cpu::rope;
use crate::dtp::{DtpSchedule, ShardPlan};
use crate::error::{Error, Result};
use crate::tensor::{Storage, Tensor};
use crate::weights::Weights;

/// One lane's shard of one layer (`[out, in]` each).
pub struct LaneBlock {
    pub q: PackedMatrix,
    pub k: PackedMatrix,
    pub v: PackedMatrix,
    /// `[hidden, lane's q heads × head_dim]`.
    pub o: PackedMatrix,
    pub gate: PackedMatrix,
    pub up: PackedMatrix,
    /// `[hidden, lane's FFN columns]`.
    pub down: PackedMatrix,
}

/// The whole model, ready for [`crate::cpu::lanes::forward`].
pub struct LaneModel {
    pub config: ModelConfig,
    pub isa: Isa,
    pub plan: ShardPlan,
    pub schedule: DtpSchedule,
    embed: Tensor,
    /// `[layer][lane]`.
    pub blocks: Vec<Vec<LaneBlock>>,
    /// `(attn_norm, ffn_norm)` per layer: `hidden` scales, or `lanes × hidden`.
    pub norms: Vec<(Vec<f32>, Vec<f32>)>,
    pub final_norm: Vec<f32>,
    /// `Replicate` / `Lane`: one matrix; `VocabParallel`: one per lane (its vocabulary rows).
    pub heads: Vec<PackedMatrix>,
    pub inv_freq: Vec<f32>,
}

impl LaneModel {
    /// Splits and repacks `weights` (float types only) using `threads` threads.
    pub fn new(config: &ModelConfig, weights: &Weights, isa: Isa, threads: usize) -> Result<LaneModel> {
        let c = config;
        if c.attention_bias {
            return Err(Error::InvalidRequest(format!("{}: the CPU lane runtime has no q/k/v biases (Laneformer has none)", c.name)));
        }
        let plan = ShardPlan::new(c, c.lanes.count)?;
        let schedule = DtpSchedule::of_laneformer(c)?;
        let hd = c.head_dim;
        let heads = |r: &Range<usize>| r.start * hd..r.end * hd;
        let mut shards: Vec<Tensor> = Vec::new();
        for l in &weights.layers {
            for s in &plan.lanes {
                shards.extend([
                    row_block(&l.q, heads(&s.q_heads))?,
                    row_block(&l.k, heads(&s.kv_heads))?,
                    row_block(&l.v, heads(&s.kv_heads))?,
                    col_block(&l.o, heads(&s.q_heads))?,
                    row_block(&l.gate, s.ffn.clone())?,
                    row_block(&l.up, s.ffn.clone())?,
                    col_block(&l.down, s.ffn.clone())?,
                ]);
            }
        }
        let head = weights.lm_head();
        match c.lanes.head {
            LaneHead::VocabParallel => {
                for s in &plan.lanes {
                    shards.push(row_block(head, s.vocab.clone())?);
                }
            }
            LaneHead::Replicate | LaneHead::Lane => shards.push(head.clone()),
        }
        let refs: Vec<&Tensor> = shards.iter().collect();
        let mut packed = pack_all(&refs, threads)?.into_iter();
        if let Some(m) = packed.as_slice().iter().find(|m| matches!(m.format, Format::Quant(_))) {
            return Err(Error::InvalidRequest(format!("{}: the CPU lane runtime reads float weights, not {:?}", m.name, m.source)));
        }
        let mut next = || packed.next().expect("one packed matrix per shard");
        let blocks = (0..c.num_layers)
            .map(|_| {
                (0..plan.degree)
                    .map(|_| LaneBlock { q: next(), k: next(), v: next(), o: next(), gate: next(), up: next(), down: next() })
                    .collect()
            })
            .collect();
        let heads = packed.collect();
        let norms = weights.layers.iter().map(|l| Ok((l.attn_norm.to_f32()?, l.ffn_norm.to_f32()?))).collect::<Result<Vec<_>>>()?;
        Ok(LaneModel {
            config: c.clone(),
            isa,
            plan,
            schedule,
            embed: weights.embed.clone(),
            blocks,
            norms,
            final_norm: weights.final_norm.to_f32()?,
            heads,
            inv_freq: rope::inv_freq(c),
        })
    }

    /// Number of lanes.
    pub fn lanes(&self) -> usize {
        self.plan.degree
    }

    /// Token `id`'s embedding into `out`.
    pub fn embed_row(&self, id: u32, out: &mut [f32]) -> Result<()> {
        if id as usize >= self.config.vocab_size {
            return Err(Error::TokenOutOfRange { id, vocab_size: self.config.vocab_size });
        }
        self.embed.row_to_f32(id as usize, out)
    }

    /// Bytes of packed weights.
    #[cfg(feature = "lab")]
    pub fn packed_bytes(&self) -> usize {
        let block = |b: &LaneBlock| [&b.q, &b.k, &b.v, &b.o, &b.gate, &b.up, &b.down].iter().map(|m| m.size_bytes()).sum::<usize>();
        self.blocks.iter().flatten().map(block).sum::<usize>() + self.heads.iter().map(|m| m.size_bytes()).sum::<usize>()
    }
}

/// Bytes per element of a float tensor (the only kind a lane shard is cut from).
fn elem_bytes(t: &Tensor) -> Result<usize> {
    if t.dtype.block_size() != 1 {
        return Err(Error::InvalidRequest(format!("{}: the CPU lane runtime reads float weights, not {:?}", t.name, t.dtype)));
    }
    Ok(t.dtype.block_bytes())
}

/// Rows `rows` of a `[_, cols]` matrix.
fn row_block(t: &Tensor, rows: Range<usize>) -> Result<Tensor> {
    let width = t.shape[1] * elem_bytes(t)?;
    let bytes = t.bytes()[rows.start * width..rows.end * width].to_vec();
    Ok(Tensor { name: t.name.clone(), dtype: t.dtype, shape: vec![rows.len(), t.shape[1]], storage: Storage::Owned(Arc::new(bytes)) })
}

/// Columns `cols` of every row of a `[rows, _]` matrix.
fn col_block(t: &Tensor, cols: Range<usize>) -> Result<Tensor> {
    let e = elem_bytes(t)?;
    let width = t.shape[1] * e;
    let bytes: Vec<u8> = t.bytes().chunks_exact(width).flat_map(|row| row[cols.start * e..cols.end * e].iter().copied()).collect();
    Ok(Tensor { name: t.name.clone(), dtype: t.dtype, shape: vec![t.shape[0], cols.len()], storage: Storage::Owned(Arc::new(bytes)) })
}
