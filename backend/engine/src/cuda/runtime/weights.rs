//! The weights part: each rank's shard ([`WeightShards`]) cut from the full matrices, converted
//! to bf16 (norms and biases f32) and uploaded, with the per-layer pointer table; the
//! matrices the plan quantizes also in their repacked format (cuda/quant), which the
//! decode kernel's table points at while the batched prefill's GEMMs read the bf16 copies.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};

use super::devices::Devices;
use super::prefill::PrefillWeights;
use super::{alloc_err, Shape};
use crate::config::ModelConfig;
use crate::cpu::rope;
use crate::cuda::layout::LayerSlot;
use crate::cuda::quant::{repack, repack_rows_interleaved, GpuFormat, WeightPlan};
use crate::dtp::shard::lane_row;
use crate::dtp::ShardPlan;
use crate::error::{CudaError, Error, Result};
use crate::tensor::Tensor;
use crate::weights::Weights;

/// Weight buffers on the device (kept alive for the pointers in the layer table).
pub(super) struct DeviceWeights {
    _bf16: Vec<CudaSlice<u16>>,
    _f32: Vec<CudaSlice<f32>>,
    _quant: Vec<CudaSlice<u8>>,
    /// The decode kernel's per-layer table (quantized matrices where the plan says so).
    pub(super) layer_table: CudaSlice<u64>,
    /// The bf16 table on the host (the batched prefill enqueues per-layer work).
    pub(super) layer_ptrs: Vec<[u64; LayerSlot::COUNT]>,
    pub(super) embed: u64,
    /// The decode kernel's LM head (quantized when the plan says so).
    pub(super) lm_head: u64,
    pub(super) final_norm: u64,
    pub(super) inv_freq: u64,
    /// bf16 + f32 bytes the kernel streams per token (every matrix once, norms, LM head):
    /// the benchmarks' figure.
    #[cfg(feature = "lab")]
    pub(super) streamed_bytes: u64,
}

/// The weights part: each rank's shard on its GPU, and the formats the load log names.
pub(super) struct WeightShards {
    pub(super) ranks: Vec<DeviceWeights>,
    /// The weight matrices' formats, as the load log says them.
    pub(super) formats: String,
}

impl WeightShards {
    /// Uploads every rank's shard of `weights` in the formats `plan` chose.
    pub(super) fn upload(devices: &Devices, shape: &Shape, weights: &Weights, plan: &WeightPlan) -> Result<WeightShards> {
        let tp = devices.tp();
        let ranks = devices
            .gpus
            .iter()
            .enumerate()
            .map(|(rank, g)| upload_rank(&g.stream, &shape.config, &shape.shard, weights, rank, tp, plan))
            .collect::<Result<Vec<_>>>()?;
        Ok(WeightShards { ranks, formats: plan.describe() })
    }

    /// Bytes each GPU must read from memory per token at least (its weights once).
    #[cfg(feature = "lab")]
    pub(super) fn streamed_bytes_per_token(&self) -> u64 {
        self.ranks.iter().map(|w| w.streamed_bytes).max().unwrap_or(0)
    }
}

impl DeviceWeights {
    /// The weight pointers the batched prefill reads.
    pub(super) fn prefill_weights(&self) -> PrefillWeights<'_> {
        PrefillWeights { layers: &self.layer_ptrs, embed: self.embed, inv_freq: self.inv_freq }
    }
}

/// Rows `r0..r1` of a row-major matrix with `cols` columns.
fn rows_of(m: &[f32], cols: usize, r0: usize, r1: usize) -> Vec<f32> {
    m[r0 * cols..r1 * cols].to_vec()
}

/// Columns `c0..c1` of a row-major matrix with `cols` columns.
fn cols_of(m: &[f32], cols: usize, c0: usize, c1: usize) -> Vec<f32> {
    m.chunks_exact(cols).flat_map(|row| row[c0..c1].iter().copied()).collect()
}

fn to_bf16(values: &[f32]) -> Vec<u16> {
    values.iter().map(|&v| half::bf16::from_f32(v).to_bits()).collect()
}

fn expect_shape(t: &Tensor, shape: &[usize]) -> Result<()> {
    if t.shape != shape {
        return Err(Error::ShapeMismatch {
            path: "<weights>".into(),
            tensor: t.name.clone(),
            expected: shape.to_vec(),
            found: t.shape.clone(),
        });
    }
    Ok(())
}

/// Uploads rank `rank`'s shard (all of it on one GPU): its query heads' q rows, its
/// KV heads' k/v rows, its FFN columns of gate/up (rows) and down (columns), its
/// heads' o-projection columns and its vocabulary rows of the LM head; the
/// embedding and norms whole.
fn upload_rank(
    stream: &Arc<CudaStream>,
    c: &ModelConfig,
    sh: &ModelConfig,
    w: &Weights,
    rank: usize,
    tp: usize,
    formats: &WeightPlan,
) -> Result<DeviceWeights> {
    let (d, f, hd) = (c.hidden_size, c.intermediate_size, c.head_dim);
    let (qd, kvd) = (c.num_heads * hd, c.num_kv_heads * hd);
    if w.layers.len() != c.num_layers {
        return Err(CudaError::Unsupported(format!("{} layers of weights for a {}-layer config", w.layers.len(), c.num_layers)).into());
    }
    // This rank's query rows/columns, KV rows, FFN columns and vocabulary rows: the
    // split the CPU reference uses too (layout::shard checked it gives `sh`'s sizes).
    let plan = ShardPlan::new(c, tp)?;
    let lane = &plan.lanes[rank];
    let (q0, q1) = (lane.q_heads.start * hd, lane.q_heads.end * hd);
    let (k0, k1) = (lane.kv_heads.start * hd, lane.kv_heads.end * hd);
    let (f0, f1) = (lane.ffn.start, lane.ffn.end);
    let (v0, v1) = (lane.vocab.start, lane.vocab.end);
    debug_assert_eq!((q1 - q0, k1 - k0, f1 - f0, v1 - v0), (sh.num_heads * hd, sh.num_kv_heads * hd, sh.intermediate_size, sh.vocab_size));
    let mut bf16s: Vec<CudaSlice<u16>> = Vec::new();
    let mut f32s: Vec<CudaSlice<f32>> = Vec::new();
    // Bytes the kernel streams per token, counted as the matrices go up: the benchmarks'
    // figure (`streamed_bytes`, `lab` only). Nothing reads the count in a build without
    // `lab`, which leaves out its last corrections below.
    let mut streamed: u64 = 0;
    let put_bf16 = |values: Vec<f32>, streamed_too: bool, bf16s: &mut Vec<CudaSlice<u16>>, streamed: &mut u64| -> Result<u64> {
        if streamed_too {
            *streamed += 2 * values.len() as u64;
        }
        let s = stream.clone_htod(&to_bf16(&values)).map_err(alloc_err(format!("bf16 weights (rank {rank})"), 2 * values.len()))?;
        let p = s.device_ptr(stream).0;
        bf16s.push(s);
        Ok(p)
    };
    let put_f32 = |values: &[f32], f32s: &mut Vec<CudaSlice<f32>>| -> Result<u64> {
        let s = stream.clone_htod(values).map_err(alloc_err(format!("f32 weights (rank {rank})"), 4 * values.len()))?;
        let p = s.device_ptr(stream).0;
        f32s.push(s);
        Ok(p)
    };
    let mut quants: Vec<CudaSlice<u8>> = Vec::new();
    let mut quant_streamed: u64 = 0;
    let put_bytes = |bytes: Vec<u8>, quants: &mut Vec<CudaSlice<u8>>, quant_streamed: &mut u64| -> Result<u64> {
        *quant_streamed += bytes.len() as u64;
        let s = stream.clone_htod(&bytes).map_err(alloc_err(format!("quantized weights (rank {rank})"), bytes.len()))?;
        let p = s.device_ptr(stream).0;
        quants.push(s);
        Ok(p)
    };
    let mut table: Vec<u64> = Vec::with_capacity(c.num_layers * LayerSlot::COUNT);
    let mut layer_ptrs = Vec::with_capacity(c.num_layers);
    for (li, l) in w.layers.iter().enumerate() {
        let fm = formats.layers[li];
        expect_shape(&l.q, &[qd, d])?;
        expect_shape(&l.k, &[kvd, d])?;
        expect_shape(&l.v, &[kvd, d])?;
        expect_shape(&l.o, &[d, qd])?;
        expect_shape(&l.gate, &[f, d])?;
        expect_shape(&l.up, &[f, d])?;
        expect_shape(&l.down, &[d, f])?;
        let mut slots = [0u64; LayerSlot::COUNT];
        let mut qkv = rows_of(&l.q.to_f32()?, d, q0, q1);
        qkv.extend(rows_of(&l.k.to_f32()?, d, k0, k1));
        qkv.extend(rows_of(&l.v.to_f32()?, d, k0, k1));
        slots[LayerSlot::Wqkv.index()] = put_bf16(qkv, true, &mut bf16s, &mut streamed)?;
        if c.attention_bias {
            let mut b = Vec::with_capacity(q1 - q0 + 2 * (k1 - k0));
            for (t, (r0, r1)) in [(&l.q_bias, (q0, q1)), (&l.k_bias, (k0, k1)), (&l.v_bias, (k0, k1))] {
                let t = t.as_ref().ok_or_else(|| CudaError::Unsupported("attention_bias is set but a q/k/v bias is missing".into()))?;
                b.extend_from_slice(&t.to_f32()?[r0..r1]);
            }
            slots[LayerSlot::QkvBias.index()] = put_f32(&b, &mut f32s)?;
        }
        slots[LayerSlot::Wo.index()] = put_bf16(cols_of(&l.o.to_f32()?, qd, q0, q1), true, &mut bf16s, &mut streamed)?;
        let (gate, up) = (l.gate.to_f32()?, l.up.to_f32()?);
        let mut gu = Vec::with_capacity(2 * (f1 - f0) * d);
        for j in f0..f1 {
            gu.extend_from_slice(&gate[j * d..(j + 1) * d]);
            gu.extend_from_slice(&up[j * d..(j + 1) * d]);
        }
        drop((gate, up));
        slots[LayerSlot::WgateUp.index()] = put_bf16(gu, true, &mut bf16s, &mut streamed)?;
        slots[LayerSlot::Wdown.index()] = put_bf16(cols_of(&l.down.to_f32()?, f, f0, f1), true, &mut bf16s, &mut streamed)?;
        // A Laneformer with per-lane norm scales: this rank's lane row.
        slots[LayerSlot::AttnNorm.index()] = put_f32(lane_row(&l.attn_norm.to_f32()?, d, rank), &mut f32s)?;
        slots[LayerSlot::FfnNorm.index()] = put_f32(lane_row(&l.ffn_norm.to_f32()?, d, rank), &mut f32s)?;
        streamed += 4 * 2 * d as u64;
        layer_ptrs.push(slots);
        // The decode table: each quantized matrix's repacked bytes instead of its bf16 copy.
        let mut dslots = slots;
        if fm.word() != 0 {
            let q = |t: &Tensor, f: GpuFormat, rows: std::ops::Range<usize>, cols: std::ops::Range<usize>| {
                matrix_bytes(t, f, rows, cols, formats.quantize_floats)
            };
            let mut qkv = q(&l.q, fm.q, q0..q1, 0..d)?;
            qkv.extend(q(&l.k, fm.k, k0..k1, 0..d)?);
            qkv.extend(q(&l.v, fm.v, k0..k1, 0..d)?);
            let bf16_bytes = |slot: LayerSlot| {
                2 * match slot {
                    LayerSlot::Wqkv => (q1 - q0 + 2 * (k1 - k0)) * d,
                    LayerSlot::Wo => d * (q1 - q0),
                    LayerSlot::WgateUp => 2 * (f1 - f0) * d,
                    _ => d * (f1 - f0),
                } as u64
            };
            let mut swap = |slot: LayerSlot, bytes: Vec<u8>, quants: &mut Vec<CudaSlice<u8>>, qs: &mut u64| -> Result<()> {
                // The bf16 copy is no longer what the decode kernel streams.
                streamed -= bf16_bytes(slot);
                dslots[slot.index()] = put_bytes(bytes, quants, qs)?;
                Ok(())
            };
            if [fm.q, fm.k, fm.v].iter().any(|f| *f != GpuFormat::Bf16) {
                swap(LayerSlot::Wqkv, qkv, &mut quants, &mut quant_streamed)?;
            }
            if fm.o != GpuFormat::Bf16 {
                swap(LayerSlot::Wo, q(&l.o, fm.o, 0..d, q0..q1)?, &mut quants, &mut quant_streamed)?;
            }
            if fm.gate_up != GpuFormat::Bf16 {
                let gu = gate_up_bytes(&l.gate, &l.up, fm.gate_up, f0..f1, formats.quantize_floats)?;
                swap(LayerSlot::WgateUp, gu, &mut quants, &mut quant_streamed)?;
            }
            if fm.down != GpuFormat::Bf16 {
                swap(LayerSlot::Wdown, q(&l.down, fm.down, 0..d, f0..f1)?, &mut quants, &mut quant_streamed)?;
            }
            dslots[LayerSlot::Fmts.index()] = fm.word();
        }
        table.extend_from_slice(&dslots);
    }
    expect_shape(&w.embed, &[c.vocab_size, d])?;
    let embed_f32 = w.embed.to_f32()?;
    let lm_head = match &w.lm_head {
        Some(t) => {
            // A `lane` head's rows read every lane's h side by side.
            let cols = c.lanes.head_cols(d);
            expect_shape(t, &[c.vocab_size, cols])?;
            Some(put_bf16(rows_of(&t.to_f32()?, cols, v0, v1), true, &mut bf16s, &mut streamed)?)
        }
        // Tied and split: this rank's rows of the embedding as its own matrix.
        None if tp > 1 => Some(put_bf16(rows_of(&embed_f32, d, v0, v1), true, &mut bf16s, &mut streamed)?),
        None => {
            streamed += 2 * (c.vocab_size * d) as u64;
            None
        }
    };
    let embed = put_bf16(embed_f32, false, &mut bf16s, &mut streamed)?;
    let mut lm_head = lm_head.unwrap_or(embed);
    if formats.lm_head != GpuFormat::Bf16 {
        #[cfg(feature = "lab")]
        {
            streamed -= 2 * ((v1 - v0) * d) as u64;
        }
        lm_head = put_bytes(
            matrix_bytes(w.lm_head(), formats.lm_head, v0..v1, 0..d, formats.quantize_floats)?,
            &mut quants,
            &mut quant_streamed,
        )?;
    }
    let final_norm = put_f32(lane_row(&w.final_norm.to_f32()?, d, rank), &mut f32s)?;
    let inv_freq = put_f32(&rope::inv_freq(c), &mut f32s)?;
    // The embedding row read per token.
    #[cfg(feature = "lab")]
    {
        streamed += 2 * d as u64 + 4 * d as u64;
    }
    let layer_table = stream.clone_htod(&table).map_err(alloc_err("the layer table", 8 * table.len()))?;
    Ok(DeviceWeights {
        _bf16: bf16s,
        _f32: f32s,
        _quant: quants,
        layer_table,
        layer_ptrs,
        embed,
        lm_head,
        final_norm,
        inv_freq,
        #[cfg(feature = "lab")]
        streamed_bytes: streamed + quant_streamed,
    })
}

/// `t` as the plan stores it: quantized to Q8_0 first when it is a float matrix and
/// `quantize_floats` (`--gpu-weights q8_0`), else `t` itself.
fn planned_source(t: &Tensor, quantize_floats: bool) -> Result<std::borrow::Cow<'_, Tensor>> {
    if quantize_floats && GpuFormat::native(t.dtype) == Some(GpuFormat::Bf16) {
        Ok(std::borrow::Cow::Owned(crate::gguf::quantize::q8_0_tensor(t.name.as_str(), t.shape.clone(), &t.to_f32()?)?))
    } else {
        Ok(std::borrow::Cow::Borrowed(t))
    }
}

/// The repacked bytes, checked to be in the format the plan chose for `name`.
fn expect_format(name: &str, want: GpuFormat, (got, bytes): (GpuFormat, Vec<u8>)) -> Result<Vec<u8>> {
    if got != want {
        return Err(CudaError::Mismatch(format!("{name}: planned as {} but repacked as {}", want.name(), got.name())).into());
    }
    Ok(bytes)
}

/// Rows × columns of `t` in format `f` (the plan's choice for it).
fn matrix_bytes(
    t: &Tensor,
    f: GpuFormat,
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
    quantize_floats: bool,
) -> Result<Vec<u8>> {
    let src = planned_source(t, quantize_floats)?;
    expect_format(&t.name, f, repack(&src, rows, cols)?)
}

/// The fused gate/up rows (gate_j, up_j interleaved) of FFN columns `ffn` in format `f`.
fn gate_up_bytes(gate: &Tensor, up: &Tensor, f: GpuFormat, ffn: std::ops::Range<usize>, quantize_floats: bool) -> Result<Vec<u8>> {
    let (g, u) = (planned_source(gate, quantize_floats)?, planned_source(up, quantize_floats)?);
    expect_format(&gate.name, f, repack_rows_interleaved(&g, &u, ffn)?)
}
