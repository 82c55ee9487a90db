//! What a client asks of the engine and what it hears back.

use peregrine_api::{FinishReason, Stats, Timings, Usage};

use crate::constraint::Constraint;
use crate::sampling::{Sampled, SamplingParams};
use crate::speculative::SpeculativeRequest;
use crate::template::ChatMessage;

/// Default number of tokens to generate when a request does not say.
pub const DEFAULT_MAX_TOKENS: usize = 256;
/// Live stats are sent at least this often while a request streams: by the engine
/// with the tokens, and by the server's timer when tokens are slower (server jobs.rs).
pub const STATS_INTERVAL: std::time::Duration = std::time::Duration::from_millis(250);

/// The input text or ids of a request.
#[derive(Debug, Clone)]
pub enum Prompt {
    /// Completion mode: the raw text, no template.
    Text(String),
    /// Chat mode: rendered with the model's chat template and a generation prompt.
    Chat(Vec<ChatMessage>),
    /// Chat mode with tools the chat template lists itself (for templates whose
    /// [`crate::ChatTemplate::writes_tool_calls`]; OpenAI's tool objects).
    ChatWithTools { messages: Vec<ChatMessage>, tools: Vec<serde_json::Value> },
    /// Pre-tokenized ids (OpenAI `prompt` as an array of ids).
    Tokens(Vec<u32>),
}

/// One generation request.
#[derive(Debug, Clone)]
pub struct Request {
    pub prompt: Prompt,
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Strings that end generation; never emitted.
    pub stop: Vec<String>,
    /// Keep going past EOS/EOT.
    pub ignore_eos: bool,
    /// Alternatives to report per generated token (0 = none).
    pub top_logprobs: usize,
    /// Also report the prompt tokens' log-probabilities (OpenAI `echo` scoring).
    pub echo_logprobs: bool,
    /// Reuse the cached keys and values of the prefix this prompt shares with an
    /// earlier request (llama.cpp's `cache_prompt`, on by default); same output.
    pub cache_prompt: bool,
    /// Drafting by prompt lookup: on or off and the most drafted tokens per step
    /// (unset: the engine's defaults); the output is the same either way.
    pub speculative: SpeculativeRequest,
    /// The grammar the output must follow (compiled by [`crate::TextModel::constraint`]);
    /// only runtimes that sample on the host honour it, others refuse the request.
    pub constraint: Option<Constraint>,
    /// Who sent it (the server's client address): queued requests of several clients
    /// take turns instead of one client's burst going first. `None`: one shared turn.
    pub client: Option<std::net::IpAddr>,
}

impl Request {
    /// A request with default settings for `prompt`.
    pub fn new(prompt: Prompt) -> Request {
        Request {
            prompt,
            max_tokens: DEFAULT_MAX_TOKENS,
            sampling: SamplingParams::default(),
            stop: Vec::new(),
            ignore_eos: false,
            top_logprobs: 0,
            echo_logprobs: false,
            cache_prompt: true,
            speculative: SpeculativeRequest::default(),
            constraint: None,
            client: None,
        }
    }
}

/// A prompt token with its log-probability given the tokens before it.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptToken {
    pub id: u32,
    pub text: String,
    /// `None` for the first token (nothing conditions it).
    pub scored: Option<Sampled>,
}

/// What the engine reports, in order: `Queued`* → `Started` → (`PromptLogprobs`)
/// → (`Token` | `Stats`)* → `Done`, or `Error` at any point (terminal).
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Waiting; `position` requests are ahead (0 = next).
    Queued { position: usize },
    /// The engine took the request; the prompt is `prompt_tokens` long.
    Started { prompt_tokens: usize },
    /// The prompt's own tokens scored (only with `echo_logprobs`).
    PromptLogprobs(Vec<PromptToken>),
    /// One generated token and the text it completes (may be empty while a
    /// multi-byte character or a possible stop string is held back).
    Token { id: u32, text: String, sampled: Sampled },
    /// Text held back until the end (a partial stop string that never completed).
    Text(String),
    /// Live figures.
    Stats(Stats),
    /// Finished; the last event.
    Done { finish_reason: FinishReason, usage: Usage, timings: Timings },
    /// Failed; the last event.
    Error { code: ErrorCode, message: String },
}

/// Broad error classes, for mapping to HTTP statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// The request itself is wrong (400).
    InvalidRequest,
    /// Too long for the context (400 / 413).
    ContextOverflow,
    /// The engine failed (500).
    Internal,
    /// The engine stopped taking work (shutting down) before the request ran (503).
    Unavailable,
    /// The server gave up waiting for the request (its time limit passed).
    Timeout,
}

impl ErrorCode {
    /// Stable snake_case name used on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::ContextOverflow => "context_overflow",
            ErrorCode::Internal => "internal_error",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Timeout => "timeout",
        }
    }
}

impl From<&crate::Error> for ErrorCode {
    fn from(e: &crate::Error) -> Self {
        match e {
            crate::Error::InvalidRequest(_) | crate::Error::Grammar(_) | crate::Error::Unsatisfiable(_) => ErrorCode::InvalidRequest,
            crate::Error::ContextOverflow { .. } => ErrorCode::ContextOverflow,
            crate::Error::Template(_) | crate::Error::TokenOutOfRange { .. } => ErrorCode::InvalidRequest,
            crate::Error::Unavailable(_) => ErrorCode::Unavailable,
            _ => ErrorCode::Internal,
        }
    }
}
