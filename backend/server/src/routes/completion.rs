//! `POST /completion`: llama.cpp's native completion endpoint. The request is
//! llama.cpp's: `prompt` (text, token ids, or a one-element array of either),
//! `n_predict` (−1: until EOS or the end of the context; absent: `--default-max-tokens`;
//! `max_tokens` is taken as well), `n_probs`, `stream`, `cache_prompt`, its sampling names with its
//! defaults (temperature 0.8, top_k 40, top_p 0.95, min_p 0.05; seed −1 = random) and
//! `stop`; the answer is llama.cpp's object, streamed as its `data: {…}` pieces.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::Value;

use crate::app::AppState;
use crate::error::{Error, Result};
use crate::extract::JsonBody;
use crate::jobs::{self, JobSpec};
use crate::openai::completions::parse_prompt;
use crate::openai::error::OpenAiError;
use crate::openai::params::{check_top_logprobs, max_tokens_or_n_predict, CommonParams};
use crate::openai::steps::Steps;
use crate::openai::stream::sse_with;
use crate::prompt;
use crate::request_context::Caller;
use crate::routes::llama_answer::{llama_defaults, LlamaAnswer};

/// Body of `POST /completion`.
#[derive(Debug, Deserialize)]
pub struct LlamaCompletionRequest {
    pub prompt: Option<Value>,
    /// Tokens to generate; −1 (llama.cpp's default): until EOS or the end of the context.
    pub n_predict: Option<i64>,
    /// llama.cpp takes OpenAI's name here too.
    pub max_tokens: Option<u32>,
    /// Alternatives per token in `completion_probabilities` (0: none).
    pub n_probs: Option<u32>,
    #[serde(flatten)]
    pub common: CommonParams,
}

impl crate::fields::Fields for LlamaCompletionRequest {
    const ROUTE: &'static str = "/completion";
    const ACCEPTED: &'static [&'static [&'static str]] = &[
        &["prompt", "n_predict", "max_tokens", "n_probs"],
        crate::fields::SAMPLING,
        crate::fields::STRUCTURED,
        crate::fields::LABELS,
        crate::fields::SPECULATIVE,
    ];
}

/// Handles a llama.cpp completion request.
pub async fn completion(
    State(state): State<AppState>,
    caller: Caller,
    body: Result<JsonBody<LlamaCompletionRequest>>,
) -> std::result::Result<Response, OpenAiError> {
    let JsonBody(mut req) = body?;
    let engine = state.engine.get()?;
    req.common.check_model(&engine)?;
    // llama.cpp's −1 asks for a random seed.
    if req.common.seed.as_ref().and_then(Value::as_i64) == Some(-1) {
        req.common.seed = None;
    }
    llama_defaults(&mut req.common);
    let sampling = req.common.sampling()?;
    let stop = req.common.stops()?;
    let probs = req.n_probs.filter(|&n| n > 0).map(|n| check_top_logprobs("n_probs", n)).transpose()?;
    let (input, _) = parse_prompt(req.prompt.as_ref())?;
    // −1 asks for the rest of the context; absent, the server's default length (as
    // llama-server's `--n-predict`).
    let to_the_end = req.n_predict == Some(-1) && req.max_tokens.is_none();
    let limit = max_tokens_or_n_predict(req.max_tokens, req.n_predict)?;
    let ids = prompt::tokenize(&engine, input, "prompt").await?;
    let room = prompt::room_left(&engine, ids.len());
    let max_tokens = match limit {
        Some(0) => return Err(Error::bad("n_predict", "n_predict must be at least 1 (or -1: until the end)").into()),
        Some(n) => n as usize,
        None if to_the_end => room,
        None => room.min(state.settings.default_max_tokens).max(1),
    };
    let text = engine.handle.text().clone();
    let prompt_text = text.tokenizer.as_ref().and_then(|t| t.decode(&ids).ok()).unwrap_or_default();
    let prompt_n = ids.len();
    let constraint = crate::structured::compile(&engine, req.common.structured(Vec::new())?).await?;
    let request =
        peregrine_engine::Request { top_logprobs: probs.unwrap_or(0), constraint, ..req.common.request(&engine, ids, max_tokens, sampling, stop)? };
    let job = jobs::submit(&state, &engine.handle, JobSpec { request, endpoint: "/completion", caller, ticker: false })?;
    let steps = Steps { job, text, logprobs: probs.is_some() };
    let out = LlamaAnswer::new(engine.model_id(), prompt_text, prompt_n, probs.is_some());
    if req.common.streaming() {
        Ok(sse_with(steps, out, state.settings.keep_alive, false))
    } else {
        Ok(Json(out.collect(steps).await?).into_response())
    }
}
