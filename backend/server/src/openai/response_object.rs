//! The Responses API's answer: a `response` object holding one assistant `message`
//! item with one `output_text` part, `status` `completed` (or `incomplete` with
//! `incomplete_details.reason: max_output_tokens`), and its usage; streamed as OpenAI's
//! typed events, each with a `sequence_number`: `response.created`,
//! `response.in_progress`, `response.output_item.added`, `response.content_part.added`,
//! `response.output_text.delta`*, `response.output_text.done`,
//! `response.content_part.done`, `response.output_item.done`, then
//! `response.completed` or `response.incomplete` (a failure: one `error` event). With
//! function tools, each call is a `function_call` item after the message (streamed:
//! `response.output_item.added`, one `response.function_call_arguments.delta`,
//! `response.function_call_arguments.done`, `response.output_item.done`); the message
//! holds all of the answer's text, what came between and after the calls too.

use peregrine_api::{FinishReason, Timings, Usage};
use serde_json::{json, Value};

use super::params::CommonParams;
use super::response_tools::output_item;
use super::steps::{Step, Steps};
use super::stream::Render;
use super::tool_output::{calls_of, read_calls, Call, CallScanner};
use crate::error::{Error, Result};

/// Builds response objects and their events.
pub struct ResponseAnswer {
    id: String,
    item_id: String,
    created: u64,
    model: String,
    instructions: Option<String>,
    max_output_tokens: Option<u32>,
    temperature: f32,
    top_p: f32,
    metadata: Value,
    /// Text so far (streamed).
    text: String,
    sequence: u64,
    /// The request's `tools`, `tool_choice` and `parallel_tool_calls`, echoed.
    tool_fields: (Value, Value, bool),
    /// With tools: the answer's text, read for calls.
    calls: Option<CallScanner>,
    /// The answer streams (its message item is announced whatever follows).
    streamed: bool,
}

impl ResponseAnswer {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: String,
        item_id: String,
        created: u64,
        model: &str,
        instructions: Option<String>,
        max_output_tokens: Option<u32>,
        common: &CommonParams,
        metadata: Option<Value>,
    ) -> ResponseAnswer {
        ResponseAnswer {
            id,
            item_id,
            created,
            model: model.to_string(),
            instructions,
            max_output_tokens,
            temperature: common.temperature.unwrap_or(super::params::DEFAULT_TEMPERATURE),
            top_p: common.top_p.unwrap_or(1.0),
            metadata: metadata.filter(|m| !m.is_null()).unwrap_or_else(|| json!({})),
            text: String::new(),
            sequence: 0,
            tool_fields: (json!([]), json!("none"), false),
            calls: None,
            streamed: false,
        }
    }

    /// The answer with tools (`active`: calls are read back), echoing the request's fields.
    pub fn with_tools(mut self, active: bool, tools: &Option<Value>, choice: &Option<Value>, parallel: bool) -> ResponseAnswer {
        let listed = tools.clone().filter(|t| !t.is_null()).unwrap_or_else(|| json!([]));
        let choice = choice.clone().filter(|c| !c.is_null()).unwrap_or_else(|| json!(if active { "auto" } else { "none" }));
        self.tool_fields = (listed, choice, parallel);
        self.calls = active.then(CallScanner::default);
        self
    }

    fn item(&self, status: &str, text: Option<&str>) -> Value {
        let content = match text {
            Some(t) => json!([{ "type": "output_text", "text": t, "annotations": [], "logprobs": [] }]),
            None => json!([]),
        };
        json!({ "id": self.item_id, "type": "message", "status": status, "role": "assistant", "content": content })
    }

    /// The response object; `end` is the finish (with the message's text and the calls)
    /// once there is one.
    fn object(&self, end: Option<(FinishReason, &str, &[Call], &Usage, &Timings)>) -> Value {
        let (status, incomplete, output, usage, timings) = match end {
            None => ("in_progress", Value::Null, json!([]), Value::Null, Value::Null),
            Some((reason, text, calls, usage, timings)) => {
                let done = reason == FinishReason::Stop;
                let status = if done { "completed" } else { "incomplete" };
                let message = (self.streamed || calls.is_empty() || !text.is_empty()).then(|| self.item(status, Some(text)));
                let items: Vec<Value> = message.into_iter().chain(calls.iter().map(|c| output_item(c, "completed"))).collect();
                let usage = json!({
                    "input_tokens": usage.prompt_tokens,
                    "input_tokens_details": { "cached_tokens": usage.prompt_tokens_details.cached_tokens },
                    "output_tokens": usage.completion_tokens,
                    "output_tokens_details": { "reasoning_tokens": 0 },
                    "total_tokens": usage.total_tokens,
                });
                let incomplete = if done { Value::Null } else { json!({ "reason": "max_output_tokens" }) };
                (status, incomplete, json!(items), usage, json!(timings))
            }
        };
        json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "error": null,
            "incomplete_details": incomplete,
            "instructions": self.instructions,
            "max_output_tokens": self.max_output_tokens,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": self.tool_fields.2,
            "previous_response_id": null,
            "reasoning": { "effort": null, "summary": null },
            "store": false,
            "temperature": self.temperature,
            "text": { "format": { "type": "text" } },
            "tool_choice": self.tool_fields.1,
            "tools": self.tool_fields.0,
            "top_p": self.top_p,
            "truncation": "disabled",
            "usage": usage,
            "metadata": self.metadata,
            "timings": timings,
        })
    }

    /// Waits for the end and builds the whole response.
    pub async fn collect(self, steps: Steps) -> Result<Value> {
        let f = steps.finish().await?;
        let (text, calls) = match self.calls.is_some().then(|| read_calls(&f.text)).flatten() {
            Some((before, calls)) => (before, calls),
            None => (f.text, Vec::new()),
        };
        Ok(self.object(Some((f.reason, &text, &calls, &f.usage, &f.timings))))
    }

    /// An event of `kind` with these fields and the next sequence number.
    fn event(&mut self, kind: &str, fields: Value) -> Value {
        let mut e = json!({ "type": kind, "sequence_number": self.sequence });
        self.sequence += 1;
        if let (Some(e), Value::Object(fields)) = (e.as_object_mut(), fields) {
            e.extend(fields);
        }
        e
    }

    /// Fields locating the one text part, with `fields` added.
    fn part(&self, fields: Value) -> Value {
        let mut base = json!({ "item_id": self.item_id, "output_index": 0, "content_index": 0 });
        if let (Some(b), Value::Object(fields)) = (base.as_object_mut(), fields) {
            b.extend(fields);
        }
        base
    }
}

impl Render for ResponseAnswer {
    fn render(&mut self, step: Step) -> Vec<Value> {
        match step {
            Step::Started => {
                self.streamed = true;
                let response = self.object(None);
                let item = self.item("in_progress", None);
                let part = self.part(json!({ "part": { "type": "output_text", "text": "", "annotations": [], "logprobs": [] } }));
                vec![
                    self.event("response.created", json!({ "response": response.clone() })),
                    self.event("response.in_progress", json!({ "response": response })),
                    self.event("response.output_item.added", json!({ "output_index": 0, "item": item })),
                    self.event("response.content_part.added", part),
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
                self.text.push_str(&text);
                let delta = self.part(json!({ "delta": text, "logprobs": [] }));
                vec![self.event("response.output_text.delta", delta)]
            }
            Step::Done { reason, usage, timings } => {
                let mut out = Vec::new();
                let calls = match self.calls.as_ref().map(CallScanner::finish) {
                    Some(Ok(parts)) => {
                        // Text between and after the calls joins the message's text.
                        let more = self.calls.as_ref().map(|s| s.more_text(&parts)).unwrap_or_default();
                        if !more.is_empty() {
                            self.text.push_str(&more);
                            let delta = self.part(json!({ "delta": more, "logprobs": [] }));
                            out.push(self.event("response.output_text.delta", delta));
                        }
                        calls_of(&parts)
                    }
                    Some(Err(held)) if !held.is_empty() => {
                        self.text.push_str(&held);
                        let delta = self.part(json!({ "delta": held, "logprobs": [] }));
                        out.push(self.event("response.output_text.delta", delta));
                        Vec::new()
                    }
                    _ => Vec::new(),
                };
                let text = std::mem::take(&mut self.text);
                let response = self.object(Some((reason, &text, &calls, &usage, &timings)));
                let item = response["output"][0].clone();
                let done = self.part(json!({ "text": text, "logprobs": [] }));
                let part = self.part(json!({ "part": { "type": "output_text", "text": text, "annotations": [], "logprobs": [] } }));
                out.push(self.event("response.output_text.done", done));
                out.push(self.event("response.content_part.done", part));
                out.push(self.event("response.output_item.done", json!({ "output_index": 0, "item": item })));
                for (i, call) in calls.iter().enumerate() {
                    let index = i + 1;
                    let item = output_item(call, "completed");
                    let started = output_item(&Call { arguments: String::new(), ..call.clone() }, "in_progress");
                    out.push(self.event("response.output_item.added", json!({ "output_index": index, "item": started })));
                    let at = json!({ "item_id": item["id"], "output_index": index });
                    let mut delta = at.clone();
                    delta["delta"] = json!(call.arguments);
                    out.push(self.event("response.function_call_arguments.delta", delta));
                    let mut done = at;
                    done["arguments"] = json!(call.arguments);
                    out.push(self.event("response.function_call_arguments.done", done));
                    out.push(self.event("response.output_item.done", json!({ "output_index": index, "item": item })));
                }
                let last = if reason == FinishReason::Stop { "response.completed" } else { "response.incomplete" };
                out.push(self.event(last, json!({ "response": response })));
                out
            }
        }
    }

    fn failure(&mut self, e: &Error) -> Value {
        let fields = json!({ "code": e.code(), "message": e.to_string(), "param": e.param() });
        self.event("error", fields)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streamed_answer_keeps_text_between_and_after_calls_in_its_message() {
        let answer = "Both.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\nBetween.\n<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>\nAfter.";
        let common = CommonParams::default();
        let mut r = ResponseAnswer::new("resp_1".into(), "msg_1".into(), 0, "m", None, None, &common, None).with_tools(true, &None, &None, true);
        let mut events = r.render(Step::Started);
        for piece in answer.split_inclusive(' ') {
            events.extend(r.render(Step::Text { text: piece.to_string(), token: None }));
        }
        events.extend(r.render(Step::Done { reason: FinishReason::Stop, usage: Usage::default(), timings: Timings::default() }));
        let streamed: String = events.iter().filter(|e| e["type"] == "response.output_text.delta").filter_map(|e| e["delta"].as_str()).collect();
        assert_eq!(streamed, "Both.\n\nBetween.\n\nAfter.");
        let done = events.last().expect("events");
        assert_eq!(done["type"], "response.completed");
        let output = done["response"]["output"].as_array().expect("output");
        let kinds: Vec<&str> = output.iter().filter_map(|i| i["type"].as_str()).collect();
        assert_eq!(kinds, ["message", "function_call", "function_call"]);
        assert_eq!(output[0]["content"][0]["text"], "Both.\n\nBetween.\n\nAfter.");
    }
}
