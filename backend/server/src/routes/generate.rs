//! `POST /api/generate`: the playground's run (a completion, a chat turn after its
//! conversation, or an infill), answered with server-sent events
//! (`queued`* → `started` → `token`/`stats`* → `done` | `error`). Bad input and a full
//! queue are plain JSON errors (400/413/429/503) before any event is sent.

use std::convert::Infallible;

use axum::extract::State;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream};
use peregrine_api::playground::{GenerateRequest, Mode, StreamEvent, Surroundings, MAX_PROMPT_BYTES};
use peregrine_engine::infill::InfillInput;
use peregrine_engine::ChatMessage;
use peregrine_engine::SamplingParams;
use peregrine_engine::{Event, Prompt, Request};

use crate::app::AppState;
use crate::config::{MAX_STOP_BYTES, MAX_STOP_STRINGS};
use crate::error::{Error, Result};
use crate::extract::JsonBody;
use crate::jobs::{self, Job, JobSpec};
use crate::prompt;
use crate::request_context::Caller;
use crate::routes::infill::infill_prompt;

/// Starts a playground run.
pub async fn generate(State(state): State<AppState>, caller: Caller, body: Result<JsonBody<GenerateRequest>>) -> Result<Response> {
    let JsonBody(req) = body?;
    check_texts(&req.prompt, &req.around, req.mode)?;
    req.params.validate().map_err(|m| Error::BadRequest { message: m, param: None })?;
    check_stops(&req.params.stop)?;
    let engine = state.engine.get()?;
    let p = &req.params;
    let ids = match req.mode {
        Mode::Complete => prompt::tokenize(&engine, Prompt::Text(req.prompt), "prompt").await?,
        Mode::Chat => prompt::tokenize(&engine, Prompt::Chat(conversation(req.prompt, req.around)), "prompt").await?,
        Mode::Infill => {
            let fill = InfillInput { prefix: req.prompt, suffix: req.around.suffix, ..InfillInput::default() };
            infill_prompt(&engine, fill, p.max_tokens as i64, "mode").await?
        }
    };
    let request = Request {
        max_tokens: p.max_tokens as usize,
        sampling: SamplingParams {
            temperature: p.temperature,
            top_k: p.top_k as usize,
            top_p: p.top_p,
            seed: p.seed.unwrap_or_else(crate::ids::random_seed),
            ..SamplingParams::default()
        },
        stop: p.stop.clone(),
        ignore_eos: p.ignore_eos,
        cache_prompt: req.cache_prompt.unwrap_or(true),
        speculative: crate::speculative::engine_request(&req.speculative, engine.handle.verify_capacity())?,
        constraint: crate::structured::compile(&engine, crate::structured::json_schema(req.json_schema.as_ref())?).await?,
        ..Request::new(Prompt::Tokens(ids))
    };
    let job = jobs::submit(&state, &engine.handle, JobSpec { request, endpoint: "/api/generate", caller, ticker: true })?;
    Ok(Sse::new(events(job)).keep_alive(KeepAlive::new().interval(state.settings.keep_alive)).into_response())
}

impl crate::fields::Fields for GenerateRequest {
    const ROUTE: &'static str = "/api/generate";
    const ACCEPTED: &'static [&'static [&'static str]] = &[
        &["prompt", "mode", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "ignore_eos", "cache_prompt", "json_schema"],
        &["system", "history", "suffix"],
        crate::fields::SPECULATIVE,
    ];
}

/// The prompt and what surrounds it: within [`MAX_PROMPT_BYTES`] together (413), and
/// only the fields the mode uses (400).
pub fn check_texts(prompt: &str, around: &Surroundings, mode: Mode) -> Result<()> {
    let bytes = prompt.len() + around.text_bytes();
    if bytes > MAX_PROMPT_BYTES {
        return Err(Error::TooLarge(format!("the prompt and its context are {bytes} bytes; the limit is {MAX_PROMPT_BYTES}")));
    }
    match around.misplaced(mode) {
        Some((param, message)) => Err(Error::bad(param, message)),
        None => Ok(()),
    }
}

/// The chat messages of a playground turn: the system prompt, the earlier turns, then
/// the new user message.
fn conversation(prompt: String, around: Surroundings) -> Vec<ChatMessage> {
    let system = (!around.system.is_empty()).then(|| ChatMessage::new("system", around.system));
    let turns = around.history.into_iter().flat_map(|t| [ChatMessage::new("user", t.user), ChatMessage::new("assistant", t.assistant)]);
    system.into_iter().chain(turns).chain([ChatMessage::new("user", prompt)]).collect()
}

/// Stop strings: a few, short, non-empty.
pub fn check_stops(stop: &[String]) -> Result<()> {
    if stop.len() > MAX_STOP_STRINGS {
        return Err(Error::bad("stop", format!("at most {MAX_STOP_STRINGS} stop strings are allowed")));
    }
    if stop.iter().any(|s| s.is_empty() || s.len() > MAX_STOP_BYTES) {
        return Err(Error::bad("stop", format!("stop strings must be 1 to {MAX_STOP_BYTES} bytes long")));
    }
    Ok(())
}

/// The job's events as SSE; the stream ends after the terminal event.
fn events(job: Job) -> impl Stream<Item = std::result::Result<SseEvent, Infallible>> {
    stream::unfold(Some(job), |job| async move {
        let mut job = job?;
        loop {
            let event = job.next().await?;
            let terminal = matches!(event, Event::Done { .. } | Event::Error { .. });
            if let Some(wire) = to_wire(event) {
                let sse = SseEvent::default().event(wire.name()).json_data(&wire).unwrap_or_default();
                return Some((Ok(sse), (!terminal).then_some(job)));
            }
        }
    })
}

/// The playground's view of an engine event (`None`: not shown).
fn to_wire(event: Event) -> Option<StreamEvent> {
    Some(match event {
        Event::Queued { position } => StreamEvent::Queued { position: position as u32 },
        Event::Started { prompt_tokens } => StreamEvent::Started { prompt_tokens: prompt_tokens as u32 },
        Event::Token { text, .. } => StreamEvent::Token { text, tokens: 1 },
        Event::Text(text) => StreamEvent::Token { text, tokens: 0 },
        Event::Stats(s) => StreamEvent::Stats(s),
        Event::Done { finish_reason, usage, timings } => StreamEvent::Done { finish_reason, usage, timings },
        Event::Error { code, message } => StreamEvent::Error { code: code.as_str().into(), message, retry_after_ms: None },
        Event::PromptLogprobs(_) => return None,
    })
}
