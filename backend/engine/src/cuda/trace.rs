//! The persistent kernel's phase trace (`KernelOptions::trace`, kernels/ops/trace.cuh):
//! the layout of its record, which the kernel receives as `-D` defines (layout/), and
//! the raw stamps a traced run reads back. The figures `gpu_check trace` prints from
//! them are the measuring apparatus's (analysis.rs, built with `lab` only).

/// u64 words per stamp: (global ns, SM cycles).
pub const WORDS_PER_STAMP: usize = 2;
/// u64 words per event in the kernel's record: three stamps (PG_TRACE_WORDS).
pub const WORDS_PER_EVENT: usize = 3 * WORDS_PER_STAMP;
/// The per-layer phases, in the kernel's order (its `Phase` enum takes PG_PH_<name>).
pub const LAYER_PHASES: [&str; 5] = ["QKV", "ATTN", "O", "GATE_UP", "DOWN"];
/// Events after the per-layer ones (the kernel's `TraceTail` takes PG_EV_<name>).
pub const TAIL_EVENTS: [&str; 3] = ["LM", "SAMPLER", "STEP"];
const PHASES: usize = LAYER_PHASES.len();
/// Stamp positions inside an event (the kernel's TRACE_WAIT_END / TRACE_ARRIVE words).
/// The kernel writes the wait's start at word 0 without a define; only the analysis reads it.
#[cfg(feature = "lab")]
pub const WAIT_START: usize = 0;
pub const WAIT_END: usize = 1;
pub const ARRIVE: usize = 2;

/// The stamps of one run as read back from the device: `[blocks][events][WORDS_PER_EVENT]`.
#[derive(Debug, Clone, PartialEq)]
pub struct RawTrace {
    pub blocks: usize,
    pub layers: usize,
    /// The traced step.
    pub step: usize,
    pub words: Vec<u64>,
}

/// Events per block for `layers` layers (decode.cu `TRACE_EVENTS`).
pub fn events_for(layers: usize) -> usize {
    layers * PHASES + TAIL_EVENTS.len()
}

#[cfg(feature = "lab")]
mod analysis;
#[cfg(feature = "lab")]
pub use analysis::{
    calibrate, event_figures, event_name, step_figures, step_line, summarize, table, EventFigures, PhaseRow, StepFigures, Timeline,
};
