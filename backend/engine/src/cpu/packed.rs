//! Weight matrices repacked once at load time for the fast kernels. Rows are
//! interleaved in groups of [`GROUP_ROWS`] so that one 512-bit register holds four
//! consecutive codes of each of 16 rows (one 32-bit lane per row), the idea behind
//! llama.cpp's `repack.cpp` (`block_q4_0x8`): a broadcast activation word then
//! feeds 16 rows per `vpdpbusd` and no horizontal sums are needed.
//!
//! Lossless: every quantized type becomes unsigned codes `c` with `x = d·c + m` per
//! sub-block (see [`QuantFormat`]); float types keep their bits, column-interleaved.

use crate::cpu::source_blocks::{decode_sub_blocks, SubBlock};
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

/// Rows per interleaved group (one 32-bit lane of a 512-bit register each).
pub const GROUP_ROWS: usize = 16;
/// Codes per 32-bit lane (the width of one `vpdpbusd` step).
pub const CODES_PER_LANE: usize = 4;
/// Bytes of one code vector: four codes of each of the 16 rows.
pub const VECTOR_BYTES: usize = GROUP_ROWS * CODES_PER_LANE;

/// How codes are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codes {
    /// 4-bit codes: vector `k`'s low nibbles hold codes `4k..4k+4`, its high nibbles
    /// codes `sub/2 + 4k..` (so low and high vectors pair with activation words in order).
    Nibble,
    /// 8-bit codes: vector `k` holds codes `4k..4k+4`.
    Byte,
}

/// How per-sub-block scales are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScaleType {
    /// IEEE half: exact for the legacy block types, whose scales are f16 already.
    F16,
    /// f32: for K-quants, whose effective scale is an f16 times a small integer.
    F32,
}

/// Layout of one quantized source type after repacking.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QuantFormat {
    pub codes: Codes,
    /// Elements sharing one (d, m) pair: 32, or 16 for Q6_K.
    pub sub: usize,
    pub scale: ScaleType,
    /// `Some(c)`: `m = c·d` (exact: c is a power of two), computed instead of stored.
    pub m_from_d: Option<f32>,
}

impl QuantFormat {
    /// Code vectors per sub-block.
    pub const fn vectors(&self) -> usize {
        self.sub / CODES_PER_LANE
    }

    /// Bytes of the code vectors of one sub-block of one group.
    pub const fn code_bytes(&self) -> usize {
        match self.codes {
            Codes::Nibble => GROUP_ROWS * self.sub / 2,
            Codes::Byte => GROUP_ROWS * self.sub,
        }
    }

    /// Bytes of one scale.
    pub const fn scale_bytes(&self) -> usize {
        match self.scale {
            ScaleType::F16 => 2,
            ScaleType::F32 => 4,
        }
    }

    /// Bytes of one sub-block of one group: codes, 16 d's, then 16 m's when stored.
    pub const fn chunk_bytes(&self) -> usize {
        let scales = if self.m_from_d.is_some() { 1 } else { 2 };
        self.code_bytes() + scales * GROUP_ROWS * self.scale_bytes()
    }
}

/// The repacked layout of each quantized source type.
pub const fn quant_format(dtype: DType) -> Option<QuantFormat> {
    use Codes::{Byte, Nibble};
    use ScaleType::{F16, F32};
    Some(match dtype {
        DType::Q4_0 => QuantFormat { codes: Nibble, sub: 32, scale: F16, m_from_d: Some(-8.0) },
        DType::Q4_1 => QuantFormat { codes: Nibble, sub: 32, scale: F16, m_from_d: None },
        DType::Q8_0 => QuantFormat { codes: Byte, sub: 32, scale: F16, m_from_d: Some(-128.0) },
        DType::Q4_K => QuantFormat { codes: Nibble, sub: 32, scale: F32, m_from_d: None },
        DType::Q6_K => QuantFormat { codes: Byte, sub: 16, scale: F32, m_from_d: Some(-32.0) },
        DType::F32 | DType::F16 | DType::BF16 => return None,
    })
}

/// A float weight type kept as is (activations stay f32 for these).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloatType {
    F32,
    F16,
    BF16,
}

impl FloatType {
    /// Bytes per element.
    pub const fn bytes(self) -> usize {
        match self {
            FloatType::F32 => 4,
            FloatType::F16 | FloatType::BF16 => 2,
        }
    }
}

/// What a group panel holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Format {
    Quant(QuantFormat),
    /// Column `c` of a group: 16 values, one per row.
    Float(FloatType),
}

/// A cache line of bytes: keeps every group panel 64-byte aligned.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// A `[rows, cols]` weight matrix in group panels.
pub struct PackedMatrix {
    pub name: String,
    /// The type it was packed from.
    pub source: DType,
    pub rows: usize,
    pub cols: usize,
    pub format: Format,
    group_bytes: usize,
    lines: Vec<Line>,
}

impl std::fmt::Debug for PackedMatrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PackedMatrix({} {:?} {}x{})", self.name, self.source, self.rows, self.cols)
    }
}

impl PackedMatrix {
    /// Repacks a 2-D tensor (`[rows, cols]`, rows contiguous).
    pub fn from_tensor(t: &Tensor) -> Result<PackedMatrix> {
        let bad = |reason: String| Error::TensorData { tensor: t.name.clone(), reason };
        let [rows, cols] = t.shape[..] else {
            return Err(bad(format!("expected a matrix, found shape {:?}", t.shape)));
        };
        let row_bytes = t.dtype.bytes_for(cols).ok_or_else(|| bad(format!("row length {cols} is not whole {:?} blocks", t.dtype)))?;
        if t.bytes().len() != rows * row_bytes {
            return Err(bad(format!("{} bytes for {rows} rows of {row_bytes}", t.bytes().len())));
        }
        let format = match (quant_format(t.dtype), t.dtype) {
            (Some(q), _) => Format::Quant(q),
            (None, DType::F32) => Format::Float(FloatType::F32),
            (None, DType::F16) => Format::Float(FloatType::F16),
            (None, _) => Format::Float(FloatType::BF16),
        };
        let group_bytes = match format {
            Format::Quant(q) => cols / q.sub * q.chunk_bytes(),
            Format::Float(f) => cols * GROUP_ROWS * f.bytes(),
        };
        let groups = rows.div_ceil(GROUP_ROWS);
        let lines_per_group = group_bytes.div_ceil(64);
        let mut m = PackedMatrix {
            name: t.name.clone(),
            source: t.dtype,
            rows,
            cols,
            format,
            group_bytes: lines_per_group * 64,
            lines: vec![Line([0; 64]); groups * lines_per_group],
        };
        for r in 0..rows {
            let src = &t.bytes()[r * row_bytes..(r + 1) * row_bytes];
            match format {
                Format::Quant(q) => m.pack_quant_row(r, q, t.dtype, src),
                Format::Float(f) => m.pack_float_row(r, f, src),
            }
        }
        Ok(m)
    }

    /// Number of row groups (the last one padded with zero rows).
    pub fn groups(&self) -> usize {
        self.rows.div_ceil(GROUP_ROWS)
    }

    /// Rows rounded up to whole groups (the stride output buffers need).
    pub fn padded_rows(&self) -> usize {
        self.groups() * GROUP_ROWS
    }

    /// Sub-blocks (quantized) or columns (float) per row.
    pub fn steps(&self) -> usize {
        match self.format {
            Format::Quant(q) => self.cols / q.sub,
            Format::Float(_) => self.cols,
        }
    }

    /// Bytes in memory (for load-time reporting).
    #[cfg(feature = "lab")]
    pub fn size_bytes(&self) -> usize {
        self.lines.len() * 64
    }

    /// Start of group `g`'s panel.
    pub fn panel(&self, g: usize) -> *const u8 {
        assert!(g < self.groups());
        // SAFETY: g < groups, so the offset stays inside `lines` (groups × group_bytes bytes).
        unsafe { self.bytes().as_ptr().add(g * self.group_bytes) }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `Line` is a plain 64-byte array with no padding, so the Vec's
        // storage is `len × 64` initialised bytes.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<u8>(), self.lines.len() * 64) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and `&mut self` makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<u8>(), self.lines.len() * 64) }
    }

    fn pack_quant_row(&mut self, r: usize, q: QuantFormat, dtype: DType, src: &[u8]) {
        let (g, lane) = (r / GROUP_ROWS, r % GROUP_ROWS);
        let base = g * self.group_bytes;
        let chunk = q.chunk_bytes();
        let sb = q.scale_bytes();
        let bytes = self.bytes_mut();
        decode_sub_blocks(dtype, src, q.sub, &mut |s: usize, b: &SubBlock| {
            let at = base + s * chunk;
            for (e, &c) in b.codes[..q.sub].iter().enumerate() {
                match q.codes {
                    Codes::Byte => bytes[at + code_offset(lane, e)] = c,
                    Codes::Nibble if e < q.sub / 2 => bytes[at + code_offset(lane, e)] |= c & 0x0F,
                    Codes::Nibble => bytes[at + code_offset(lane, e - q.sub / 2)] |= c << 4,
                }
            }
            let d_at = at + q.code_bytes() + lane * sb;
            let m_at = d_at + GROUP_ROWS * sb;
            match q.scale {
                ScaleType::F16 => {
                    bytes[d_at..d_at + 2].copy_from_slice(&b.d_f16.to_le_bytes());
                    if q.m_from_d.is_none() {
                        bytes[m_at..m_at + 2].copy_from_slice(&b.m_f16.to_le_bytes());
                    }
                }
                ScaleType::F32 => {
                    bytes[d_at..d_at + 4].copy_from_slice(&b.d.to_le_bytes());
                    if q.m_from_d.is_none() {
                        bytes[m_at..m_at + 4].copy_from_slice(&b.m.to_le_bytes());
                    }
                }
            }
        });
    }

    fn pack_float_row(&mut self, r: usize, f: FloatType, src: &[u8]) {
        let (g, lane) = (r / GROUP_ROWS, r % GROUP_ROWS);
        let base = g * self.group_bytes;
        let eb = f.bytes();
        let bytes = self.bytes_mut();
        for (c, v) in src.chunks_exact(eb).enumerate() {
            let at = base + (c * GROUP_ROWS + lane) * eb;
            bytes[at..at + eb].copy_from_slice(v);
        }
    }

    /// Row `r` as f32, computed from the packed form (`d·c + m`): tests check that it
    /// equals the loader's dequantization bit for bit.
    #[cfg(feature = "lab")]
    pub fn row_to_f32(&self, r: usize) -> Vec<f32> {
        assert!(r < self.rows);
        let (g, lane) = (r / GROUP_ROWS, r % GROUP_ROWS);
        let p = &self.bytes()[g * self.group_bytes..(g + 1) * self.group_bytes];
        let mut out = vec![0.0f32; self.cols];
        match self.format {
            Format::Quant(q) => {
                for (s, y) in out.chunks_exact_mut(q.sub).enumerate() {
                    let chunk = &p[s * q.chunk_bytes()..(s + 1) * q.chunk_bytes()];
                    let (d, m) = chunk_scales(q, chunk, lane);
                    for (e, y) in y.iter_mut().enumerate() {
                        *y = d * code(q, chunk, lane, e) as f32 + m;
                    }
                }
            }
            Format::Float(f) => {
                for (c, y) in out.iter_mut().enumerate() {
                    *y = float_at(f, p, c * GROUP_ROWS + lane);
                }
            }
        }
        out
    }
}

/// Byte offset of code `e` (`e < 4·vectors`) of row `lane` inside a chunk's code vectors.
pub const fn code_offset(lane: usize, e: usize) -> usize {
    (e / CODES_PER_LANE) * VECTOR_BYTES + lane * CODES_PER_LANE + e % CODES_PER_LANE
}

/// Code `e` of row `lane` of one chunk.
pub fn code(q: QuantFormat, chunk: &[u8], lane: usize, e: usize) -> u8 {
    match q.codes {
        Codes::Byte => chunk[code_offset(lane, e)],
        Codes::Nibble if e < q.sub / 2 => chunk[code_offset(lane, e)] & 0x0F,
        Codes::Nibble => chunk[code_offset(lane, e - q.sub / 2)] >> 4,
    }
}

/// (d, m) of row `lane` of one chunk, as f32.
pub fn chunk_scales(q: QuantFormat, chunk: &[u8], lane: usize) -> (f32, f32) {
    let sb = q.scale_bytes();
    let read = |at: usize| match q.scale {
        ScaleType::F16 => half::f16::from_le_bytes([chunk[at], chunk[at + 1]]).to_f32(),
        ScaleType::F32 => f32::from_le_bytes([chunk[at], chunk[at + 1], chunk[at + 2], chunk[at + 3]]),
    };
    let d_at = q.code_bytes() + lane * sb;
    let d = read(d_at);
    let m = match q.m_from_d {
        Some(c) => d * c,
        None => read(d_at + GROUP_ROWS * sb),
    };
    (d, m)
}

/// Element `i` of a float panel, as f32.
pub fn float_at(f: FloatType, panel: &[u8], i: usize) -> f32 {
    match f {
        FloatType::F32 => f32::from_le_bytes([panel[4 * i], panel[4 * i + 1], panel[4 * i + 2], panel[4 * i + 3]]),
        FloatType::F16 => half::f16::from_le_bytes([panel[2 * i], panel[2 * i + 1]]).to_f32(),
        FloatType::BF16 => half::bf16::from_le_bytes([panel[2 * i], panel[2 * i + 1]]).to_f32(),
    }
}
