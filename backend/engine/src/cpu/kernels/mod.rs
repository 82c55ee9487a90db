//! Packed weights × a batch of activations: one tile of 16 rows × up to
//! [`MAX_TILE`] tokens at a time, so each unpacked weight register feeds several
//! tokens (prompt processing as matrix-matrix; decode is the one-token case).
//!
//! Every instruction set computes, per row and token, the same exact integer dot per
//! sub-block (Int16 activations: `128·dot(hi) + dot(lo)`, still exact in i32) and
//! the same float operations in the same order:
//! `acc_d = fma(isum, d·d_act, acc_d)`, `acc_m = fma(m, s_act, acc_m)`, result
//! `acc_d + acc_m` (float weights: four interleaved FMA chains over columns, summed
//! pairwise). So SIMD and portable outputs are equal bit for bit.

use std::ops::Range;

use crate::cpu::act_quant::{ActPrecision, TokenActs};
use crate::cpu::isa::Isa;
use crate::cpu::packed::{quant_format, FloatType, Format, PackedMatrix, QuantFormat};
use crate::tensor::DType;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod portable;

/// Most tokens per tile (accumulators for 4 tokens fit the register file).
pub const MAX_TILE: usize = 4;
/// Independent FMA chains per row in the float kernels (hides FMA latency).
pub const FLOAT_CHAINS: usize = 4;

/// A quantized layout known at compile time (one kernel instance per source type).
pub trait QKind {
    const FMT: QuantFormat;
}

/// A float weight type known at compile time.
pub trait FKind {
    const TYPE: FloatType;
}

macro_rules! qkind {
    ($name:ident, $dtype:expr) => {
        #[doc = concat!("Kernel instance for ", stringify!($dtype), ".")]
        pub struct $name;
        impl QKind for $name {
            const FMT: QuantFormat = quant_format($dtype).unwrap();
        }
    };
}
qkind!(KQ4_0, DType::Q4_0);
qkind!(KQ4_1, DType::Q4_1);
qkind!(KQ8_0, DType::Q8_0);
qkind!(KQ4K, DType::Q4_K);
qkind!(KQ6K, DType::Q6_K);

macro_rules! fkind {
    ($name:ident, $ty:expr) => {
        #[doc = concat!("Kernel instance for ", stringify!($ty), " weights.")]
        pub struct $name;
        impl FKind for $name {
            const TYPE: FloatType = $ty;
        }
    };
}
fkind!(KF32, FloatType::F32);
fkind!(KF16, FloatType::F16);
fkind!(KBF16, FloatType::BF16);

/// The activations and outputs of one matmul over a batch of tokens.
#[derive(Clone, Copy)]
pub struct MatmulIo<'a> {
    /// Quantized activations per token (read when the weights are quantized).
    pub quant: &'a [TokenActs],
    /// Their precision (Int16 tokens have a low plane).
    pub precision: ActPrecision,
    /// f32 activations per token, `cols` each (read when the weights are float).
    pub float: &'a [*const f32],
    /// Start of each token's output row, with room for `padded_rows` floats.
    pub out: &'a [*mut f32],
}

/// Computes the rows of `groups` of `w · x` for every token of `io`.
///
/// # Safety
/// `isa` is supported by this CPU; every activation pointer covers `w.cols` values;
/// every output row has `w.padded_rows()` floats that no other thread touches
/// (within `groups`) until a barrier.
pub unsafe fn matmul(isa: Isa, w: &PackedMatrix, groups: Range<usize>, io: MatmulIo<'_>) {
    assert!(groups.end <= w.groups());
    match w.format {
        Format::Quant(_) => {
            assert_eq!(io.quant.len(), io.out.len());
            // SAFETY: forwarded contract.
            unsafe {
                match w.source {
                    DType::Q4_0 => quant::<KQ4_0>(isa, w, groups, io),
                    DType::Q4_1 => quant::<KQ4_1>(isa, w, groups, io),
                    DType::Q8_0 => quant::<KQ8_0>(isa, w, groups, io),
                    DType::Q4_K => quant::<KQ4K>(isa, w, groups, io),
                    DType::Q6_K => quant::<KQ6K>(isa, w, groups, io),
                    DType::F32 | DType::F16 | DType::BF16 => unreachable!("float source with a quantized format"),
                }
            }
        }
        Format::Float(f) => {
            assert_eq!(io.float.len(), io.out.len());
            // SAFETY: forwarded contract.
            unsafe {
                match f {
                    FloatType::F32 => float::<KF32>(isa, w, groups, io),
                    FloatType::F16 => float::<KF16>(isa, w, groups, io),
                    FloatType::BF16 => float::<KBF16>(isa, w, groups, io),
                }
            }
        }
    }
}

unsafe fn quant<K: QKind>(isa: Isa, w: &PackedMatrix, groups: Range<usize>, io: MatmulIo<'_>) {
    let dual = io.precision == ActPrecision::Int16;
    assert!(!dual || io.quant.iter().all(|a| !a.lo.is_null()), "Int16 activations without a low plane");
    // SAFETY: forwarded contract of `matmul`.
    unsafe {
        match (isa, dual) {
            #[cfg(target_arch = "x86_64")]
            (Isa::Avx512Vnni, false) => avx512::quant_matmul::<K, false>(w, groups, io.quant, io.out),
            #[cfg(target_arch = "x86_64")]
            (Isa::Avx512Vnni, true) => avx512::quant_matmul::<K, true>(w, groups, io.quant, io.out),
            #[cfg(target_arch = "x86_64")]
            (Isa::Avx2, false) => avx2::quant_matmul::<K, false>(w, groups, io.quant, io.out),
            #[cfg(target_arch = "x86_64")]
            (Isa::Avx2, true) => avx2::quant_matmul::<K, true>(w, groups, io.quant, io.out),
            (_, false) => portable::quant_matmul::<K, false>(w, groups, io.quant, io.out),
            (_, true) => portable::quant_matmul::<K, true>(w, groups, io.quant, io.out),
        }
    }
}

unsafe fn float<K: FKind>(isa: Isa, w: &PackedMatrix, groups: Range<usize>, io: MatmulIo<'_>) {
    // SAFETY: forwarded contract of `matmul`.
    unsafe {
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Vnni => avx512::float_matmul::<K>(w, groups, io.float, io.out),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => avx2::float_matmul::<K>(w, groups, io.float, io.out),
            _ => portable::float_matmul::<K>(w, groups, io.float, io.out),
        }
    }
}
