//! The measuring apparatus: synthetic weights, teacher-forced scoring, logit
//! comparisons, runs collected whole, kernel builds by name, seeded randomness, the
//! memory read loop, HF configs of the presets and the speculative-decoding workload. Only the `lab` feature builds it
//! (backend/bench and the tests); the `peregrine` binary never carries it.

pub mod hf_export;
pub mod logits;
pub mod read_bandwidth;
pub mod rng;
pub mod runs;
pub mod synthetic;
pub mod teacher_forced;
pub mod variants;
pub mod workload;
