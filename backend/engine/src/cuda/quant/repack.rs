//! Repacks rows of a GGUF tensor into the GPU layout of [`super::format`], keeping the
//! tensor's own quantization: codes move (rotated within each chunk), scales are
//! copied as raw halves / 6-bit / int8 values, so nothing is re-rounded and the kernel
//! dequantizes exactly as ggml does. Float tensors become bf16.

use std::ops::Range;

use crate::cpu::source_blocks::{decode_sub_blocks, scale_min_k4, SubBlock};
use crate::error::{Error, Result};
use crate::gguf::quant::dequantize;
use crate::tensor::{DType, Tensor};

use super::format::{original_group, GpuFormat, Planes, BYTE_CODE_BYTES, CHUNK, GROUP, GROUPS, HIGH_BITS_BYTES, NIBBLE_CODE_BYTES};

/// Offset of Q6_K's int8 scales inside a `block_q6_K` (after ql[128] and qh[64]).
const Q6_K_SCALES_AT: usize = 192;
/// Offset of Q6_K's f16 d inside a `block_q6_K`.
const Q6_K_D_AT: usize = 208;
/// Offset of Q4_K's 12 packed scale/min bytes inside a `block_q4_K` (after d and dmin).
const Q4_K_SCALES_AT: usize = 4;
/// Sub-blocks per K-quant super-block as `get_scale_min_k4` numbers them (one per chunk).
const CHUNKS_PER_SUPER: usize = 8;

/// Rows `rows` and columns `cols` of the matrix `t` (`[rows, cols]`, GGUF blocks along a
/// row) in `t`'s native GPU format, row after row at `row_bytes` each. Quantized column
/// ranges must start and end on `t`'s block boundaries; the error says so, and the
/// caller can fall back to bf16 (`repack_bf16`).
pub fn repack(t: &Tensor, rows: Range<usize>, cols: Range<usize>) -> Result<(GpuFormat, Vec<u8>)> {
    let src = RowSource::new(t, &rows, cols)?;
    let mut out = vec![0u8; packed_len(t, rows.len(), src.row_bytes)?];
    let mut scratch = Scratch::new(src.k);
    for (r, dst) in rows.zip(out.chunks_exact_mut(src.row_bytes)) {
        src.pack_row(r, dst, &mut scratch)?;
    }
    Ok((src.fmt, out))
}

/// Rows `a[j], b[j]` alternately for `j` in `rows`, all columns: the fused gate/up matrix
/// whose output pairs sit side by side. `a` and `b` must have the same type and shape.
pub fn repack_rows_interleaved(a: &Tensor, b: &Tensor, rows: Range<usize>) -> Result<(GpuFormat, Vec<u8>)> {
    if a.dtype != b.dtype || a.shape != b.shape {
        return Err(data_error(
            a,
            format!("cannot interleave with `{}`: {:?} {:?} against {:?} {:?}", b.name, a.dtype, a.shape, b.dtype, b.shape),
        ));
    }
    let cols = 0..a.shape.last().copied().unwrap_or(0);
    let (sa, sb) = (RowSource::new(a, &rows, cols.clone())?, RowSource::new(b, &rows, cols)?);
    let pair = sa.row_bytes * 2;
    let mut out = vec![0u8; packed_len(a, rows.len(), pair)?];
    let mut scratch = Scratch::new(sa.k);
    for (j, dst) in rows.zip(out.chunks_exact_mut(pair)) {
        let (da, db) = dst.split_at_mut(sa.row_bytes);
        sa.pack_row(j, da, &mut scratch)?;
        sb.pack_row(j, db, &mut scratch)?;
    }
    Ok((sa.fmt, out))
}

/// Rows `rows` and columns `cols` of `t` as little-endian bf16 whatever `t`'s type (any
/// column range): the fallback for slices a quantized layout cannot express. Only the
/// tests call it.
#[cfg(feature = "lab")]
pub fn repack_bf16(t: &Tensor, rows: Range<usize>, cols: Range<usize>) -> Result<Vec<u8>> {
    let (_, n_cols) = matrix_shape(t, &rows, &cols)?;
    let mut row = vec![0.0f32; n_cols];
    let mut out = Vec::with_capacity(packed_len(t, rows.len(), 2 * cols.len())?);
    for r in rows {
        t.row_to_f32(r, &mut row)?;
        out.extend(row[cols.clone()].iter().flat_map(|&v| half::bf16::from_f32(v).to_le_bytes()));
    }
    Ok(out)
}

/// Reusable per-row buffers.
struct Scratch {
    /// One row's codes in original element order (quantized formats).
    codes: Vec<u8>,
    /// One row's values (bf16 from floats).
    values: Vec<f32>,
}

impl Scratch {
    fn new(k: usize) -> Scratch {
        Scratch { codes: vec![0; k], values: Vec::new() }
    }
}

/// Where the packed columns of each source row are and how they are packed.
struct RowSource<'a> {
    t: &'a Tensor,
    fmt: GpuFormat,
    /// Elements per packed row.
    k: usize,
    planes: Planes,
    row_bytes: usize,
    /// Bytes per source row.
    stride: usize,
    /// The column range's bytes within a source row.
    span: Range<usize>,
}

impl<'a> RowSource<'a> {
    fn new(t: &'a Tensor, rows: &Range<usize>, cols: Range<usize>) -> Result<RowSource<'a>> {
        let (n_rows, n_cols) = matrix_shape(t, rows, &cols)?;
        let fmt = GpuFormat::native(t.dtype).ok_or_else(|| data_error(t, format!("{:?} has no GPU format", t.dtype)))?;
        let (bs, bb) = (t.dtype.block_size(), t.dtype.block_bytes());
        if !cols.start.is_multiple_of(bs) || !cols.end.is_multiple_of(bs) {
            return Err(data_error(
                t,
                format!(
                    "columns {}..{} of a {:?} row of {n_cols} do not start and end on its {bs}-element blocks (repack as bf16 instead)",
                    cols.start, cols.end, t.dtype
                ),
            ));
        }
        let stride =
            t.dtype.bytes_for(n_cols).ok_or_else(|| data_error(t, format!("row length {n_cols} is not whole {:?} blocks", t.dtype)))?;
        if n_rows.checked_mul(stride).is_none_or(|len| len > t.bytes().len()) {
            return Err(data_error(t, format!("{} bytes of data are shorter than its shape {:?}", t.bytes().len(), t.shape)));
        }
        let k = cols.len();
        let bad_len = || data_error(t, format!("a {} row of {k} elements", fmt.name()));
        let planes = fmt.plane_offsets(k).ok_or_else(bad_len)?;
        let row_bytes = fmt.row_bytes(k).ok_or_else(bad_len)?;
        let span = cols.start / bs * bb..cols.end / bs * bb;
        Ok(RowSource { t, fmt, k, planes, row_bytes, stride, span })
    }

    /// Packs source row `r` into `dst` (`row_bytes` zeroed bytes).
    fn pack_row(&self, r: usize, dst: &mut [u8], scratch: &mut Scratch) -> Result<()> {
        let at = r * self.stride;
        let src = self
            .t
            .bytes()
            .get(at + self.span.start..at + self.span.end)
            .ok_or_else(|| data_error(self.t, format!("row {r} runs past the end of the data")))?;
        if self.fmt == GpuFormat::Bf16 {
            scratch.values.resize(self.k, 0.0);
            dequantize(self.t.dtype, src, &mut scratch.values).map_err(|reason| data_error(self.t, reason))?;
            for (d, &v) in dst.chunks_exact_mut(2).zip(&scratch.values) {
                d.copy_from_slice(&half::bf16::from_f32(v).to_le_bytes());
            }
            return Ok(());
        }
        let codes = &mut scratch.codes;
        // Q6_K's int8 scales cover 16 elements; every other type's sub-block is one chunk.
        let sub = if self.t.dtype == DType::Q6_K { 16 } else { CHUNK };
        decode_sub_blocks(self.t.dtype, src, sub, &mut |i: usize, b: &SubBlock| {
            codes[i * sub..(i + 1) * sub].copy_from_slice(&b.codes[..sub])
        });
        let chunks = self.k / CHUNK;
        let code_bytes = if self.fmt == GpuFormat::Q8_0 { BYTE_CODE_BYTES } else { NIBBLE_CODE_BYTES };
        let code_plane = &mut dst[self.planes.codes..self.planes.codes + chunks * code_bytes];
        if self.fmt == GpuFormat::Q8_0 {
            put_bytes(code_plane, codes);
        } else {
            put_nibbles(code_plane, codes);
        }
        if let Some(high) = self.planes.high {
            put_high2(&mut dst[high..high + chunks * HIGH_BITS_BYTES], codes);
        }
        self.put_scales(src, dst);
        Ok(())
    }

    /// Copies the scales of every source block of `src` into the scale planes, in chunk order.
    fn put_scales(&self, src: &[u8], dst: &mut [u8]) {
        let bb = self.t.dtype.block_bytes();
        let chunk_at = self.planes.chunk_scales.unwrap_or(self.planes.end);
        let super_at = self.planes.super_scales.unwrap_or(self.planes.end);
        for (i, b) in src.chunks_exact(bb).enumerate() {
            match self.fmt {
                // Raw d (Q8_0, Q4_0) or d then m (Q4_1): the block's leading halves.
                GpuFormat::Q8_0 | GpuFormat::Q4_0 => dst[chunk_at + 2 * i..chunk_at + 2 * i + 2].copy_from_slice(&b[..2]),
                GpuFormat::Q4_1 => dst[chunk_at + 4 * i..chunk_at + 4 * i + 4].copy_from_slice(&b[..4]),
                GpuFormat::Q4_K => {
                    dst[super_at + 4 * i..super_at + 4 * i + 4].copy_from_slice(&b[..4]);
                    let packed = &b[Q4_K_SCALES_AT..Q4_K_SCALES_AT + 12];
                    for j in 0..CHUNKS_PER_SUPER {
                        let (sc, mn) = scale_min_k4(j, packed);
                        let at = chunk_at + 2 * (i * CHUNKS_PER_SUPER + j);
                        (dst[at], dst[at + 1]) = (sc, mn);
                    }
                }
                GpuFormat::Q6_K => {
                    dst[super_at + 2 * i..super_at + 2 * i + 2].copy_from_slice(&b[Q6_K_D_AT..Q6_K_D_AT + 2]);
                    // Scale 2c and 2c+1 of the super-block are chunk c's two halves, already in order.
                    let at = chunk_at + 2 * i * CHUNKS_PER_SUPER;
                    dst[at..at + 2 * CHUNKS_PER_SUPER].copy_from_slice(&b[Q6_K_SCALES_AT..Q6_K_SCALES_AT + 2 * CHUNKS_PER_SUPER]);
                }
                GpuFormat::Bf16 => {}
            }
        }
    }
}

/// `[n_rows, n_cols]` of the matrix `t` once `rows` and `cols` are checked against it.
fn matrix_shape(t: &Tensor, rows: &Range<usize>, cols: &Range<usize>) -> Result<(usize, usize)> {
    let &[n_rows, n_cols] = t.shape.as_slice() else {
        return Err(data_error(t, format!("repacking needs a matrix, not shape {:?}", t.shape)));
    };
    if rows.start > rows.end || rows.end > n_rows {
        return Err(data_error(t, format!("rows {}..{} are outside its {n_rows} rows", rows.start, rows.end)));
    }
    if cols.start >= cols.end || cols.end > n_cols {
        return Err(data_error(t, format!("columns {}..{} are empty or outside its {n_cols} columns", cols.start, cols.end)));
    }
    Ok((n_rows, n_cols))
}

fn packed_len(t: &Tensor, rows: usize, row_bytes: usize) -> Result<usize> {
    rows.checked_mul(row_bytes).ok_or_else(|| data_error(t, format!("{rows} packed rows of {row_bytes} bytes overflow")))
}

fn data_error(t: &Tensor, reason: String) -> Error {
    Error::TensorData { tensor: t.name.clone(), reason }
}

/// The groups of chunk `c` (32 codes, original order) in stored order.
fn stored_groups(c: usize, chunk: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    (0..GROUPS).map(move |k| {
        let j = original_group(k, c);
        (k, &chunk[GROUP * j..GROUP * j + GROUP])
    })
}

/// 4-bit codes: stored group k, element e is bits 16·(k%2)+4e of little-endian word k/2,
/// which is byte 2k + e/2, low nibble for even e.
fn put_nibbles(plane: &mut [u8], codes: &[u8]) {
    for (c, (d, chunk)) in plane.chunks_exact_mut(NIBBLE_CODE_BYTES).zip(codes.chunks_exact(CHUNK)).enumerate() {
        for (k, g) in stored_groups(c, chunk) {
            d[2 * k] = (g[0] & 0x0F) | (g[1] & 0x0F) << 4;
            d[2 * k + 1] = (g[2] & 0x0F) | (g[3] & 0x0F) << 4;
        }
    }
}

/// 8-bit codes: stored group k, element e is byte e of word k, i.e. byte 4k + e.
fn put_bytes(plane: &mut [u8], codes: &[u8]) {
    for (c, (d, chunk)) in plane.chunks_exact_mut(BYTE_CODE_BYTES).zip(codes.chunks_exact(CHUNK)).enumerate() {
        for (k, g) in stored_groups(c, chunk) {
            d[GROUP * k..GROUP * k + GROUP].copy_from_slice(g);
        }
    }
}

/// Q6_K's high 2 bits: stored group k, element e is bits 8·(k%4)+2e of word k/4, i.e.
/// bits 2e of byte k.
fn put_high2(plane: &mut [u8], codes: &[u8]) {
    for (c, (d, chunk)) in plane.chunks_exact_mut(HIGH_BITS_BYTES).zip(codes.chunks_exact(CHUNK)).enumerate() {
        for (k, g) in stored_groups(c, chunk) {
            d[k] = (g[0] >> 4) | (g[1] >> 4) << 2 | (g[2] >> 4) << 4 | (g[3] >> 4) << 6;
        }
    }
}
