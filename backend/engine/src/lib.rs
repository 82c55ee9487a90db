//! Peregrine's engine: model loading, tokenizer, chat templates, sampling and the
//! runtimes (CPU, CUDA) behind one streaming API.
//!
//! The public surface is what a server needs: load a model ([`load_model`]), build a
//! generator for the device the [`EngineOptions`] name ([`build_generator`]), run it on
//! its own thread ([`EngineHandle`]) and stream a [`Request`]'s [`Event`]s. Everything
//! else is crate-internal; the `lab` feature (the measuring apparatus in
//! backend/bench and the integration tests) makes the internal modules public and
//! builds `lab`. A build without it (the `peregrine` binary) sees the facade alone,
//! with dead-code warnings on: code only the apparatus reaches is gated on `lab`.

// The facade must name every type its signatures use: a public function returning a
// type of a crate-private module would leave a non-lab user unable to name it.
#![cfg_attr(not(feature = "lab"), warn(unnameable_types))]

/// Declares internal modules: crate-private, public under the `lab` feature.
macro_rules! internal_modules {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        $(
            $(#[$doc])*
            #[cfg(feature = "lab")]
            pub mod $name;
            $(#[$doc])*
            #[cfg(not(feature = "lab"))]
            pub(crate) mod $name;
        )*
    };
}

/// A function of an exported type that only the tests and the apparatus call, taking
/// internal types: `pub` under `lab`, crate-private otherwise (so the facade's
/// signatures name facade types only).
macro_rules! lab_pub_fn {
    ($(#[$attr:meta])* fn $($rest:tt)*) => {
        $(#[$attr])*
        #[cfg(feature = "lab")]
        pub fn $($rest)*
        $(#[$attr])*
        #[cfg(not(feature = "lab"))]
        pub(crate) fn $($rest)*
    };
}

internal_modules!(
    admission, config, constraint, cpu, cuda, dtp, generator, gguf, handle, hf, laneformer, model, options, request, runtime, sampling, scheduler,
    speculative, stop, template, tensor, tokenizer, weights,
);
mod error;
pub mod infill;
/// The measuring apparatus (synthetic weights, teacher-forced scoring, logit
/// comparisons): backend/bench and the tests, never the `peregrine` binary.
#[cfg(feature = "lab")]
pub mod lab;

pub use constraint::{bounded_json_whitespace, Constraint, GrammarSource};
pub use error::{CudaError, Error, Result};

/// Whether this build carries the measuring apparatus (the `lab` feature). The
/// `peregrine` binary reports it, and the test script checks that the binary it serves
/// was built without.
pub const LAB: bool = cfg!(feature = "lab");
pub use generator::{Generator, TextModel};
pub use handle::{CancelHandle, EngineHandle, EngineInfo, EngineLimits, Rejected, Submission, DEFAULT_MAX_QUEUE};
pub use model::{build_generator, load_model, parse_gpus, resolve_model_path, ModelFiles, DEFAULT_MODEL_FILE};
pub use options::{
    CpuOptions, CpuRuntimeKind, CudaOptions, CudaPaths, Device, Diagnostics, EngineOptions, GpuWeights, PrefillMode, ThreadsPolicy,
};
pub use request::{ErrorCode, Event, Prompt, PromptToken, Request, DEFAULT_MAX_TOKENS, STATS_INTERVAL};
pub use speculative::{Sizing, SpeculativeMode, SpeculativeRequest, VerifyCapacity, DEFAULT_DRAFT_MAX};
pub use sampling::{Sampled, SamplingParams, TokenLogprob, MAX_TOP_LOGPROBS};
/// The ranges OpenAI allows for its logit adjustments.
pub mod sampling_limits {
    pub use crate::sampling::{MAX_LOGIT_BIAS, MAX_PENALTY};
}
pub use template::{ChatMessage, ChatTemplate};
/// The tokenizer a [`TextModel`] carries, and what its methods return.
pub use tokenizer::{Detokenizer, FimTokens, Tokenizer};

/// Activation precision of the fast CPU runtime (`--cpu-act-bits`).
pub use cpu::act_quant::ActPrecision;
/// CPU instruction-set caps the CLI accepts (`--cpu-isa`).
pub use cpu::isa::Isa;
