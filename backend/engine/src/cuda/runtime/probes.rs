//! Measuring-only state ([`Probes`]): the logits of every step, the phase trace and the
//! batched prefill's GPU time split, kept for the `lab` feature's tests and benchmarks.
//! Without `lab` the probes are a unit struct that keeps nothing, and the runtime has
//! none of the methods that read them.

use crate::cuda::run_stats::PrefillSplit;
use crate::cuda::trace::RawTrace;

#[cfg(feature = "lab")]
use super::CudaRuntime;

/// What the measuring apparatus asked to record, and what the last run recorded.
#[cfg(feature = "lab")]
#[derive(Default)]
pub(super) struct Probes {
    /// Record every LM-head run's raw logits (`set_debug_logits`).
    debug_logits: bool,
    last_logits: Vec<Vec<f32>>,
    /// Record per-op GPU times of the next prefills (`set_prefill_profile`).
    prefill_profile: bool,
    last_prefill_split: Option<PrefillSplit>,
    last_trace: Option<RawTrace>,
}

#[cfg(feature = "lab")]
impl Probes {
    /// Nothing asked for, nothing recorded.
    pub(super) fn new() -> Probes {
        Probes::default()
    }

    /// Rows of logits a run of `max_tokens` records.
    pub(super) fn debug_rows(&self, max_tokens: usize) -> usize {
        if self.debug_logits {
            max_tokens
        } else {
            0
        }
    }

    /// Whether batched prefills record an event pair per op.
    pub(super) fn prefill_profile(&self) -> bool {
        self.prefill_profile
    }

    pub(super) fn keep_logits(&mut self, logits: Vec<Vec<f32>>) {
        self.last_logits = logits;
    }

    pub(super) fn keep_prefill_split(&mut self, split: PrefillSplit) {
        self.last_prefill_split = Some(split);
    }

    pub(super) fn keep_trace(&mut self, trace: Option<RawTrace>) {
        self.last_trace = trace;
    }
}

/// Nothing is recorded in a build without `lab`.
#[cfg(not(feature = "lab"))]
pub(super) struct Probes;

#[cfg(not(feature = "lab"))]
impl Probes {
    pub(super) fn new() -> Probes {
        Probes
    }

    pub(super) fn debug_rows(&self, _max_tokens: usize) -> usize {
        0
    }

    pub(super) fn prefill_profile(&self) -> bool {
        false
    }

    pub(super) fn keep_logits(&mut self, _logits: Vec<Vec<f32>>) {}

    pub(super) fn keep_prefill_split(&mut self, _split: PrefillSplit) {}

    pub(super) fn keep_trace(&mut self, _trace: Option<RawTrace>) {}
}

/// The diagnostic hooks of the measuring apparatus.
#[cfg(feature = "lab")]
impl CudaRuntime {
    /// Records per-op GPU times of each batched prefill (an event pair per op; costs a
    /// little host time per op, so it is off by default).
    pub fn set_prefill_profile(&mut self, on: bool) {
        self.probes.prefill_profile = on;
    }

    /// GPU time by kind of the last profiled batched prefill.
    pub fn last_prefill_split(&self) -> Option<&PrefillSplit> {
        self.probes.last_prefill_split.as_ref()
    }

    /// Records every LM-head run's raw logits (tests compare them with the CPU).
    pub fn set_debug_logits(&mut self, on: bool) {
        self.probes.debug_logits = on;
    }

    /// Raw logits of each step of the last run (with [`set_debug_logits`](Self::set_debug_logits)).
    pub fn debug_logits(&self) -> &[Vec<f32>] {
        &self.probes.last_logits
    }

    /// The phase trace of the last run (with `KernelOptions::trace`; rank 0's blocks),
    /// or None when tracing is off or the run ended before the traced step.
    pub fn last_trace(&self) -> Option<&RawTrace> {
        self.probes.last_trace.as_ref()
    }
}
