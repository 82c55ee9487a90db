//! llama.cpp's `/completion` answer, shared by `/completion` and `/infill`: the whole
//! object (`content`, `stop`, `stop_type`, `tokens_predicted`, `tokens_evaluated`,
//! `timings`, …) or, streamed, one `data: {…}` per piece of text and a last one with
//! `"stop": true` (no `[DONE]`); `n_probs` adds `completion_probabilities` as llama.cpp
//! writes them (`{id, token, bytes, logprob, top_logprobs}`). Also llama.cpp's sampling
//! defaults, which its native routes apply to fields a request leaves out.

use peregrine_api::{FinishReason, Timings};
use serde_json::{json, Value};

use crate::error::Result;
use crate::openai::params::CommonParams;
use crate::openai::steps::{Step, Steps, TokenLp};
use crate::openai::stream::Render;

/// llama.cpp's sampling defaults, for fields the request leaves out.
const LLAMA_TEMPERATURE: f32 = 0.8;
const LLAMA_TOP_K: u32 = 40;
const LLAMA_TOP_P: f32 = 0.95;
const LLAMA_MIN_P: f32 = 0.05;

/// Fills the sampling fields a llama.cpp request left out with llama.cpp's defaults.
pub fn llama_defaults(c: &mut CommonParams) {
    c.temperature = c.temperature.or(Some(LLAMA_TEMPERATURE));
    c.top_k = c.top_k.or(Some(LLAMA_TOP_K));
    c.top_p = c.top_p.or(Some(LLAMA_TOP_P));
    c.min_p = c.min_p.or(Some(LLAMA_MIN_P));
}

/// llama.cpp's `stop_type`.
fn stop_type(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Stop => "eos",
        FinishReason::Length => "limit",
        FinishReason::Cancelled => "none",
    }
}

/// One token's entry of `completion_probabilities`.
fn probability(t: &TokenLp) -> Value {
    let top: Vec<Value> =
        t.top.iter().zip(&t.top_ids).map(|((s, lp), id)| json!({ "id": id, "token": s, "bytes": s.as_bytes(), "logprob": lp })).collect();
    json!({ "id": t.id, "token": t.token, "bytes": t.token.as_bytes(), "logprob": t.logprob.unwrap_or(0.0), "top_logprobs": top })
}

/// Builds llama.cpp `/completion` objects.
pub struct LlamaAnswer {
    model: String,
    /// The prompt as text (an infill's layout with its special tokens spelled out).
    prompt: String,
    prompt_n: usize,
    /// Text pieces sent so far.
    predicted: usize,
    /// All text so far (for `has_new_line`).
    content: String,
    /// Attach `completion_probabilities` (`n_probs` > 0).
    probs: bool,
}

impl LlamaAnswer {
    pub fn new(model: &str, prompt: String, prompt_n: usize, probs: bool) -> LlamaAnswer {
        LlamaAnswer { model: model.to_string(), prompt, prompt_n, predicted: 0, content: String::new(), probs }
    }

    fn last(&self, content: &str, reason: FinishReason, predicted: u32, timings: &Timings) -> Value {
        json!({
            "index": 0,
            "content": content,
            "tokens": [],
            "id_slot": 0,
            "stop": true,
            "model": self.model,
            "tokens_predicted": predicted,
            "tokens_evaluated": self.prompt_n,
            "prompt": self.prompt,
            "has_new_line": self.content.contains('\n'),
            "truncated": false,
            "stop_type": stop_type(reason),
            "stopping_word": "",
            "tokens_cached": timings.cache_n,
            "timings": timings,
        })
    }

    /// Waits for the end and builds the whole answer.
    pub async fn collect(mut self, steps: Steps) -> Result<Value> {
        let f = steps.finish().await?;
        self.content = f.text.clone();
        let mut out = self.last(&f.text, f.reason, f.usage.completion_tokens, &f.timings);
        if self.probs {
            out["completion_probabilities"] = f.output.iter().map(probability).collect();
        }
        Ok(out)
    }
}

impl Render for LlamaAnswer {
    fn render(&mut self, step: Step) -> Vec<Value> {
        match step {
            Step::Started | Step::Prompt(_) | Step::Failed(_) => vec![],
            Step::Text { text, token } => {
                self.predicted += 1;
                self.content.push_str(&text);
                let mut chunk = json!({
                    "index": 0,
                    "content": text,
                    "tokens": [],
                    "stop": false,
                    "id_slot": -1,
                    "tokens_predicted": self.predicted,
                    "tokens_evaluated": self.prompt_n,
                });
                if let (true, Some(t)) = (self.probs, &token) {
                    chunk["completion_probabilities"] = json!([probability(t)]);
                }
                vec![chunk]
            }
            Step::Done { reason, usage, timings } => vec![self.last("", reason, usage.completion_tokens, &timings)],
        }
    }
}
