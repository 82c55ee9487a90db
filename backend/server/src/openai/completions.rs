//! `POST /v1/completions`: a text or token-id prompt, streamed or not, with
//! `logprobs` and `echo` (so `echo: true, max_tokens: 0` scores a prompt), and
//! `suffix`: the prompt is the text before the insertion point and the answer fills
//! the middle (laid out as llama.cpp's `/infill` lays it out).

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use peregrine_engine::{Prompt, Request};
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::OpenAiError;
use super::logprobs::legacy;
use super::params::{check_top_logprobs, max_tokens_or_n_predict, CommonParams};
use super::steps::{finish_reason, Step, Steps, TokenLp};
use super::stream::Render;
use crate::app::AppState;
use crate::error::{Error, Result};
use crate::extract::JsonBody;
use crate::ids::{response_id, unix_now};
use crate::request_context::Caller;

use crate::prompt;
use crate::routes::infill::infill_prompt;
use peregrine_engine::infill::InfillInput;

/// OpenAI's default `max_tokens` for completions.
pub const DEFAULT_COMPLETION_MAX_TOKENS: u32 = 16;

/// Body of `POST /v1/completions`.
#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    /// A string, an array of token ids, or a one-element array of either.
    pub prompt: Option<serde_json::Value>,
    pub max_tokens: Option<u32>,
    /// llama.cpp's name for `max_tokens` (−1: the default).
    pub n_predict: Option<i64>,
    /// Alternatives per token (0 = only the chosen token's log-probability).
    pub logprobs: Option<u32>,
    #[serde(default)]
    pub echo: bool,
    pub suffix: Option<String>,
    pub best_of: Option<u32>,
    #[serde(flatten)]
    pub common: CommonParams,
}

impl crate::fields::Fields for CompletionRequest {
    const ROUTE: &'static str = "/v1/completions";
    const ACCEPTED: &'static [&'static [&'static str]] = &[
        &["prompt", "max_tokens", "n_predict", "logprobs", "echo", "suffix", "best_of"],
        crate::fields::SAMPLING,
        crate::fields::STRUCTURED,
        crate::fields::OPENAI_EXTRA,
        crate::fields::LABELS,
        crate::fields::SPECULATIVE,
    ];
}

/// The prompt field as an engine prompt, plus its text for `echo`.
pub(crate) fn parse_prompt(v: Option<&Value>) -> Result<(Prompt, Option<String>)> {
    let bad = || Error::bad("prompt", "prompt must be a string, an array of token ids, or a one-element array of either");
    let ids = |items: &[Value]| -> Result<Vec<u32>> {
        items
            .iter()
            .map(|v| {
                v.as_u64()
                    .and_then(|i| u32::try_from(i).ok())
                    .ok_or_else(|| Error::bad("prompt", "token ids must be non-negative integers"))
            })
            .collect()
    };
    match v {
        None | Some(Value::Null) => Err(Error::bad("prompt", "prompt is required")),
        Some(Value::String(s)) => Ok((Prompt::Text(s.clone()), Some(s.clone()))),
        Some(Value::Array(items)) if items.is_empty() => Err(Error::bad("prompt", "the prompt is empty")),
        Some(Value::Array(items)) if items[0].is_number() => Ok((Prompt::Tokens(ids(items)?), None)),
        Some(Value::Array(items)) if items.len() > 1 => Err(Error::bad("prompt", "only one prompt per request is supported")),
        Some(Value::Array(items)) => match &items[0] {
            Value::String(s) => Ok((Prompt::Text(s.clone()), Some(s.clone()))),
            Value::Array(inner) => Ok((Prompt::Tokens(ids(inner)?), None)),
            _ => Err(bad()),
        },
        Some(_) => Err(bad()),
    }
}

/// Handles a completion request.
pub async fn completions(
    State(state): State<AppState>,
    caller: Caller,
    body: Result<JsonBody<CompletionRequest>>,
) -> std::result::Result<Response, OpenAiError> {
    let JsonBody(req) = body?;
    let engine = state.engine.get()?;
    req.common.check_model(&engine)?;
    if req.best_of.is_some_and(|b| b != 1) {
        return Err(Error::bad("best_of", "only best_of = 1 is supported").into());
    }
    let n = super::choices::count(req.common.n)?;
    let sampling = req.common.sampling()?;
    let stop = req.common.stops()?;
    let top = req.logprobs.map(|n| check_top_logprobs("logprobs", n)).transpose()?;
    let (input, prompt_text) = parse_prompt(req.prompt.as_ref())?;
    let max_tokens = max_tokens_or_n_predict(req.max_tokens, req.n_predict)?.unwrap_or(DEFAULT_COMPLETION_MAX_TOKENS) as usize;
    // 0 only scores the prompt, which only echo returns (as chat, which has no echo, refuses 0).
    if max_tokens == 0 && !req.echo {
        return Err(Error::bad("max_tokens", "max_tokens must be at least 1 (0 scores the prompt, with echo only)").into());
    }
    let ids = match req.suffix.filter(|s| !s.is_empty()) {
        None => prompt::tokenize(&engine, input, "prompt").await?,
        Some(suffix) => {
            if req.echo {
                return Err(Error::bad("echo", "echo cannot be combined with suffix").into());
            }
            let Prompt::Text(prefix) = input else {
                return Err(Error::bad("suffix", "suffix needs a text prompt (the text before the insertion point)").into());
            };
            let fill = InfillInput { prefix, suffix, ..InfillInput::default() };
            infill_prompt(&engine, fill, max_tokens as i64, "suffix").await?
        }
    };
    let constraint = crate::structured::compile(&engine, req.common.structured(Vec::new())?).await?;
    let text = engine.handle.text().clone();
    let echo_text =
        req.echo.then(|| prompt_text.unwrap_or_else(|| text.tokenizer.as_ref().and_then(|t| t.decode(&ids).ok()).unwrap_or_default()));
    let request = Request {
        top_logprobs: top.unwrap_or(0),
        echo_logprobs: req.echo && top.is_some(),
        constraint,
        ..req.common.request(&engine, ids, max_tokens, sampling, stop)?
    };
    let jobs = super::choices::submit_all(&state, &engine, request, n, ("/v1/completions", caller))?;
    let (id, created) = (response_id("cmpl"), unix_now());
    let out = || Completion {
        id: id.clone(),
        created,
        model: engine.model_id().to_string(),
        fingerprint: engine.fingerprint(),
        echo: echo_text.clone(),
        logprobs: top.is_some(),
        include_usage: req.common.include_usage(),
        offset: 0,
    };
    if req.common.streaming() {
        return Ok(super::stream::sse_jobs(jobs, text, top.is_some(), out, state.settings.keep_alive));
    }
    let merged =
        super::choices::collect_merged(jobs, |job| out().collect(Steps { job, text: text.clone(), logprobs: top.is_some() })).await?;
    Ok(Json(merged).into_response())
}

/// Builds completion objects and chunks.
struct Completion {
    id: String,
    created: u64,
    model: String,
    /// OpenAI's `system_fingerprint` (`LoadedEngine::fingerprint`).
    fingerprint: String,
    /// The prompt text, when echoed.
    echo: Option<String>,
    logprobs: bool,
    include_usage: bool,
    /// Characters of text so far (logprobs `text_offset`).
    offset: usize,
}

impl Completion {
    fn object(&self, choices: Value) -> Value {
        json!({
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": self.fingerprint,
            "choices": choices,
        })
    }

    fn chunk(&self, text: &str, logprobs: Value, finish: Option<&str>) -> Value {
        let mut c = self.object(json!([{ "index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish }]));
        if self.include_usage {
            c["usage"] = Value::Null;
        }
        c
    }

    /// Waits for the end and builds the whole answer.
    async fn collect(mut self, steps: Steps) -> Result<Value> {
        let f = steps.finish().await?;
        let text = self.echo.clone().unwrap_or_default() + &f.text;
        let tokens: Vec<TokenLp> = f.prompt.into_iter().chain(f.output).collect();
        let logprobs = if self.logprobs { legacy(&tokens, &mut self.offset) } else { Value::Null };
        let mut out = self.object(json!([{ "index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish_reason(f.reason) }]));
        out["usage"] = json!(f.usage);
        out["timings"] = json!(f.timings);
        Ok(out)
    }
}

impl Render for Completion {
    fn render(&mut self, step: Step) -> Vec<Value> {
        match step {
            // Echo without logprobs: the prompt text is the first chunk.
            Step::Started => match (&self.echo, self.logprobs) {
                (Some(p), false) => vec![self.chunk(&p.clone(), Value::Null, None)],
                _ => vec![],
            },
            Step::Prompt(tokens) => {
                let lp = legacy(&tokens, &mut self.offset);
                vec![self.chunk(&self.echo.clone().unwrap_or_default(), lp, None)]
            }
            Step::Text { text, token } => {
                let lp = match &token {
                    Some(t) => legacy(std::slice::from_ref(t), &mut self.offset),
                    None => Value::Null,
                };
                vec![self.chunk(&text, lp, None)]
            }
            Step::Done { reason, usage, timings } => {
                let mut last = self.chunk("", Value::Null, Some(finish_reason(reason)));
                if !self.include_usage {
                    last["timings"] = json!(timings);
                    return vec![last];
                }
                let mut usage_chunk = self.object(json!([]));
                usage_chunk["usage"] = json!(usage);
                usage_chunk["timings"] = json!(timings);
                vec![last, usage_chunk]
            }
            Step::Failed(_) => vec![],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_shapes() {
        assert!(matches!(parse_prompt(Some(&json!("hi"))).unwrap().0, Prompt::Text(_)));
        assert!(matches!(parse_prompt(Some(&json!([1, 2, 3]))).unwrap().0, Prompt::Tokens(ref v) if v == &[1, 2, 3]));
        assert!(matches!(parse_prompt(Some(&json!([[4, 5]]))).unwrap().0, Prompt::Tokens(ref v) if v == &[4, 5]));
        assert!(matches!(parse_prompt(Some(&json!(["a"]))).unwrap().0, Prompt::Text(_)));
        assert!(parse_prompt(Some(&json!(["a", "b"]))).is_err());
        assert!(parse_prompt(Some(&json!([-1]))).is_err());
        assert!(parse_prompt(Some(&json!({}))).is_err());
        assert!(parse_prompt(None).is_err());
    }
}
