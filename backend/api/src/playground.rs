//! The playground API: `POST /api/generate` (answered with server-sent events) and
//! share links (`POST /api/shares`, `GET /api/shares/{id}`).
//!
//! SSE framing: each event is `event: <type>` + `data: <json of StreamEvent>`; the
//! stream ends after exactly one `done` or `error` event.

use serde::{Deserialize, Serialize};

use crate::timing::{FinishReason, Stats, Timings, Usage};

/// Default `max_tokens` of a playground request.
pub const DEFAULT_MAX_TOKENS: u32 = 256;
/// Largest `max_tokens` the playground accepts.
pub const MAX_MAX_TOKENS: u32 = 4096;
/// Largest prompt, in bytes, that a request or share may carry.
pub const MAX_PROMPT_BYTES: usize = 64 * 1024;

/// Completion (raw prompt), chat (the model's chat template around the conversation),
/// or infill (fill in the middle: the prompt is the text before the cursor, `suffix`
/// the text after it; models with FIM tokens only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    #[default]
    Complete,
    Chat,
    Infill,
}

/// Most earlier turns one conversation may carry.
pub const MAX_TURNS: usize = 64;

/// One finished turn of a chat conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatTurn {
    pub user: String,
    pub assistant: String,
    /// The turn's figures, when it ran here (shown beside it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timings: Option<Timings>,
}

/// What surrounds the prompt in the modes that have more than one text: the earlier
/// turns and system prompt of a chat, the text after the cursor of an infill.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Surroundings {
    /// Chat: the system prompt (empty: none).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub system: String,
    /// Chat: the turns before this one, oldest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<ChatTurn>,
    /// Infill: the text after the insertion point.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub suffix: String,
}

impl Surroundings {
    /// Bytes of text these carry (they count against [`MAX_PROMPT_BYTES`] with the prompt).
    pub fn text_bytes(&self) -> usize {
        self.system.len() + self.suffix.len() + self.history.iter().map(|t| t.user.len() + t.assistant.len()).sum::<usize>()
    }

    /// The first field that `mode` does not use, with what to do instead.
    pub fn misplaced(&self, mode: Mode) -> Option<(&'static str, String)> {
        if mode != Mode::Chat && !self.system.is_empty() {
            return Some(("system", "a system prompt needs mode \"chat\"".into()));
        }
        if mode != Mode::Chat && !self.history.is_empty() {
            return Some(("history", "earlier turns need mode \"chat\"".into()));
        }
        if mode != Mode::Infill && !self.suffix.is_empty() {
            return Some(("suffix", "a suffix needs mode \"infill\"".into()));
        }
        if self.history.len() > MAX_TURNS {
            return Some(("history", format!("a conversation may carry at most {MAX_TURNS} earlier turns")));
        }
        None
    }
}

/// Sampling settings, shared by requests and shares.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GenerationParams {
    pub max_tokens: u32,
    /// 0 = greedy.
    pub temperature: f32,
    pub top_p: f32,
    /// 0 = no limit.
    pub top_k: u32,
    /// `None` picks a random seed.
    pub seed: Option<u64>,
    pub stop: Vec<String>,
    pub ignore_eos: bool,
}

impl Default for GenerationParams {
    fn default() -> Self {
        GenerationParams {
            max_tokens: DEFAULT_MAX_TOKENS,
            temperature: 0.0,
            top_p: 1.0,
            top_k: 0,
            seed: None,
            stop: Vec::new(),
            ignore_eos: false,
        }
    }
}

impl GenerationParams {
    /// The first problem with these settings, as a message for the user.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_tokens == 0 || self.max_tokens > MAX_MAX_TOKENS {
            return Err(format!("max_tokens must be between 1 and {MAX_MAX_TOKENS}"));
        }
        if !(self.temperature.is_finite() && (0.0..=2.0).contains(&self.temperature)) {
            return Err("temperature must be between 0 and 2".into());
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err("top_p must be greater than 0 and at most 1".into());
        }
        Ok(())
    }
}

/// Body of `POST /api/generate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerateRequest {
    pub prompt: String,
    #[serde(default)]
    pub mode: Mode,
    #[serde(flatten)]
    pub params: GenerationParams,
    /// Reuse the cached prefix of an earlier request (`None`: yes, llama.cpp's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_prompt: Option<bool>,
    #[serde(flatten)]
    pub speculative: crate::speculative::SpeculativeParams,
    /// A JSON schema the answer must follow (llama.cpp's field name): the output is
    /// constrained to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_schema: Option<serde_json::Value>,
    #[serde(flatten)]
    pub around: Surroundings,
}

/// One server-sent event of `POST /api/generate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    /// Waiting behind `position` other requests (0 = next).
    Queued { position: u32 },
    /// The engine took the request.
    Started { prompt_tokens: u32 },
    /// New output text (one or more tokens).
    Token { text: String, tokens: u32 },
    /// Live figures, at least every 250 ms while streaming.
    Stats(Stats),
    /// Finished (terminal).
    Done { finish_reason: FinishReason, usage: Usage, timings: Timings },
    /// Failed (terminal). `retry_after_ms` is set when the server is busy.
    Error { code: String, message: String, retry_after_ms: Option<u64> },
}

impl StreamEvent {
    /// The SSE `event:` name of this payload.
    pub fn name(&self) -> &'static str {
        match self {
            StreamEvent::Queued { .. } => "queued",
            StreamEvent::Started { .. } => "started",
            StreamEvent::Token { .. } => "token",
            StreamEvent::Stats(_) => "stats",
            StreamEvent::Done { .. } => "done",
            StreamEvent::Error { .. } => "error",
        }
    }
}

/// A finished run attached to a share, so a visitor sees what the sharer saw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SharedRun {
    pub output: String,
    pub finish_reason: FinishReason,
    pub timings: Timings,
    /// e.g. "cpu" or "cuda".
    pub backend: String,
    /// e.g. "1× H200 · Qwen2.5-Coder-1.5B".
    pub device: String,
}

/// Body of `POST /api/shares`, and what `GET /api/shares/{id}` returns inside [`Share`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShareRequest {
    pub prompt: String,
    #[serde(default)]
    pub mode: Mode,
    #[serde(default)]
    pub params: GenerationParams,
    #[serde(default)]
    pub run: Option<SharedRun>,
    /// The conversation before the prompt, or the infill's suffix.
    #[serde(flatten)]
    pub around: Surroundings,
}

/// Answer of `POST /api/shares` (201).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareCreated {
    pub id: String,
    /// Path of the playground page that restores the share, e.g. `/s/{id}`.
    pub url: String,
}

/// Answer of `GET /api/shares/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Share {
    pub id: String,
    /// Seconds since the Unix epoch.
    pub created_at: u64,
    #[serde(flatten)]
    pub share: ShareRequest,
}

/// JSON body of every non-streaming error of the playground API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiError {
    pub code: String,
    pub message: String,
}
