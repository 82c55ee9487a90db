//! The CPU runtime: the float32 reference forward pass and its helpers.

pub mod reference;
pub mod reference_runtime;
pub mod rope;
