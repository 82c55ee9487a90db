//! Peregrine's engine: model loading, tokenizer, chat templates, sampling and the
//! runtimes (CPU, CUDA) behind one streaming API.

pub mod config;
pub mod cpu;
pub mod cuda;
pub mod dtp;
pub mod error;
pub mod generator;
pub mod gguf;
pub mod handle;
pub mod hf;
pub mod model;
pub mod request;
pub mod rng;
pub mod runtime;
pub mod sampling;
pub mod stop;
pub mod synthetic;
pub mod template;
pub mod tensor;
pub mod tokenizer;
pub mod weights;

pub use error::{Error, Result};
