//! Quantized weights on the GPU: GGUF tensors repacked, in their own quantization,
//! into the row layout the kernel's quantized matrix-vector product reads
//! (kernels/ops/qmatvec.cuh). `format` is the contract, `repack` writes it, `reader`
//! is the CPU model of the kernel's reads that the tests check against ggml.

pub mod format;
pub mod plan;
pub mod reader;
pub mod repack;
#[cfg(test)]
mod tests;

pub use format::{original_group, GpuFormat, Planes};
pub use plan::{LayerFormats, WeightPlan};
pub use reader::dequant_row;
pub use repack::{repack, repack_bf16, repack_rows_interleaved};
