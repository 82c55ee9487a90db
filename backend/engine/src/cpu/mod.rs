//! The CPU runtimes: the fast one (packed quantized weights, SIMD kernels, a
//! thread team, batched prompts; the default) and the float32 reference forward
//! pass (tests, fidelity anchor). `select` picks one.

pub mod act_quant;
pub mod attend;
pub mod fast_model;
pub mod fast_runtime;
pub mod forward;
pub mod isa;
pub mod kernels;
pub mod kv_cache;
pub mod kv_half;
pub mod lanes;
pub mod packed;
pub mod pool;
pub mod reference;
pub mod reference_runtime;
pub mod rope;
pub mod select;
pub mod shared;
pub mod source_blocks;
pub mod vecops;
pub mod workspace;

pub use select::build_cpu_runtime;
