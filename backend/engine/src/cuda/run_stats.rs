//! Timings of one `generate` run of the CUDA runtime and of its batched prefill: plain
//! data, the same with or without the `cuda` feature.

use std::time::Duration;

/// Timings of the last `generate` run.
#[derive(Debug, Clone, Default)]
pub struct RunStats {
    /// Prompt tokens run through the kernel (the tests and benchmarks read it).
    #[cfg(feature = "lab")]
    pub prompt_tokens: usize,
    /// Tokens published by the kernel (including any generated after a host stop).
    pub published: usize,
    /// GPU global-timer stamp (ns) of each published token.
    pub token_times_ns: Vec<u64>,
    /// Host clock: start of the run (before the batched prefill is enqueued) to the
    /// first token seen, and to the kernel's end.
    pub first_token: Option<Duration>,
    pub total: Duration,
    /// Prompt positions run by the batched prefill before the persistent kernel (0: the
    /// kernel ran every prompt token; the tests read it), and their GPU time (CUDA events).
    #[cfg(feature = "lab")]
    pub prefill_positions: usize,
    pub prefill_gpu_ms: Option<f64>,
}

impl RunStats {
    /// Decode rate from the device's own timestamps: tokens after the first over the
    /// time between the first and the last.
    pub fn decode_tokens_per_s(&self) -> Option<f64> {
        let (first, last) = (self.token_times_ns.first()?, self.token_times_ns.last()?);
        let n = self.token_times_ns.len();
        (n > 1 && last > first).then(|| (n - 1) as f64 / ((last - first) as f64 * 1e-9))
    }
}

/// GPU milliseconds of the last profiled batched prefill, by kind of work.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PrefillSplit {
    /// cuBLAS GEMMs (q/k/v, o, gate/up, down).
    pub gemm_ms: f64,
    /// Causal attention over the cache.
    pub attention_ms: f64,
    /// Embedding, RMSNorm, bias + RoPE + KV write, SwiGLU.
    pub rows_ms: f64,
}
