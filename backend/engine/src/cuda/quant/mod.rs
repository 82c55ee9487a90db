//! Quantized weights on the GPU: GGUF tensors repacked, in their own quantization,
//! into the row layout the kernel's quantized matrix-vector product reads
//! (kernels/ops/qmatvec.cuh). `format` is the contract, `repack` writes it, `reader`
//! is the CPU model of the kernel's reads that the tests check against ggml.

pub mod format;
pub mod plan;
/// The CPU model of the kernel's reads: the tests', never the product's.
#[cfg(feature = "lab")]
pub mod reader;
pub mod repack;
#[cfg(test)]
mod tests;

pub use format::GpuFormat;
pub use plan::WeightPlan;
pub use repack::{repack, repack_rows_interleaved};
// Names the tests reach the layout contract and the plan by.
#[cfg(feature = "lab")]
pub use format::{original_group, Planes};
#[cfg(feature = "lab")]
pub use plan::LayerFormats;
#[cfg(feature = "lab")]
pub use reader::dequant_row;
#[cfg(feature = "lab")]
pub use repack::repack_bf16;
