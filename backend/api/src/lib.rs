//! Wire types shared by the server and the playground: every JSON body and SSE
//! payload is defined here once, so both sides agree by construction.

pub mod playground;
pub mod speculative;
pub mod timing;

pub use timing::{FinishReason, Stats, Timings, Usage};

use serde::{Deserialize, Serialize};

/// Body of `GET /health`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Health {
    /// `"ok"` when requests can be served, `"loading"` (HTTP 503) while the model loads.
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
    /// The model has fill-in-the-middle tokens (`/infill`, the playground's infill mode).
    #[serde(default)]
    pub infill: bool,
}

/// The server's other limits: `GET /api/info` also carries them under `"limits"`
/// (a separate type so existing `Info` literals keep compiling).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct Limits {
    /// Concurrent requests one client IP may have in flight (0 = no limit).
    pub max_per_client: u32,
    /// Largest playground prompt or shared prompt, in bytes.
    pub max_prompt_bytes: u64,
    /// Largest `max_tokens` of a playground request.
    pub max_tokens: u32,
    /// Largest request body, in bytes.
    pub max_body_bytes: u64,
    /// A request (queue wait included) is cancelled after this many seconds (0 = never).
    pub request_timeout_s: u64,
    /// Requests the engine decodes together (continuous batching; 1 = one at a time).
    #[serde(default)]
    pub max_batch: u32,
}
