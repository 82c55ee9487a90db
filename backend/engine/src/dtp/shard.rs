//! How standard tensor parallelism (and DTP, whose lanes shard the same way) splits a
//! model over `degree` GPUs: q/k/v rows and gate/up rows by heads and FFN columns,
//! o-proj and down-proj by the matching input columns, the LM head by vocabulary
//! rows; KV heads replicated when the degree exceeds them. The CUDA kernel and the
//! CPU reference take their ranges from here.

use std::ops::Range;

use crate::config::ModelConfig;
use crate::error::{Error, Result};

/// What one lane (GPU) holds, as ranges of heads, FFN columns and vocabulary rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneShard {
    pub lane: usize,
    /// Query heads: rows `[start·head_dim, end·head_dim)` of q_proj, columns of o_proj.
    pub q_heads: Range<usize>,
    /// KV heads this lane's query heads read (one head shared by several lanes when
    /// the degree exceeds the KV head count).
    pub kv_heads: Range<usize>,
    /// FFN columns: rows of gate/up, columns of down_proj.
    pub ffn: Range<usize>,
    /// Vocabulary rows of the LM head (balanced; the vocabulary need not divide).
    pub vocab: Range<usize>,
}

/// The split of a model over `degree` lanes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardPlan {
    pub degree: usize,
    pub lanes: Vec<LaneShard>,
}

impl ShardPlan {
    /// The split of `config` over `degree` lanes; a shape that does not divide is an
    /// error naming the field.
    pub fn new(config: &ModelConfig, degree: usize) -> Result<ShardPlan> {
        let c = config;
        let fail = |what: String| Err(Error::InvalidRequest(format!("tensor parallelism over {degree} GPUs: {} {what}", c.name)));
        if degree == 0 {
            return fail("needs at least one GPU".into());
        }
        if !c.num_heads.is_multiple_of(degree) {
            return fail(format!("has {} query heads, not a multiple of {degree}", c.num_heads));
        }
        if !c.intermediate_size.is_multiple_of(degree) {
            return fail(format!("has an FFN of {} columns, not a multiple of {degree}", c.intermediate_size));
        }
        if c.vocab_size < degree {
            return fail(format!("has a vocabulary of {}, fewer rows than GPUs", c.vocab_size));
        }
        let kv = c.num_kv_heads;
        if degree <= kv && !kv.is_multiple_of(degree) {
            return fail(format!("has {kv} KV heads, not a multiple of {degree}"));
        }
        // Each lane's query heads must all read one KV head: degree a multiple of the KV heads.
        if degree > kv && !degree.is_multiple_of(kv) {
            return fail(format!("has {kv} KV heads; {degree} GPUs must be a multiple of them to replicate each"));
        }
        let (q_per, f_per) = (c.num_heads / degree, c.intermediate_size / degree);
        let group = c.num_heads / kv;
        let lanes = (0..degree)
            .map(|i| {
                let q_heads = i * q_per..(i + 1) * q_per;
                let kv_heads = if degree <= kv {
                    let per = kv / degree;
                    i * per..(i + 1) * per
                } else {
                    let head = q_heads.start / group;
                    head..head + 1
                };
                LaneShard {
                    lane: i,
                    q_heads,
                    kv_heads,
                    ffn: i * f_per..(i + 1) * f_per,
                    vocab: i * c.vocab_size / degree..(i + 1) * c.vocab_size / degree,
                }
            })
            .collect();
        Ok(ShardPlan { degree, lanes })
    }

    /// How many lanes hold each KV head (1 unless the degree exceeds the KV heads).
    #[cfg(feature = "lab")]
    pub fn kv_replication(&self, config: &ModelConfig) -> usize {
        (self.degree / config.num_kv_heads).max(1)
    }
}

/// Rows `rows` of a row-major `[_, cols]` matrix.
pub fn slice_rows(w: &[f32], cols: usize, rows: Range<usize>) -> Vec<f32> {
    w[rows.start * cols..rows.end * cols].to_vec()
}

/// Columns `keep` of every row of a row-major `[_, cols]` matrix.
pub fn slice_cols(w: &[f32], cols: usize, keep: Range<usize>) -> Vec<f32> {
    w.chunks_exact(cols).flat_map(|row| row[keep.clone()].iter().copied()).collect()
}

/// Lane `lane`'s row of a norm's scales: `all` is one shared row of `d` (every lane
/// reads it) or one row per lane (Laneformer's `replicated_rmsn_scale = false`).
pub fn lane_row(all: &[f32], d: usize, lane: usize) -> &[f32] {
    if all.len() == d {
        all
    } else {
        &all[lane * d..(lane + 1) * d]
    }
}
