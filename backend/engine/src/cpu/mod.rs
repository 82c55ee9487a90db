//! The CPU runtimes: the float32 reference forward pass (tests, fidelity anchor)
//! and the fast one over packed quantized weights with SIMD kernels and a thread
//! pool (the default).

pub mod act_quant;
pub mod isa;
pub mod kernels;
pub mod packed;
pub mod reference;
pub mod reference_runtime;
pub mod rope;
pub mod source_blocks;
