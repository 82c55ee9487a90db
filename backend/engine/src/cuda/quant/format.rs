//! The GPU weight formats and the byte layout of one packed row: the contract with
//! kernels/ops/qmatvec.cuh. A matrix is stored row after row, each row
//! [`GpuFormat::row_bytes`] long (a multiple of 16 for quantized formats). Inside a row
//! of K elements (C = K/32 chunks, S = K/256 super-blocks) the planes follow each other:
//!
//! | format | codes                    | high bits  | super-block scales   | chunk scales          |
//! |--------|--------------------------|------------|----------------------|-----------------------|
//! | Q8_0   | 32·C: u8 = i8 q ^ 0x80   |            |                      | f16 d[C]              |
//! | Q4_0   | 16·C: 4-bit              |            |                      | f16 d[C]              |
//! | Q4_1   | 16·C: 4-bit              |            |                      | (f16 d, f16 m)[C]     |
//! | Q4_K   | 16·C: 4-bit              |            | (f16 d, f16 dmin)[S] | (u8 sc, u8 mn)[C]     |
//! | Q6_K   | 16·C: low 4 of 6 bits    | 8·C: 2-bit | f16 d[S]             | (i8 sc_lo, sc_hi)[C]  |
//!
//! A chunk's 32 elements are 8 groups of 4; original group j of chunk c (its index in
//! the packed row) is stored at position (j − c) mod 8, elements in order. Stored group
//! k, element e sits at bits 16·(k%2)+4e of little-endian word k/2 (4-bit codes), byte e
//! of word k (8-bit codes), bits 8·(k%4)+2e of word k/4 (Q6_K high bits). Scales are not
//! rotated; Q6_K's sc_lo covers original groups 0..3 and sc_hi 4..7.

use crate::tensor::DType;

/// Elements per chunk: the unit the kernel's lanes read and rotate.
pub const CHUNK: usize = 32;
/// Elements per K-quant super-block (`QK_K`).
pub const SUPER_BLOCK: usize = 256;
/// Elements per group: a chunk is [`GROUPS`] groups of this many consecutive elements.
pub const GROUP: usize = 4;
/// Groups per chunk.
pub const GROUPS: usize = CHUNK / GROUP;
/// Every quantized row starts on this many bytes (the kernel's 16-byte loads).
pub const ROW_ALIGN: usize = 16;

/// Bytes per chunk of 4-bit codes (also Q6_K's low 4 bits).
pub const NIBBLE_CODE_BYTES: usize = CHUNK / 2;
/// Bytes per chunk of 8-bit codes (Q8_0).
pub const BYTE_CODE_BYTES: usize = CHUNK;
/// Bytes per chunk of Q6_K's high 2 bits.
pub const HIGH_BITS_BYTES: usize = CHUNK / 4;

/// How a weight matrix is stored on the GPU; the discriminant is the format tag the kernel reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
#[allow(non_camel_case_types)]
pub enum GpuFormat {
    /// Little-endian bf16, 2 bytes per element, in element order (today's layout).
    Bf16 = 0,
    Q8_0 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q4_K = 4,
    Q6_K = 5,
}

/// Byte offsets of one row's planes, in the order they follow each other in the row:
/// codes, high bits, super-block scales, chunk scales.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Planes {
    /// 4-bit codes (16 bytes per chunk; Q6_K's low 4 bits), 8-bit codes (Q8_0, 32 bytes
    /// per chunk) or, for bf16, the values themselves. Always 0.
    pub codes: usize,
    /// Q6_K's high 2 bits, 8 bytes per chunk.
    pub high: Option<usize>,
    /// K-quants' per-super-block halves: (d, dmin) for Q4_K (4 bytes), d for Q6_K (2 bytes).
    pub super_scales: Option<usize>,
    /// Per-chunk scales: d (Q8_0, Q4_0; 2 bytes), (d, m) (Q4_1; 4 bytes), (sc, mn) (Q4_K;
    /// 2 bytes), (sc_lo, sc_hi) (Q6_K; 2 bytes).
    pub chunk_scales: Option<usize>,
    /// Bytes the planes fill, before the row is padded to [`ROW_ALIGN`].
    pub end: usize,
}

impl GpuFormat {
    /// Every format, in tag order (the tests iterate over them).
    #[cfg(feature = "lab")]
    pub const ALL: [GpuFormat; 6] = [GpuFormat::Bf16, GpuFormat::Q8_0, GpuFormat::Q4_0, GpuFormat::Q4_1, GpuFormat::Q4_K, GpuFormat::Q6_K];

    /// The tag the kernel dispatches on.
    pub fn tag(self) -> u8 {
        self as u8
    }

    /// The format of `tag`, if any.
    #[cfg(feature = "lab")]
    pub fn from_tag(tag: u8) -> Option<GpuFormat> {
        GpuFormat::ALL.get(tag as usize).copied()
    }

    /// The format that keeps `dtype`'s own quantization (floats become bf16).
    pub fn native(dtype: DType) -> Option<GpuFormat> {
        Some(match dtype {
            DType::F32 | DType::F16 | DType::BF16 => GpuFormat::Bf16,
            DType::Q8_0 => GpuFormat::Q8_0,
            DType::Q4_0 => GpuFormat::Q4_0,
            DType::Q4_1 => GpuFormat::Q4_1,
            DType::Q4_K => GpuFormat::Q4_K,
            DType::Q6_K => GpuFormat::Q6_K,
        })
    }

    /// Elements per block: a row length must be a multiple of it.
    pub fn block(self) -> usize {
        match self {
            GpuFormat::Bf16 => 1,
            GpuFormat::Q8_0 | GpuFormat::Q4_0 | GpuFormat::Q4_1 => CHUNK,
            GpuFormat::Q4_K | GpuFormat::Q6_K => SUPER_BLOCK,
        }
    }

    /// Lower-case name as ggml spells the type.
    pub fn name(self) -> &'static str {
        match self {
            GpuFormat::Bf16 => "bf16",
            GpuFormat::Q8_0 => "q8_0",
            GpuFormat::Q4_0 => "q4_0",
            GpuFormat::Q4_1 => "q4_1",
            GpuFormat::Q4_K => "q4_K",
            GpuFormat::Q6_K => "q6_K",
        }
    }

    /// Where each plane of a row of `k` elements starts; `None` unless `k` is whole blocks.
    pub fn plane_offsets(self, k: usize) -> Option<Planes> {
        if !k.is_multiple_of(self.block()) {
            return None;
        }
        let (c, s) = (k / CHUNK, k / SUPER_BLOCK);
        // Each plane's entry size divides the running offset (codes are 16 or 32 bytes
        // per chunk), so every plane is naturally aligned without padding between planes.
        let (code_bytes, high_bytes, super_bytes, chunk_bytes) = match self {
            GpuFormat::Bf16 => {
                return Some(Planes { codes: 0, high: None, super_scales: None, chunk_scales: None, end: k.checked_mul(2)? });
            }
            GpuFormat::Q8_0 => (BYTE_CODE_BYTES, 0, 0, 2),
            GpuFormat::Q4_0 => (NIBBLE_CODE_BYTES, 0, 0, 2),
            GpuFormat::Q4_1 => (NIBBLE_CODE_BYTES, 0, 0, 4),
            GpuFormat::Q4_K => (NIBBLE_CODE_BYTES, 0, 4, 2),
            GpuFormat::Q6_K => (NIBBLE_CODE_BYTES, HIGH_BITS_BYTES, 2, 2),
        };
        let high_at = c.checked_mul(code_bytes)?;
        let super_at = high_at.checked_add(c.checked_mul(high_bytes)?)?;
        let chunk_at = super_at.checked_add(s.checked_mul(super_bytes)?)?;
        let end = chunk_at.checked_add(c.checked_mul(chunk_bytes)?)?;
        Some(Planes {
            codes: 0,
            high: (high_bytes > 0).then_some(high_at),
            super_scales: (super_bytes > 0).then_some(super_at),
            chunk_scales: Some(chunk_at),
            end,
        })
    }

    /// Bytes per packed row of `k` elements: the planes rounded up to [`ROW_ALIGN`]
    /// (exactly `2k` for bf16); `None` unless `k` is whole blocks.
    pub fn row_bytes(self, k: usize) -> Option<usize> {
        let end = self.plane_offsets(k)?.end;
        if self == GpuFormat::Bf16 {
            return Some(end);
        }
        end.checked_next_multiple_of(ROW_ALIGN)
    }
}

/// The original group stored at position `stored` of chunk `chunk` (the chunk's index in
/// the packed row): the rotation that spreads the kernel's shared-memory reads of the
/// input vector over all banks.
pub fn original_group(stored: usize, chunk: usize) -> usize {
    (stored + chunk) % GROUPS
}
