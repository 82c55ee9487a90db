//! `POST /v1/chat/completions`: messages through the model's chat template,
//! streamed or not, with `logprobs` / `top_logprobs`, structured output
//! (`structured.rs`) and tool calls (`tools.rs`, `tool_output.rs`): assistant turns'
//! `tool_calls` and `tool` results in the history, calls answered as `tool_calls` with
//! `finish_reason: "tool_calls"`, streamed as one `tool_calls` delta per call.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use peregrine_engine::ChatMessage;
use peregrine_engine::Request;
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::OpenAiError;
use super::logprobs;
use super::params::{check_top_logprobs, max_tokens_or_n_predict, CommonParams};
use super::steps::{finish_reason, Step, Steps};
use super::stream::Render;
use super::tool_output::{self, Call, CallScanner};
use super::tools::{self, Tools};
use crate::app::AppState;
use crate::error::{Error, Result};
use crate::extract::JsonBody;
use crate::ids::{response_id, unix_now};
use crate::prompt;
use crate::request_context::Caller;

/// One message of the request.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageIn {
    pub role: String,
    /// A string, an array of `{type: "text", text}` parts, or null.
    #[serde(default)]
    pub content: Value,
    /// An assistant turn's calls: `[{id, type: "function", function: {name, arguments}}]`.
    pub tool_calls: Option<Vec<Value>>,
    /// A `tool` turn's answer to this call.
    pub tool_call_id: Option<String>,
}

/// Body of `POST /v1/chat/completions`.
#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    pub messages: Vec<MessageIn>,
    pub max_tokens: Option<u32>,
    pub max_completion_tokens: Option<u32>,
    /// llama.cpp's name for `max_tokens` (−1: the default).
    pub n_predict: Option<i64>,
    #[serde(default)]
    pub logprobs: bool,
    pub top_logprobs: Option<u32>,
    pub tools: Option<Value>,
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<Value>,
    pub response_format: Option<Value>,
    #[serde(flatten)]
    pub common: CommonParams,
}

impl crate::fields::Fields for ChatRequest {
    const ROUTE: &'static str = "/v1/chat/completions";
    const ACCEPTED: &'static [&'static [&'static str]] = &[
        &["messages", "max_tokens", "max_completion_tokens", "n_predict", "logprobs", "top_logprobs", "response_format"],
        &["tools", "tool_choice", "parallel_tool_calls"],
        crate::fields::SAMPLING,
        crate::fields::STRUCTURED,
        crate::fields::OPENAI_EXTRA,
        crate::fields::LABELS,
        crate::fields::SPECULATIVE,
    ];
}

/// The messages as template input (only text content is supported).
pub fn messages(messages: &[MessageIn]) -> Result<Vec<ChatMessage>> {
    if messages.is_empty() {
        return Err(Error::bad("messages", "messages must contain at least one message"));
    }
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let param = || format!("messages[{i}].content");
            let content = match &m.content {
                Value::Null => String::new(),
                Value::String(s) => s.clone(),
                Value::Array(parts) => parts
                    .iter()
                    .map(|p| match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
                        (Some("text"), Some(t)) => Ok(t),
                        _ => Err(Error::bad(&param(), "only text content parts are supported")),
                    })
                    .collect::<Result<Vec<_>>>()?
                    .concat(),
                _ => return Err(Error::bad(&param(), "content must be a string or an array of text parts")),
            };
            let content = match &m.tool_calls {
                Some(calls) if m.role == "assistant" => tools::history_calls(i, &content, calls)?,
                Some(_) => {
                    let at = format!("messages[{i}].tool_calls");
                    return Err(Error::bad(&at, format!("{at}: only assistant messages carry tool_calls")));
                }
                None => content,
            };
            if m.tool_call_id.is_some() && m.role != "tool" {
                let at = format!("messages[{i}].tool_call_id");
                return Err(Error::bad(&at, format!("{at}: only tool messages carry tool_call_id")));
            }
            Ok(ChatMessage::new(m.role.clone(), content))
        })
        .collect()
}

/// Handles a chat completion request.
pub async fn chat_completions(
    State(state): State<AppState>,
    caller: Caller,
    body: Result<JsonBody<ChatRequest>>,
) -> std::result::Result<Response, OpenAiError> {
    let JsonBody(req) = body?;
    let engine = state.engine.get()?;
    req.common.check_model(&engine)?;
    let tools = Tools::from_request(req.tools.as_ref(), req.tool_choice.as_ref(), req.parallel_tool_calls.as_ref())?;
    let tool_grammar = tools.as_ref().and_then(|t| t.asked(engine.handle.follows_grammars()));
    let asked =
        req.common.structured(vec![crate::structured::response_format("response_format", req.response_format.as_ref())?, tool_grammar])?;
    let n = super::choices::count(req.common.n)?;
    let sampling = req.common.sampling()?;
    let stop = req.common.stops()?;
    let top = match (req.logprobs, req.top_logprobs) {
        (false, Some(n)) if n > 0 => return Err(Error::bad("top_logprobs", "top_logprobs needs logprobs: true").into()),
        (false, _) => None,
        (true, n) => Some(check_top_logprobs("top_logprobs", n.unwrap_or(0))?),
    };
    if top.is_some() && tools.is_some() {
        return Err(Error::bad("logprobs", "logprobs cannot be combined with tools yet").into());
    }
    let conversation = messages(&req.messages)?;
    let input = Tools::prompt_of(tools.as_ref(), conversation, engine.handle.text().native_tools());
    let ids = prompt::tokenize(&engine, input, "messages").await?;
    let max_tokens = match max_tokens_or_n_predict(req.max_completion_tokens.or(req.max_tokens), req.n_predict)? {
        Some(0) => return Err(Error::bad("max_tokens", "max_tokens must be at least 1").into()),
        Some(n) => n as usize,
        None => prompt::room_left(&engine, ids.len()).min(state.settings.default_max_tokens).max(1),
    };
    let constraint = crate::structured::compile(&engine, asked).await?;
    let request = Request { top_logprobs: top.unwrap_or(0), constraint, ..req.common.request(&engine, ids, max_tokens, sampling, stop)? };
    let jobs = super::choices::submit_all(&state, &engine, request, n, ("/v1/chat/completions", caller))?;
    let (id, created) = (response_id("chatcmpl"), unix_now());
    let out = || Chat {
        id: id.clone(),
        created,
        model: engine.model_id().to_string(),
        fingerprint: engine.fingerprint(),
        logprobs: top.is_some(),
        include_usage: req.common.include_usage(),
        calls: tools.as_ref().map(|_| CallScanner::default()),
    };
    let text = engine.handle.text().clone();
    if req.common.streaming() {
        return Ok(super::stream::sse_jobs(jobs, text, top.is_some(), out, state.settings.keep_alive));
    }
    let merged =
        super::choices::collect_merged(jobs, |job| out().collect(Steps { job, text: text.clone(), logprobs: top.is_some() })).await?;
    Ok(Json(merged).into_response())
}

/// The finish reason of an answer with calls: `tool_calls`, unless the length limit cut
/// it (its complete calls are still answered).
fn calls_finish(reason: peregrine_api::FinishReason) -> &'static str {
    match finish_reason(reason) {
        "length" => "length",
        _ => "tool_calls",
    }
}

/// Builds chat completion objects and chunks.
struct Chat {
    id: String,
    created: u64,
    model: String,
    /// OpenAI's `system_fingerprint` (`LoadedEngine::fingerprint`).
    fingerprint: String,
    logprobs: bool,
    include_usage: bool,
    /// With tools: the answer's text, read for calls.
    calls: Option<CallScanner>,
}

impl Chat {
    fn object(&self, kind: &str, choices: Value) -> Value {
        json!({
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": self.fingerprint,
            "choices": choices,
        })
    }

    fn chunk(&self, delta: Value, logprobs: Value, finish: Option<&str>) -> Value {
        let mut c =
            self.object("chat.completion.chunk", json!([{ "index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish }]));
        if self.include_usage {
            c["usage"] = Value::Null;
        }
        c
    }

    async fn collect(self, steps: Steps) -> Result<Value> {
        let f = steps.finish().await?;
        let lp = if self.logprobs { logprobs::chat(&f.output) } else { Value::Null };
        let called = self.calls.is_some().then(|| tool_output::read_calls(&f.text)).flatten().filter(|(_, calls)| !calls.is_empty());
        let (message, finish) = match called {
            Some((before, calls)) => {
                let content = if before.is_empty() { Value::Null } else { Value::String(before) };
                let calls: Vec<Value> = calls.iter().map(Call::message_json).collect();
                (json!({ "role": "assistant", "content": content, "tool_calls": calls }), calls_finish(f.reason))
            }
            None => (json!({ "role": "assistant", "content": f.text }), finish_reason(f.reason)),
        };
        let mut out =
            self.object("chat.completion", json!([{ "index": 0, "message": message, "logprobs": lp, "finish_reason": finish }]));
        out["usage"] = json!(f.usage);
        out["timings"] = json!(f.timings);
        Ok(out)
    }
}

impl Render for Chat {
    fn render(&mut self, step: Step) -> Vec<Value> {
        match step {
            Step::Started => vec![self.chunk(json!({ "role": "assistant", "content": "" }), Value::Null, None)],
            Step::Prompt(_) | Step::Failed(_) => vec![],
            Step::Text { text, token } => {
                let lp = match &token {
                    Some(t) => logprobs::chat(std::slice::from_ref(t)),
                    None => Value::Null,
                };
                let text = match &mut self.calls {
                    Some(scanner) => scanner.push(&text),
                    None => text,
                };
                if text.is_empty() && token.is_none() {
                    return vec![];
                }
                vec![self.chunk(json!({ "content": text }), lp, None)]
            }
            Step::Done { reason, usage, timings } => {
                let mut out = Vec::new();
                let mut finish = finish_reason(reason);
                match self.calls.as_ref().map(CallScanner::finish) {
                    Some(Ok(parts)) => {
                        // Text between and after the calls joins the content.
                        let more = self.calls.as_ref().map(|s| s.more_text(&parts)).unwrap_or_default();
                        if !more.is_empty() {
                            out.push(self.chunk(json!({ "content": more }), Value::Null, None));
                        }
                        let calls = tool_output::calls_of(&parts);
                        let deltas: Vec<Value> = calls.iter().enumerate().map(|(i, c)| c.delta_json(i)).collect();
                        out.push(self.chunk(json!({ "tool_calls": deltas }), Value::Null, None));
                        finish = calls_finish(reason);
                    }
                    Some(Err(held)) if !held.is_empty() => out.push(self.chunk(json!({ "content": held }), Value::Null, None)),
                    _ => {}
                }
                let mut last = self.chunk(json!({}), Value::Null, Some(finish));
                if !self.include_usage {
                    last["timings"] = json!(timings);
                    out.push(last);
                    return out;
                }
                let mut usage_chunk = self.object("chat.completion.chunk", json!([]));
                usage_chunk["usage"] = json!(usage);
                usage_chunk["timings"] = json!(timings);
                out.extend([last, usage_chunk]);
                out
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streamed_answer_keeps_text_between_and_after_calls_in_the_content() {
        let answer = "Both.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\nBetween.\n<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>\nAfter.";
        let mut chat = Chat {
            id: "chatcmpl-1".into(),
            created: 0,
            model: "m".into(),
            fingerprint: "b0-0".into(),
            logprobs: false,
            include_usage: false,
            calls: Some(CallScanner::default()),
        };
        let mut chunks = chat.render(Step::Started);
        for piece in answer.split_inclusive(' ') {
            chunks.extend(chat.render(Step::Text { text: piece.to_string(), token: None }));
        }
        let usage = peregrine_api::Usage::default();
        chunks.extend(chat.render(Step::Done { reason: peregrine_api::FinishReason::Stop, usage, timings: Default::default() }));
        let delta = |c: &Value| c["choices"][0]["delta"].clone();
        let content: String = chunks.iter().filter_map(|c| delta(c)["content"].as_str().map(str::to_string)).collect();
        assert_eq!(content, "Both.\n\nBetween.\n\nAfter.");
        let names: Vec<Value> =
            chunks.iter().flat_map(|c| delta(c)["tool_calls"].as_array().cloned().unwrap_or_default()).map(|t| t["function"]["name"].clone()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(chunks.last().expect("chunks")["choices"][0]["finish_reason"], "tool_calls");
    }
}
