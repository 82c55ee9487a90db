//! The words the kernel and the host share in host-mapped memory: one token record
//! of the ring, the control block before it, and the run's end reasons.

/// Word offsets of one token record in the host ring.
pub mod rec {
    use crate::sampling::MAX_TOP_LOGPROBS;
    pub const ID: usize = 0;
    /// f32 bits: log-softmax of the raw logits at the chosen id.
    pub const LOGPROB: usize = 1;
    pub const NTOP: usize = 2;
    /// GPU global timer (ns) when the token was published, low and high word.
    pub const TIME_LO: usize = 3;
    pub const TIME_HI: usize = 4;
    pub const TOP_IDS: usize = 8;
    pub const TOP_LPS: usize = TOP_IDS + MAX_TOP_LOGPROBS;
    pub const WORDS: usize = TOP_LPS + MAX_TOP_LOGPROBS;
}

/// Word offsets of the host control block (before the ring in the same mapping).
pub mod ctl {
    /// Device → host: records published so far.
    pub const PUBLISHED: usize = 0;
    /// Device → host: 1 once the run ended (after REASON).
    pub const DONE: usize = 1;
    /// Device → host: one of `end::*`.
    pub const REASON: usize = 2;
    /// Host → device: non-zero asks the kernel to stop after the current token.
    pub const STOP: usize = 3;
    /// Host → device: records the host has read (ring back-pressure).
    pub const CONSUMED: usize = 4;
    /// Host → device (`grammar_mask`): 1 + the index of the generated token whose
    /// allowed-token bitmap is in the `Mask` buffer.
    pub const MASK_SEQ: usize = 5;
    /// Words reserved for the control block (a 32-byte line).
    pub const WORDS: usize = 8;
}

/// Why the kernel ended a run (`ctl::REASON`).
pub mod end {
    pub const LENGTH: u32 = 1;
    pub const STOP_TOKEN: u32 = 2;
    pub const STOPPED: u32 = 3;
}
