//! Peregrine's engine: model loading, tokenizer, chat templates, sampling and the
//! runtimes (CPU, CUDA) behind one streaming API.

pub mod config;
pub mod error;
pub mod gguf;
pub mod hf;
pub mod synthetic;
pub mod template;
pub mod tensor;
pub mod tokenizer;
pub mod weights;

pub use error::{Error, Result};
