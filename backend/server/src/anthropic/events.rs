//! The Messages API's answer: a `message` with a `text` block (and, with tools, a
//! `tool_use` block per call, `stop_reason: "tool_use"`), `stop_reason` (`end_turn`, or
//! `max_tokens` for an answer cut short) and usage (`input_tokens` counts the prompt
//! tokens computed, `cache_read_input_tokens` those reused); streamed as Anthropic's
//! events: `message_start`, `content_block_start`, `ping`, `content_block_delta`*,
//! `content_block_stop` (then, with calls, a block per call and per text between or
//! after them, in the model's order: `tool_use` with one `input_json_delta`, `text` with
//! one `text_delta`),
//! `message_delta`, `message_stop` (a failure: one `error` event).

use peregrine_api::{FinishReason, Usage};
use serde_json::{json, Value};

use super::tool_use;
use crate::error::{Error, Result};
use crate::openai::steps::{Step, Steps};
use crate::openai::stream::Render;
use crate::openai::tool_output::{read_parts, CallScanner, Part};

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
        let called = self.calls.is_some().then(|| read_parts(&f.text)).flatten();
        let (content, reason) = match called {
            Some(parts) => {
                // Text and tool_use blocks in the order the model wrote them.
                let blocks: Vec<Value> = parts.iter().map(block).collect();
                (json!(blocks), calls_stop(f.reason))
            }
            None => (json!([{ "type": "text", "text": f.text }]), stop_reason(f.reason)),
        };
        let mut out = self.message(content, Some(reason), usage(&f.usage));
        out["timings"] = json!(f.timings);
        Ok(out)
    }
}

/// A part of an answer with calls as a Messages content block.
fn block(part: &Part) -> Value {
    match part {
        Part::Text(text) => json!({ "type": "text", "text": text }),
        Part::Call(call) => tool_use::block(call),
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
                    Some(Ok(parts)) => {
                        out.push(json!({ "type": "content_block_stop", "index": 0 }));
                        for (i, part) in parts.iter().enumerate() {
                            let index = i + 1;
                            let (start, delta) = match part {
                                Part::Call(call) => {
                                    let block = tool_use::block(call);
                                    let input = block["input"].to_string();
                                    let start = json!({ "type": "tool_use", "id": block["id"], "name": block["name"], "input": {} });
                                    (start, json!({ "type": "input_json_delta", "partial_json": input }))
                                }
                                Part::Text(text) => (json!({ "type": "text", "text": "" }), json!({ "type": "text_delta", "text": text })),
                            };
                            out.push(json!({ "type": "content_block_start", "index": index, "content_block": start }));
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

#[cfg(test)]
mod tests {
    use super::*;

    const ANSWER: &str = "Checking both.\n<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\nNow the time.\n<tool_call>\n{\"name\": \"time\", \"arguments\": {}}\n</tool_call>\n";

    #[test]
    fn a_streamed_answer_keeps_text_between_calls_as_blocks_in_order() {
        let mut m = MessageAnswer::new("msg_1".into(), "m", 3, true);
        let mut events = m.render(Step::Started);
        for piece in ANSWER.split_inclusive(' ') {
            events.extend(m.render(Step::Text { text: piece.to_string(), token: None }));
        }
        events.extend(m.render(Step::Done { reason: FinishReason::Stop, usage: Usage::default(), timings: Default::default() }));
        let starts: Vec<String> = events
            .iter()
            .filter(|e| e["type"] == "content_block_start")
            .map(|e| format!("{} {}", e["index"], e["content_block"]["type"].as_str().unwrap_or("?")))
            .collect();
        assert_eq!(starts, ["0 text", "1 tool_use", "2 text", "3 tool_use"]);
        let text_of = |index: u64| -> String {
            events
                .iter()
                .filter(|e| e["type"] == "content_block_delta" && e["index"] == index)
                .filter_map(|e| e["delta"]["text"].as_str())
                .collect()
        };
        assert_eq!(text_of(0).trim(), "Checking both.");
        assert_eq!(text_of(2), "Now the time.");
        let stop = events.iter().find(|e| e["type"] == "message_delta").expect("message_delta");
        assert_eq!(stop["delta"]["stop_reason"], "tool_use");
    }

    #[test]
    fn a_whole_answer_keeps_text_between_calls_as_blocks_in_order() {
        let parts = read_parts(ANSWER).expect("calls");
        let kinds: Vec<Value> = parts.iter().map(block).map(|b| b["type"].clone()).collect();
        assert_eq!(kinds, ["text", "tool_use", "text", "tool_use"]);
        assert_eq!(block(&parts[2])["text"], "Now the time.");
    }
}
