//! The Messages API's answer: a `message` with a `text` block (and, with tools, a
//! `tool_use` block per call, `stop_reason: "tool_use"`), `stop_reason` (`end_turn`, or
//! `max_tokens` for an answer cut short) and usage (`input_tokens` counts the prompt
//! tokens computed, `cache_read_input_tokens` those reused); streamed as Anthropic's
//! events: `message_start`, `content_block_start`, `ping`, `content_block_delta`*,
//! `content_block_stop` (then per call its `tool_use` block with one `input_json_delta`),
//! `message_delta`, `message_stop` (a failure: one `error` event).

use peregrine_api::{FinishReason, Usage};
use serde_json::{json, Value};

use super::tool_use;
use crate::error::{Error, Result};
use crate::openai::steps::{Step, Steps};
use crate::openai::stream::Render;
use crate::openai::tool_output::{read_calls, CallScanner};

/// Anthropic's `stop_reason`.
fn stop_reason(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Stop => "end_turn",
        FinishReason::Length | FinishReason::Cancelled => "max_tokens",
    }
}

/// Anthropic's usage: the prompt split into computed and reused tokens.
fn usage(u: &Usage) -> Value {
    let cached = u.prompt_tokens_details.cached_tokens;
    json!({
        "input_tokens": u.prompt_tokens.saturating_sub(cached),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
        "output_tokens": u.completion_tokens,
    })
}

/// The stop reason of an answer with calls: `tool_use`, unless the length limit cut it.
fn calls_stop(reason: FinishReason) -> &'static str {
    match stop_reason(reason) {
        "max_tokens" => "max_tokens",
        _ => "tool_use",
    }
}

/// Builds message objects and their events.
pub struct MessageAnswer {
    id: String,
    model: String,
    prompt_n: usize,
    /// With tools: the answer's text, read for calls.
    calls: Option<CallScanner>,
}

impl MessageAnswer {
    pub fn new(id: String, model: &str, prompt_n: usize, tools: bool) -> MessageAnswer {
        MessageAnswer { id, model: model.to_string(), prompt_n, calls: tools.then(CallScanner::default) }
    }

    fn message(&self, content: Value, reason: Option<&str>, usage: Value) -> Value {
        json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": reason,
            "stop_sequence": null,
            "usage": usage,
        })
    }

    /// Waits for the end and builds the whole message.
    pub async fn collect(self, steps: Steps) -> Result<Value> {
        let f = steps.finish().await?;
        let called = self.calls.is_some().then(|| read_calls(&f.text)).flatten();
        let (content, reason) = match called {
            Some((before, calls)) => {
                let text = (!before.is_empty()).then(|| json!({ "type": "text", "text": before }));
                let blocks: Vec<Value> = text.into_iter().chain(calls.iter().map(tool_use::block)).collect();
                (json!(blocks), calls_stop(f.reason))
            }
            None => (json!([{ "type": "text", "text": f.text }]), stop_reason(f.reason)),
        };
        let mut out = self.message(content, Some(reason), usage(&f.usage));
        out["timings"] = json!(f.timings);
        Ok(out)
    }
}

impl Render for MessageAnswer {
    fn render(&mut self, step: Step) -> Vec<Value> {
        match step {
            Step::Started => {
                let start_usage = json!({ "input_tokens": self.prompt_n, "output_tokens": 0 });
                vec![
                    json!({ "type": "message_start", "message": self.message(json!([]), None, start_usage) }),
                    json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "text", "text": "" } }),
                    json!({ "type": "ping" }),
                ]
            }
            Step::Prompt(_) | Step::Failed(_) => vec![],
            Step::Text { text, .. } => {
                let text = match &mut self.calls {
                    Some(scanner) => scanner.push(&text),
                    None => text,
                };
                if text.is_empty() {
                    return vec![];
                }
                vec![json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "text_delta", "text": text } })]
            }
            Step::Done { reason, usage: u, timings } => {
                let mut out = Vec::new();
                let mut stop = stop_reason(reason);
                match self.calls.as_ref().map(CallScanner::finish) {
                    Some(Ok(calls)) if !calls.is_empty() => {
                        out.push(json!({ "type": "content_block_stop", "index": 0 }));
                        for (i, call) in calls.iter().enumerate() {
                            let block = tool_use::block(call);
                            let index = i + 1;
                            let input = block["input"].to_string();
                            let start = json!({ "type": "tool_use", "id": block["id"], "name": block["name"], "input": {} });
                            out.push(json!({ "type": "content_block_start", "index": index, "content_block": start }));
                            let delta = json!({ "type": "input_json_delta", "partial_json": input });
                            out.push(json!({ "type": "content_block_delta", "index": index, "delta": delta }));
                            out.push(json!({ "type": "content_block_stop", "index": index }));
                        }
                        stop = calls_stop(reason);
                    }
                    Some(Err(held)) if !held.is_empty() => {
                        let delta = json!({ "type": "text_delta", "text": held });
                        out.push(json!({ "type": "content_block_delta", "index": 0, "delta": delta }));
                        out.push(json!({ "type": "content_block_stop", "index": 0 }));
                    }
                    _ => out.push(json!({ "type": "content_block_stop", "index": 0 })),
                }
                out.push(json!({
                    "type": "message_delta",
                    "delta": { "stop_reason": stop, "stop_sequence": null },
                    "usage": usage(&u),
                    "timings": timings,
                }));
                out.push(json!({ "type": "message_stop" }));
                out
            }
        }
    }

    fn failure(&mut self, e: &Error) -> Value {
        super::error::error_body(e)
    }
}
