//! Streaming answers: each step rendered to `data: {chunk}` events, then
//! `data: [DONE]` (OpenAI; llama.cpp's own endpoints end without it); a failure
//! mid-stream is one `data: {"error": …}` event instead. Several choices (`n` > 1)
//! stream interleaved, each chunk carrying its choice's index. The Responses and
//! Messages APIs name each event (`event: <type>`) after its payload's `type`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use serde_json::Value;

use super::error::error_body;
use super::steps::{Step, Steps};

/// Turns steps into chunk objects (one endpoint's format).
pub trait Render: Send + 'static {
    /// Chunks for `step`; `Failed` never reaches it.
    fn render(&mut self, step: Step) -> Vec<Value>;

    /// The event that ends a stream which failed after it started.
    fn failure(&mut self, e: &crate::error::Error) -> Value {
        error_body(e)
    }
}

/// How a stream's events are framed.
#[derive(Debug, Clone, Copy)]
struct Framing {
    /// End with `data: [DONE]`.
    done_marker: bool,
    /// Name each event after its payload's `type` (`event: response.created`).
    named: bool,
}

struct Driver<R> {
    steps: Steps,
    render: R,
    pending: VecDeque<SseEvent>,
    ended: bool,
    framing: Framing,
}

impl Framing {
    fn event(self, payload: &Value) -> SseEvent {
        let event = SseEvent::default().data(payload.to_string());
        match payload.get("type").and_then(Value::as_str) {
            Some(name) if self.named => event.event(name),
            _ => event,
        }
    }
}

/// The SSE response for `steps`, ending with `data: [DONE]`.
pub fn sse<R: Render>(steps: Steps, render: R, keep_alive: Duration) -> Response {
    sse_with(steps, render, keep_alive, true)
}

/// [`sse`], with or without the closing `data: [DONE]`.
pub fn sse_with<R: Render>(steps: Steps, render: R, keep_alive: Duration, done_marker: bool) -> Response {
    drive(steps, render, keep_alive, Framing { done_marker, named: false })
}

/// The SSE response for `steps` with each event named after its payload's `type` and
/// no closing marker (OpenAI's Responses API, Anthropic's Messages API).
pub fn sse_named<R: Render>(steps: Steps, render: R, keep_alive: Duration) -> Response {
    drive(steps, render, keep_alive, Framing { done_marker: false, named: true })
}

fn drive<R: Render>(steps: Steps, render: R, keep_alive: Duration, framing: Framing) -> Response {
    let driver = Driver { steps, render, pending: VecDeque::new(), ended: false, framing };
    let events = stream::unfold(driver, |mut d| async move {
        loop {
            if let Some(e) = d.pending.pop_front() {
                return Some((Ok::<_, Infallible>(e), d));
            }
            if d.ended {
                return None;
            }
            match d.steps.next().await {
                None => d.ended = true,
                Some(Step::Failed(e)) => {
                    let payload = d.render.failure(&e);
                    d.pending.push_back(d.framing.event(&payload));
                    d.ended = true;
                }
                Some(step) => {
                    let done = matches!(step, Step::Done { .. });
                    for chunk in d.render.render(step) {
                        d.pending.push_back(d.framing.event(&chunk));
                    }
                    if done {
                        if d.framing.done_marker {
                            d.pending.push_back(SseEvent::default().data("[DONE]"));
                        }
                        d.ended = true;
                    }
                }
            }
        }
    });
    Sse::new(events).keep_alive(KeepAlive::new().interval(keep_alive)).into_response()
}

/// The streamed answer to one request's choices (one engine job each, `out` making
/// each choice's renderer): a single choice as [`sse`], several through [`sse_choices`].
pub fn sse_jobs<R: Render>(
    mut jobs: Vec<crate::jobs::Job>,
    text: std::sync::Arc<peregrine_engine::TextModel>,
    logprobs: bool,
    out: impl Fn() -> R,
    keep_alive: Duration,
) -> Response {
    if jobs.len() == 1 {
        return sse(Steps { job: jobs.remove(0), text, logprobs }, out(), keep_alive);
    }
    let parts = jobs.into_iter().map(|job| (Steps { job, text: text.clone(), logprobs }, out())).collect();
    sse_choices(parts, keep_alive)
}

/// What the per-choice streams of [`sse_choices`] yield.
enum Piece {
    Chunk(usize, Value),
    Failed(crate::error::Error),
}

/// The SSE response for several choices of one request (`n` > 1): each choice's steps
/// rendered as for one, their chunks interleaved as they come with `index` set to the
/// choice's, the usage chunks (`choices: []`) of all choices merged into one at the end
/// (prompt counted once), then `data: [DONE]`; a failure ends the whole stream.
pub fn sse_choices<R: Render>(parts: Vec<(Steps, R)>, keep_alive: Duration) -> Response {
    use futures_util::StreamExt;
    let per_choice = parts.into_iter().enumerate().map(|(i, (steps, render))| {
        stream::unfold(Some((steps, render)), move |state| async move {
            let (mut steps, mut render) = state?;
            match steps.next().await? {
                Step::Failed(e) => Some((vec![Piece::Failed(e)], None)),
                step => {
                    let done = matches!(step, Step::Done { .. });
                    let pieces: Vec<Piece> = render.render(step).into_iter().map(|c| Piece::Chunk(i, c)).collect();
                    Some((pieces, (!done).then_some((steps, render))))
                }
            }
        })
        .flat_map(stream::iter)
        .boxed()
    });
    let merged = stream::select_all(per_choice);
    let events = stream::unfold((merged, None::<Value>, false), |(mut merged, mut usage, ended)| async move {
        if ended {
            return None;
        }
        loop {
            match merged.next().await {
                None => {
                    let mut out = Vec::new();
                    if let Some(u) = usage.take() {
                        out.push(SseEvent::default().data(u.to_string()));
                    }
                    out.push(SseEvent::default().data("[DONE]"));
                    return Some((stream::iter(out), (merged, None, true)));
                }
                Some(Piece::Failed(e)) => {
                    let event = SseEvent::default().data(error_body(&e).to_string());
                    return Some((stream::iter(vec![event]), (merged, None, true)));
                }
                Some(Piece::Chunk(i, mut c)) => {
                    if c["choices"].as_array().is_some_and(|a| a.is_empty()) {
                        // A choice's usage chunk: sum the completions into one.
                        usage = Some(match usage.take() {
                            None => c,
                            Some(mut u) => {
                                let add = c["usage"]["completion_tokens"].as_u64().unwrap_or(0);
                                let total = u["usage"]["completion_tokens"].as_u64().unwrap_or(0) + add;
                                u["usage"]["completion_tokens"] = total.into();
                                u["usage"]["total_tokens"] = (u["usage"]["prompt_tokens"].as_u64().unwrap_or(0) + total).into();
                                u
                            }
                        });
                        continue;
                    }
                    if let Some(first) = c["choices"].get_mut(0) {
                        first["index"] = i.into();
                    }
                    return Some((stream::iter(vec![SseEvent::default().data(c.to_string())]), (merged, usage, false)));
                }
            }
        }
    })
    .flatten()
    .map(Ok::<_, Infallible>);
    Sse::new(events).keep_alive(KeepAlive::new().interval(keep_alive)).into_response()
}
