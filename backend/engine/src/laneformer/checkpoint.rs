//! A Laneformer's lane-stacked tensors as ordinary `[out, in]` matrices: a row-sharded
//! weight `[L, out/L, in]` already is `[out, in]` (lane blocks of rows, one after
//! another) and only changes shape; a column-sharded one `[L, out, in/L]` is copied so
//! that lane `l`'s block becomes columns `[l·in/L, (l+1)·in/L)` of every row.

use std::sync::Arc;

use crate::config::{LaneHead, ModelConfig};
use crate::error::{Error, Result};
use crate::hf::SafetensorsDir;
use crate::tensor::{Storage, Tensor};
use crate::weights::{LayerRole, WeightRole, Weights};

/// How a checkpoint tensor maps onto the role's ordinary matrix.
enum Stacking {
    /// Stored as the ordinary shape.
    Plain,
    /// `[L, rows/L, cols]`: lane blocks of rows.
    Rows,
    /// `[L, rows, cols/L]`: lane blocks of columns.
    Cols,
}

/// The checkpoint name and stacking of `role` (names under `model.` as published).
fn source(config: &ModelConfig, role: WeightRole) -> (String, Stacking) {
    let lanes = &config.lanes;
    let norm = |prefix: &str, per_lane: bool| (format!("{prefix}.{}", if per_lane { "scale" } else { "weight" }), Stacking::Plain);
    match role {
        WeightRole::Embed => ("model.tok_embeddings.weight".into(), Stacking::Plain),
        WeightRole::FinalNorm => norm("model.norm", lanes.final_norm_per_lane()),
        WeightRole::LmHead => match lanes.head {
            LaneHead::Replicate => ("lm_head.weight".into(), Stacking::Plain),
            LaneHead::Lane => ("lm_head.linear.weight".into(), Stacking::Plain),
            LaneHead::VocabParallel => ("lm_head.weight".into(), Stacking::Rows),
        },
        WeightRole::Layer(i, r) => {
            let at = |s: &str| format!("model.layers.{i}.{s}");
            match r {
                LayerRole::AttnNorm => norm(&at("attention_norm"), lanes.lane_norms),
                LayerRole::FfnNorm => norm(&at("ffn_norm"), lanes.lane_norms),
                LayerRole::Q => (at("attention.wq.weight"), Stacking::Rows),
                LayerRole::K => (at("attention.wk.weight"), Stacking::Rows),
                LayerRole::V => (at("attention.wv.weight"), Stacking::Rows),
                LayerRole::O => (at("attention.wo.weight"), Stacking::Cols),
                LayerRole::Gate => (at("feed_forward.w1.weight"), Stacking::Rows),
                LayerRole::Up => (at("feed_forward.w3.weight"), Stacking::Rows),
                LayerRole::Down => (at("feed_forward.w2.weight"), Stacking::Cols),
                // Laneformer has no biases; `attention_bias` is false, so these are never asked for.
                LayerRole::QBias | LayerRole::KBias | LayerRole::VBias => (at("(no bias)"), Stacking::Plain),
            }
        }
    }
}

/// Every weight of `config` from `tensors`, in the ordinary layout.
pub fn assemble(config: &ModelConfig, tensors: &SafetensorsDir, path: &str) -> Result<Weights> {
    let lanes = config.lanes.count;
    Weights::assemble(
        config,
        path,
        |role| {
            let (name, stacking) = source(config, role);
            let t = tensors.tensor(&name)?;
            let want = role.expected_shape(config);
            let (rows, cols) = (want[0], want.get(1).copied().unwrap_or(1));
            let stacked = match stacking {
                Stacking::Plain => want.clone(),
                Stacking::Rows => vec![lanes, rows / lanes, cols],
                Stacking::Cols => vec![lanes, rows, cols / lanes],
            };
            if t.shape != stacked {
                return Err(Error::ShapeMismatch { path: path.to_string(), tensor: name, expected: stacked, found: t.shape.clone() });
            }
            Ok(match stacking {
                Stacking::Plain => t,
                Stacking::Rows => Tensor { shape: want, ..t },
                Stacking::Cols => unstack_columns(&t, lanes, rows, cols),
            })
        },
        |_, _| {},
    )
}

/// `[L, rows, cols/L]` → `[rows, cols]` with lane `l`'s block at columns `l·cols/L`.
fn unstack_columns(t: &Tensor, lanes: usize, rows: usize, cols: usize) -> Tensor {
    let elem = t.dtype.block_bytes();
    let (bytes, width) = (t.bytes(), cols / lanes * elem);
    let mut out = Vec::with_capacity(bytes.len());
    for r in 0..rows {
        for l in 0..lanes {
            let at = (l * rows + r) * width;
            out.extend_from_slice(&bytes[at..at + width]);
        }
    }
    Tensor { name: t.name.clone(), dtype: t.dtype, shape: vec![rows, cols], storage: Storage::Owned(Arc::new(out)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unstacking_columns_puts_each_lane_block_at_its_offset() {
        // Two lanes, 2 rows, 3 columns per lane: lane 0 holds 0..6, lane 1 holds 10..16.
        let values: Vec<f32> = (0..6).map(|v| v as f32).chain((10..16).map(|v| v as f32)).collect();
        let t = Tensor::from_f32("w", vec![2, 2, 3], &values);
        let got = unstack_columns(&t, 2, 2, 6).to_f32().expect("f32");
        assert_eq!(got, vec![0.0, 1.0, 2.0, 10.0, 11.0, 12.0, 3.0, 4.0, 5.0, 13.0, 14.0, 15.0]);
    }
}
