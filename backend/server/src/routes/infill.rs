//! `POST /infill`: llama.cpp's fill-in-the-middle endpoint, the one editor plugins
//! (llama.vscode, llama.vim) call. The request shape is llama.cpp's: `input_prefix`
//! and `input_suffix` (required), `input_extra` (`[{filename, text}]`), `prompt` (the
//! start of the middle), `n_predict` (−1 or absent: until the end of the context),
//! llama.cpp's sampling names and defaults, `stream`. The prompt is laid out as
//! llama.cpp's server lays it out (`peregrine_engine::infill`); the answer is
//! llama.cpp's `/completion` object (`content`, `stop`, `tokens_predicted`, …), streamed
//! as one `data: {…}` per piece of text and a last one with `"stop": true`.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use peregrine_engine::infill::{self, ExtraFile, InfillBudget, InfillInput};
use peregrine_engine::TextModel;
use serde::Deserialize;

use crate::app::AppState;
use crate::engine_slot::LoadedEngine;
use crate::error::{Error, Result};
use crate::extract::JsonBody;
use crate::jobs::{self, JobSpec};
use crate::openai::error::OpenAiError;
use crate::openai::params::CommonParams;
use crate::openai::steps::Steps;
use crate::openai::stream::sse_with;
use crate::prompt;
use crate::request_context::Caller;
use crate::routes::llama_answer::LlamaAnswer;

/// llama.cpp's default `n_batch`: prefix and suffix share this many tokens (¾ : ¼).
pub const INFILL_BATCH: usize = 2048;

/// One `input_extra` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtraChunk {
    pub text: String,
    /// llama.cpp's default name.
    #[serde(default = "default_filename")]
    pub filename: String,
}

fn default_filename() -> String {
    "tmp".into()
}

/// Body of `POST /infill`.
#[derive(Debug, Deserialize)]
pub struct InfillRequest {
    pub input_prefix: Option<String>,
    pub input_suffix: Option<String>,
    #[serde(default)]
    pub input_extra: Vec<ExtraChunk>,
    #[serde(default)]
    pub prompt: String,
    /// Tokens to generate; −1 (llama.cpp's default): until EOS or the end of the context.
    pub n_predict: Option<i64>,
    #[serde(flatten)]
    pub common: CommonParams,
}

impl crate::fields::Fields for InfillRequest {
    const ROUTE: &'static str = "/infill";
    const ACCEPTED: &'static [&'static [&'static str]] = &[
        &["input_prefix", "input_suffix", "input_extra", "prompt", "n_predict"],
        crate::fields::SAMPLING,
        crate::fields::LABELS,
    ];
}

/// The laid-out prompt of a fill-in-the-middle request, tokenized off the engine
/// thread; a model without FIM tokens is a 400 (on `param`) naming them.
pub async fn infill_prompt(engine: &LoadedEngine, input: InfillInput, predict: i64, param: &'static str) -> Result<Vec<u32>> {
    let text: std::sync::Arc<TextModel> = engine.handle.text().clone();
    let context = engine.handle.info().context_length;
    let unsupported = |e: peregrine_engine::Error| match e {
        peregrine_engine::Error::InvalidRequest(m) => Error::bad(param, m),
        other => Error::Engine(other),
    };
    infill::supported(&text).map_err(unsupported)?;
    let budget = InfillBudget { batch: INFILL_BATCH, predict, context };
    crate::blocking::tokenizer_task(move || infill::prompt_ids(&text, &input, &budget)).await?.map_err(unsupported)
}

/// Handles an infill request.
pub async fn infill(
    State(state): State<AppState>,
    caller: Caller,
    body: Result<JsonBody<InfillRequest>>,
) -> std::result::Result<Response, OpenAiError> {
    let JsonBody(mut req) = body?;
    let engine = state.engine.get()?;
    req.common.check_model(&engine)?;
    let prefix = req.input_prefix.take().ok_or_else(|| Error::bad("input_prefix", "\"input_prefix\" is required"))?;
    let suffix = req.input_suffix.take().ok_or_else(|| Error::bad("input_suffix", "\"input_suffix\" is required"))?;
    let predict = match req.n_predict {
        None => -1,
        Some(n) if n >= -1 => n,
        Some(_) => return Err(Error::bad("n_predict", "n_predict must be -1 (until the end) or a number of tokens").into()),
    };
    crate::routes::llama_answer::llama_defaults(&mut req.common);
    let sampling = req.common.sampling()?;
    let stop = req.common.stops()?;
    let extra = req.input_extra.drain(..).map(|c| ExtraFile { filename: c.filename, text: c.text }).collect();
    let input = InfillInput { prefix, suffix, extra, prompt: std::mem::take(&mut req.prompt) };
    let ids = infill_prompt(&engine, input, predict, "input_prefix").await?;
    let max_tokens = match usize::try_from(predict) {
        Ok(n) => n,
        Err(_) => prompt::room_left(&engine, ids.len()),
    };
    let text = engine.handle.text().clone();
    let prompt_text = text.tokenizer.as_ref().and_then(|t| t.decode(&ids).ok()).unwrap_or_default();
    let prompt_n = ids.len();
    let request = req.common.request(&engine, ids, max_tokens, sampling, stop)?;
    let job = jobs::submit(&state, &engine.handle, JobSpec { request, endpoint: "/infill", caller, ticker: false })?;
    let steps = Steps { job, text, logprobs: false };
    let out = LlamaAnswer::new(engine.model_id(), prompt_text, prompt_n, false);
    if req.common.streaming() {
        Ok(sse_with(steps, out, state.settings.keep_alive, false))
    } else {
        Ok(Json(out.collect(steps).await?).into_response())
    }
}
