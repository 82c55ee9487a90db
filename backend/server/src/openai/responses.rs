//! `POST /v1/responses`: OpenAI's Responses API for text: `input` as a string or a list
//! of messages (`{role, content}` with `input_text` / `output_text` parts, so earlier
//! turns come back as the client keeps them), `instructions` as the system message,
//! `max_output_tokens`, `temperature`, `top_p`, `stream`, structured output through
//! `text.format` (`structured.rs`), function tools (`response_tools.rs`). Everything
//! that would change the answer and is not implemented (other tools, stored responses)
//! is a 400 naming the field. The answer and its events: `response_object.rs`.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use peregrine_engine::{ChatMessage, Request};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::error::OpenAiError;
use super::params::CommonParams;
use super::response_object::ResponseAnswer;
use super::steps::Steps;
use super::tools::Tools;
use crate::app::AppState;
use crate::error::{Error, Result};
use crate::extract::JsonBody;
use crate::ids::{item_id, unix_now};
use crate::jobs::{self, JobSpec};
use crate::prompt;
use crate::request_context::Caller;

/// Body of `POST /v1/responses`.
#[derive(Debug, Deserialize)]
pub struct ResponsesRequest {
    pub model: Option<String>,
    pub input: Value,
    pub instructions: Option<String>,
    pub max_output_tokens: Option<u32>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub stream: Option<bool>,
    /// Only `false` (nothing is stored for later retrieval).
    pub store: Option<bool>,
    /// Function tools (`response_tools.rs`).
    pub tools: Option<Value>,
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<Value>,
    /// `{format: {type: "text" | "json_object" | "json_schema", …}}`.
    pub text: Option<Value>,
    pub metadata: Option<Value>,
}

impl crate::fields::Fields for ResponsesRequest {
    const ROUTE: &'static str = "/v1/responses";
    const ACCEPTED: &'static [&'static [&'static str]] = &[
        &["model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "stream", "store", "text"],
        &["tools", "tool_choice", "parallel_tool_calls"],
        crate::fields::LABELS,
    ];
}

/// The text of one message's `content`: a string or a list of text parts.
fn content_text(content: &Value, at: &str) -> Result<String> {
    match content {
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => parts
            .iter()
            .enumerate()
            .map(|(j, part)| {
                let at = format!("{at}[{j}]");
                let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
                if !matches!(kind, "input_text" | "output_text" | "text") {
                    return Err(Error::bad(
                        &format!("{at}.type"),
                        format!("{at}.type: only text parts are supported, not `{}`", crate::error::shorten(kind)),
                    ));
                }
                let object = part.as_object().into_iter().flat_map(Map::keys);
                if let Some(key) = object.clone().find(|k| !matches!(k.as_str(), "type" | "text" | "annotations" | "logprobs")) {
                    return Err(Error::bad(&format!("{at}.{key}"), format!("Unrecognized request argument supplied: {at}.{key}")));
                }
                part.get("text")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .ok_or_else(|| Error::bad(&format!("{at}.text"), format!("{at}.text is required")))
            })
            .collect::<Result<Vec<_>>>()
            .map(|texts| texts.concat()),
        _ => Err(Error::bad(at, format!("{at} must be a string or a list of text parts"))),
    }
}

/// `input` (and `instructions` first) as chat messages.
fn conversation(req: &ResponsesRequest) -> Result<Vec<ChatMessage>> {
    let mut messages: Vec<ChatMessage> =
        req.instructions.iter().filter(|s| !s.is_empty()).map(|s| ChatMessage::new("system", s.clone())).collect();
    match &req.input {
        Value::String(s) => messages.push(ChatMessage::new("user", s.clone())),
        Value::Array(items) if !items.is_empty() => {
            for (i, item) in items.iter().enumerate() {
                let at = format!("input[{i}]");
                let Some(object) = item.as_object() else {
                    return Err(Error::bad(&at, format!("{at} must be a message object")));
                };
                if let Some(turn) = super::response_tools::input_item(object, &at)? {
                    messages.push(turn);
                    continue;
                }
                match object.get("type").and_then(Value::as_str) {
                    None | Some("message") => {}
                    Some(kind) => {
                        return Err(Error::bad(
                            &format!("{at}.type"),
                            format!("{at}.type: `{}` items are not supported: only messages and function calls are", crate::error::shorten(kind)),
                        ));
                    }
                }
                if let Some(key) = object.keys().find(|k| !matches!(k.as_str(), "type" | "role" | "content" | "id" | "status")) {
                    return Err(Error::bad(&format!("{at}.{key}"), format!("Unrecognized request argument supplied: {at}.{key}")));
                }
                let role = match object.get("role").and_then(Value::as_str) {
                    Some("developer") | Some("system") => "system",
                    Some(r @ ("user" | "assistant")) => r,
                    _ => return Err(Error::bad(&format!("{at}.role"), format!("{at}.role must be user, assistant, system or developer"))),
                };
                let content = content_text(object.get("content").unwrap_or(&Value::Null), &format!("{at}.content"))?;
                messages.push(ChatMessage::new(role, content));
            }
        }
        Value::Array(_) => return Err(Error::bad("input", "`input` must hold at least one message")),
        _ => return Err(Error::bad("input", "`input` must be a string or a list of messages")),
    }
    Ok(messages)
}

/// The fields that are accepted only with the value that changes nothing.
fn check_unimplemented(req: &ResponsesRequest) -> Result<()> {
    if req.store == Some(true) {
        return Err(Error::bad("store", "`store: true` is not supported: stored responses are not implemented; send store: false"));
    }
    Ok(())
}

/// Handles a Responses API request.
pub async fn responses(
    State(state): State<AppState>,
    caller: Caller,
    body: Result<JsonBody<ResponsesRequest>>,
) -> std::result::Result<Response, OpenAiError> {
    let JsonBody(req) = body?;
    let engine = state.engine.get()?;
    check_unimplemented(&req)?;
    let tools = super::response_tools::tools_of(req.tools.as_ref(), req.tool_choice.as_ref(), req.parallel_tool_calls.as_ref())?;
    let tool_grammar = tools.as_ref().and_then(|t| t.asked(engine.handle.follows_grammars()));
    let asked = crate::structured::one_of(vec![crate::structured::responses_text(req.text.as_ref())?, tool_grammar])?;
    let common = CommonParams { model: req.model.clone(), temperature: req.temperature, top_p: req.top_p, ..CommonParams::default() };
    common.check_model(&engine)?;
    let sampling = common.sampling()?;
    let input = Tools::prompt_of(tools.as_ref(), conversation(&req)?, engine.handle.text().native_tools());
    let ids = prompt::tokenize(&engine, input, "input").await?;
    let max_tokens = match req.max_output_tokens {
        Some(0) => return Err(Error::bad("max_output_tokens", "max_output_tokens must be at least 1").into()),
        Some(n) => n as usize,
        None => prompt::room_left(&engine, ids.len()).min(state.settings.default_max_tokens).max(1),
    };
    let constraint = crate::structured::compile(&engine, asked).await?;
    let request = Request { constraint, ..common.request(&engine, ids, max_tokens, sampling, Vec::new())? };
    let job = jobs::submit(&state, &engine.handle, JobSpec { request, endpoint: "/v1/responses", caller, ticker: false })?;
    let steps = Steps { job, text: engine.handle.text().clone(), logprobs: false };
    let out = ResponseAnswer::new(
        item_id("resp"),
        item_id("msg"),
        unix_now(),
        engine.model_id(),
        req.instructions.clone(),
        req.max_output_tokens,
        &common,
        req.metadata.clone(),
    )
    .with_tools(tools.is_some(), &req.tools, &req.tool_choice, req.parallel_tool_calls.as_ref().and_then(Value::as_bool).unwrap_or(true));
    if req.stream.unwrap_or(false) {
        return Ok(super::stream::sse_named(steps, out, state.settings.keep_alive));
    }
    Ok(Json(out.collect(steps).await?).into_response())
}
