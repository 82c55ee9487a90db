//! The Messages API's answer: a `message` with one `text` block, `stop_reason`
//! (`end_turn`, or `max_tokens` for an answer cut short) and usage (`input_tokens`
//! counts the prompt tokens computed, `cache_read_input_tokens` those reused); streamed
//! as Anthropic's events: `message_start`, `content_block_start`, `ping`,
//! `content_block_delta`*, `content_block_stop`, `message_delta`, `message_stop` (a
//! failure: one `error` event).

use peregrine_api::{FinishReason, Usage};
use serde_json::{json, Value};

use crate::error::{Error, Result};
use crate::openai::steps::{Step, Steps};
use crate::openai::stream::Render;

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

/// Builds message objects and their events.
pub struct MessageAnswer {
    id: String,
    model: String,
    prompt_n: usize,
}

impl MessageAnswer {
    pub fn new(id: String, model: &str, prompt_n: usize) -> MessageAnswer {
        MessageAnswer { id, model: model.to_string(), prompt_n }
    }

    fn message(&self, content: Value, reason: Option<FinishReason>, usage: Value) -> Value {
        json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": reason.map(stop_reason),
            "stop_sequence": null,
            "usage": usage,
        })
    }

    /// Waits for the end and builds the whole message.
    pub async fn collect(self, steps: Steps) -> Result<Value> {
        let f = steps.finish().await?;
        let mut out = self.message(json!([{ "type": "text", "text": f.text }]), Some(f.reason), usage(&f.usage));
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
                vec![json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "text_delta", "text": text } })]
            }
            Step::Done { reason, usage: u, timings } => vec![
                json!({ "type": "content_block_stop", "index": 0 }),
                json!({
                    "type": "message_delta",
                    "delta": { "stop_reason": stop_reason(reason), "stop_sequence": null },
                    "usage": usage(&u),
                    "timings": timings,
                }),
                json!({ "type": "message_stop" }),
            ],
        }
    }

    fn failure(&mut self, e: &Error) -> Value {
        super::error::error_body(e)
    }
}
