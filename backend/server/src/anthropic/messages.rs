//! `POST /v1/messages`: Anthropic's Messages API for text: `messages` (user and
//! assistant turns, content as a string or `text` blocks), `system` (a string or
//! `text` blocks), `max_tokens` (required, as Anthropic requires it), `temperature`
//! (0–1), `top_p`, `top_k`, `stop_sequences`, `stream`; `metadata` and
//! `cache_control` (top-level and on blocks) only label (prompt reuse is automatic here);
//! tools and tool results (`tool_use.rs`). Anything else that would change the answer
//! (images, thinking) is a 400 naming the field.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use peregrine_engine::ChatMessage;
use serde::Deserialize;
use serde_json::Value;

use super::error::AnthropicError;
use super::events::MessageAnswer;
use super::tool_use;
use crate::app::AppState;
use crate::error::{Error, Result};
use crate::extract::JsonBody;
use crate::ids::item_id;
use crate::jobs::{self, JobSpec};
use crate::openai::params::CommonParams;
use crate::openai::steps::Steps;
use crate::openai::tools::Tools;
use crate::prompt;
use crate::request_context::Caller;

/// Anthropic's largest temperature.
const MAX_TEMPERATURE: f32 = 1.0;

/// Body of `POST /v1/messages`.
#[derive(Debug, Deserialize)]
pub struct MessagesRequest {
    pub model: Option<String>,
    pub messages: Vec<Value>,
    pub system: Option<Value>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<u32>,
    pub stop_sequences: Option<Vec<String>>,
    pub stream: Option<bool>,
    /// `[{name, description, input_schema}]` (`tool_use.rs`).
    pub tools: Option<Value>,
    pub tool_choice: Option<Value>,
}

impl crate::fields::Fields for MessagesRequest {
    const ROUTE: &'static str = "/v1/messages";
    const ACCEPTED: &'static [&'static [&'static str]] = &[
        &["model", "messages", "system", "max_tokens", "temperature", "top_p", "top_k", "stop_sequences", "stream", "tools", "tool_choice"],
        &["cache_control"],
        crate::fields::LABELS,
    ];
}

/// The text of `content`: a string or a list of `text` blocks.
fn blocks_text(content: &Value, at: &str) -> Result<String> {
    match content {
        Value::String(s) => Ok(s.clone()),
        Value::Array(blocks) => blocks
            .iter()
            .enumerate()
            .map(|(j, block)| {
                let at = format!("{at}[{j}]");
                let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
                if kind != "text" {
                    return Err(Error::bad(
                        &format!("{at}.type"),
                        format!("{at}.type: `{}` blocks are not supported: only text blocks are", crate::error::shorten(kind)),
                    ));
                }
                let keys = block.as_object().into_iter().flat_map(|o| o.keys());
                if let Some(key) = keys.clone().find(|k| !matches!(k.as_str(), "type" | "text" | "cache_control" | "citations")) {
                    return Err(Error::bad(&format!("{at}.{key}"), format!("{at}.{key}: Extra inputs are not permitted")));
                }
                block
                    .get("text")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .ok_or_else(|| Error::bad(&format!("{at}.text"), format!("{at}.text: Field required")))
            })
            .collect::<Result<Vec<_>>>()
            .map(|t| t.concat()),
        _ => Err(Error::bad(at, format!("{at}: must be a string or a list of content blocks"))),
    }
}

/// `system`, then the turns, as chat messages.
pub fn conversation(system: Option<&Value>, messages: &[Value]) -> Result<Vec<ChatMessage>> {
    let mut out = Vec::new();
    if let Some(system) = system.filter(|s| !s.is_null()) {
        let text = blocks_text(system, "system")?;
        if !text.is_empty() {
            out.push(ChatMessage::new("system", text));
        }
    }
    if messages.is_empty() {
        return Err(Error::bad("messages", "messages: at least one message is required"));
    }
    for (i, m) in messages.iter().enumerate() {
        let at = format!("messages[{i}]");
        let Some(object) = m.as_object() else {
            return Err(Error::bad(&at, format!("{at}: each message must be an object")));
        };
        if let Some(key) = object.keys().find(|k| !matches!(k.as_str(), "role" | "content")) {
            return Err(Error::bad(&format!("{at}.{key}"), format!("{at}.{key}: Extra inputs are not permitted")));
        }
        let role = match object.get("role").and_then(Value::as_str) {
            Some(r @ ("user" | "assistant")) => r,
            _ => return Err(Error::bad(&format!("{at}.role"), format!("{at}.role: must be \"user\" or \"assistant\""))),
        };
        let content = object.get("content").unwrap_or(&Value::Null);
        match content.as_array() {
            Some(blocks) if tool_use::has_tool_blocks(content) => out.extend(tool_use::turn(role, blocks, &format!("{at}.content"))?),
            _ => out.push(ChatMessage::new(role, blocks_text(content, &format!("{at}.content"))?)),
        }
    }
    Ok(out)
}

/// Handles a Messages API request.
pub async fn messages(
    State(state): State<AppState>,
    caller: Caller,
    body: Result<JsonBody<MessagesRequest>>,
) -> std::result::Result<Response, AnthropicError> {
    let JsonBody(req) = body?;
    let engine = state.engine.get()?;
    let tools = tool_use::tools_of(req.tools.as_ref(), req.tool_choice.as_ref())?;
    let max_tokens = match req.max_tokens {
        None => return Err(Error::bad("max_tokens", "max_tokens: Field required").into()),
        Some(0) => return Err(Error::bad("max_tokens", "max_tokens: must be at least 1").into()),
        Some(n) => n as usize,
    };
    if req.temperature.is_some_and(|t| !(0.0..=MAX_TEMPERATURE).contains(&t)) {
        return Err(Error::bad("temperature", format!("temperature: must be between 0 and {MAX_TEMPERATURE}")).into());
    }
    let common = CommonParams {
        model: req.model.clone(),
        temperature: req.temperature,
        top_p: req.top_p,
        top_k: req.top_k,
        ..CommonParams::default()
    };
    common.check_model(&engine)?;
    let sampling = common.sampling()?;
    let stop = req.stop_sequences.clone().unwrap_or_default();
    crate::routes::generate::check_stops(&stop).map_err(|e| Error::bad("stop_sequences", format!("stop_sequences: {e}")))?;
    let turns = conversation(req.system.as_ref(), &req.messages)?;
    let input = Tools::prompt_of(tools.as_ref(), turns, engine.handle.text().native_tools());
    let ids = prompt::tokenize(&engine, input, "messages").await?;
    let prompt_n = ids.len();
    let asked = tools.as_ref().and_then(|t| t.asked(engine.handle.follows_grammars()));
    let constraint = crate::structured::compile(&engine, asked).await?;
    let request = peregrine_engine::Request { constraint, ..common.request(&engine, ids, max_tokens, sampling, stop)? };
    let job = jobs::submit(&state, &engine.handle, JobSpec { request, endpoint: "/v1/messages", caller, ticker: false })?;
    let steps = Steps { job, text: engine.handle.text().clone(), logprobs: false };
    let out = MessageAnswer::new(item_id("msg"), engine.model_id(), prompt_n, tools.is_some());
    if req.stream.unwrap_or(false) {
        return Ok(crate::openai::stream::sse_named(steps, out, state.settings.keep_alive));
    }
    Ok(Json(out.collect(steps).await?).into_response())
}
