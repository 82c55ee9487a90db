//! Streaming answers: each step rendered to `data: {chunk}` events, then
//! `data: [DONE]` (OpenAI; llama.cpp's own endpoints end without it); a failure
//! mid-stream is one `data: {"error": …}` event instead.

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
}

struct Driver<R> {
    steps: Steps,
    render: R,
    pending: VecDeque<SseEvent>,
    ended: bool,
    done_marker: bool,
}

/// The SSE response for `steps`, ending with `data: [DONE]`.
pub fn sse<R: Render>(steps: Steps, render: R, keep_alive: Duration) -> Response {
    sse_with(steps, render, keep_alive, true)
}

/// [`sse`], with or without the closing `data: [DONE]`.
pub fn sse_with<R: Render>(steps: Steps, render: R, keep_alive: Duration, done_marker: bool) -> Response {
    let driver = Driver { steps, render, pending: VecDeque::new(), ended: false, done_marker };
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
                    d.pending.push_back(SseEvent::default().data(error_body(&e).to_string()));
                    d.ended = true;
                }
                Some(step) => {
                    let done = matches!(step, Step::Done { .. });
                    for chunk in d.render.render(step) {
                        d.pending.push_back(SseEvent::default().data(chunk.to_string()));
                    }
                    if done {
                        if d.done_marker {
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
