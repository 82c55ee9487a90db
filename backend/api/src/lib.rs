//! Wire types shared by the server and the playground: every JSON body and SSE
//! payload is defined here once, so both sides agree by construction.

pub mod playground;
pub mod timing;

pub use timing::{FinishReason, Stats, Timings, Usage};

use serde::{Deserialize, Serialize};

/// Body of `GET /health`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Health {
    /// Always `"ok"` while the server answers.
    pub status: String,
    /// The server's crate version.
    pub version: String,
}

/// Body of `GET /api/info`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Info {
    /// Model name, e.g. "SmolLM2 135M Instruct".
    pub model: String,
    /// "llama" or "qwen2".
    pub architecture: String,
    pub parameters: u64,
    pub context_length: u32,
    /// "cpu" or "cuda".
    pub backend: String,
    /// One entry per device in use (GPU names, or the CPU model).
    pub devices: Vec<String>,
    /// Requests that may wait in the queue.
    pub max_queue: u32,
}
