//! The interface every runtime (CPU reference, fast CPU, CUDA) implements: run a
//! prompt, then decode token by token until a stop token, max tokens or the caller
//! says stop. Sampling and the stop-token check belong to the runtime because the
//! CUDA runtime does both on the device.

use crate::config::ModelConfig;
use crate::error::Result;
use crate::sampling::{Sampled, SamplingParams};

/// What one generation run needs.
#[derive(Debug, Clone)]
pub struct DecodeJob<'a> {
    /// Prompt token ids (at least one).
    pub prompt: &'a [u32],
    /// Most tokens to generate.
    pub max_tokens: usize,
    pub sampling: &'a SamplingParams,
    /// Token ids that end generation (not emitted); empty with `ignore_eos`.
    pub stop_tokens: &'a [u32],
    /// How many alternatives to report per token (0 = none).
    pub top_logprobs: usize,
}

/// The caller's answer after each token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Stop,
}

/// How a run ended, from the runtime's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// A stop token was sampled.
    StopToken,
    /// `max_tokens` were generated.
    Length,
    /// The callback returned [`Flow::Stop`].
    Stopped,
}

/// Which hardware a runtime runs on (for `/api/info` and the page's badge).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendInfo {
    /// `cpu` or `cuda`.
    pub kind: String,
    /// One name per device in use.
    pub devices: Vec<String>,
}

/// A model ready to generate.
pub trait Runtime: Send {
    /// The model's shape.
    fn config(&self) -> &ModelConfig;
    /// The hardware in use.
    fn backend(&self) -> BackendInfo;
    /// Runs the prompt, then samples up to `max_tokens`, calling `on_token` for each
    /// generated token (stop tokens excluded).
    fn generate(&mut self, job: &DecodeJob<'_>, on_token: &mut dyn FnMut(&Sampled) -> Flow) -> Result<RunEnd>;
    /// Logits of every position of `tokens` (prompt scoring).
    fn score(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>>;
}

/// Name of this machine's CPU, from /proc/cpuinfo when readable.
pub fn cpu_name() -> String {
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("model name")).and_then(|l| l.split(':').nth(1)).map(|m| m.trim().to_string()))
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    format!("{model} ({threads} threads)")
}
