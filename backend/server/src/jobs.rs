//! One accepted request from the handler's side: per-client slot, queue admission
//! (429s), then a stream of engine events with the server's additions: a stats tick
//! when tokens are slower than 250 ms, the request timeout, metrics (TTFT and
//! latency from the request's arrival, queue time from admission), one log line.
//! Dropping a [`Job`] before its terminal event cancels it in the engine.

use std::sync::atomic::Ordering;
use std::time::Instant;

use peregrine_api::timing::TokenClock;
use peregrine_api::{FinishReason, Timings, Usage};
use peregrine_engine::{CancelHandle, EngineHandle, Rejected};
use peregrine_engine::{ErrorCode, Event, Request};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::sleep_until;

use crate::app::AppState;
use crate::client_limit::ClientGuard;
use crate::config::{DEFAULT_RETRY_AFTER_SECS, MAX_RETRY_AFTER_SECS, STATS_INTERVAL};
use crate::error::{Error, Result};
use crate::request_context::Caller;

/// What a handler submits.
pub struct JobSpec {
    pub request: Request,
    /// Route name for logs, e.g. `/api/generate`.
    pub endpoint: &'static str,
    pub caller: Caller,
    /// Emit server-side stats ticks (the playground stream).
    pub ticker: bool,
}

/// How a request ended, for logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Finished(FinishReason),
    Failed,
    TimedOut,
    /// The client went away before the terminal event.
    Abandoned,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Finished(FinishReason::Stop) => "stop",
            Outcome::Finished(FinishReason::Length) => "length",
            Outcome::Finished(FinishReason::Cancelled) | Outcome::Abandoned => "cancelled",
            Outcome::Failed => "error",
            Outcome::TimedOut => "timeout",
        }
    }
}

/// A request in the engine's queue or running.
pub struct Job {
    events: UnboundedReceiver<Event>,
    cancel: CancelHandle,
    _client: Option<ClientGuard>,
    state: AppState,
    endpoint: &'static str,
    caller: Caller,
    ticker: bool,
    /// Admitted to the queue (`caller.arrived` is when the request reached the server).
    submitted: Instant,
    deadline: Option<Instant>,
    started: Option<Instant>,
    last_token: Option<Instant>,
    last_stats: Instant,
    /// Server-side clock for ticks between engine stats (ms since `started`).
    clock: TokenClock,
    prompt_tokens: usize,
    done: bool,
}

/// One of the client's in-flight requests under `--max-per-client` (a 429, counted in
/// the metrics, when it has them all); every route that does work for a client takes one.
pub fn client_slot(state: &AppState, client: Option<std::net::IpAddr>) -> Result<Option<crate::client_limit::ClientGuard>> {
    state.clients.acquire(client).map_err(|_| {
        state.metrics.rejected("client_limit");
        Error::ClientLimit { limit: state.clients.max(), retry_after_secs: DEFAULT_RETRY_AFTER_SECS }
    })
}

/// Admits a request: per-client limit, then the engine queue.
pub fn submit(state: &AppState, engine: &EngineHandle, spec: JobSpec) -> Result<Job> {
    // A request the model cannot serve (over-long, ids outside the vocabulary) is a 400
    // before it takes a client slot or a place in the queue.
    engine.admit(&spec.request)?;
    let guard = client_slot(state, spec.caller.client)?;
    // The queue lets clients take turns.
    let request = peregrine_engine::Request { client: spec.caller.client, ..spec.request };
    let submission = engine.try_submit(request).map_err(|r| match r {
        Rejected::QueueFull { waiting } => {
            state.metrics.rejected("queue_full");
            Error::QueueFull { waiting, retry_after_secs: retry_after(state, waiting) }
        }
        Rejected::ShuttingDown => Error::Unavailable("the server is shutting down".into()),
    })?;
    let now = Instant::now();
    Ok(Job {
        events: submission.events,
        cancel: submission.cancel,
        _client: guard,
        state: state.clone(),
        endpoint: spec.endpoint,
        caller: spec.caller,
        ticker: spec.ticker,
        submitted: now,
        deadline: state.settings.request_timeout.map(|t| now + t),
        started: None,
        last_token: None,
        last_stats: now,
        clock: TokenClock::default(),
        prompt_tokens: 0,
        done: false,
    })
}

/// Seconds until a slot is likely free: the mean request time × the requests ahead.
fn retry_after(state: &AppState, waiting: usize) -> u64 {
    match state.metrics.e2e_latency.mean() {
        Some(mean) => ((mean * (waiting + 1) as f64).ceil() as u64).clamp(DEFAULT_RETRY_AFTER_SECS, MAX_RETRY_AFTER_SECS),
        None => DEFAULT_RETRY_AFTER_SECS,
    }
}

impl Job {
    /// The next event; `None` after the terminal one. Adds stats ticks (with `ticker`)
    /// and turns the time limit into a terminal `Error { code: Timeout }`.
    pub async fn next(&mut self) -> Option<Event> {
        if self.done {
            return None;
        }
        let tick_at = (self.last_stats + STATS_INTERVAL).into();
        let deadline = self.deadline.map(tokio::time::Instant::from_std);
        let tick = self.ticker && self.started.is_some();
        tokio::select! {
            event = self.events.recv() => {
                let event = event.unwrap_or_else(|| Event::Error { code: ErrorCode::Internal, message: "the engine stopped without finishing the request".into() });
                self.observe(&event);
                Some(event)
            }
            _ = sleep_until(tick_at), if tick => {
                let now = Instant::now();
                self.last_stats = now;
                Some(Event::Stats(self.clock.stats(self.ms_since_start(now))))
            }
            _ = sleep_until(deadline.unwrap_or_else(tokio::time::Instant::now)), if deadline.is_some() => {
                self.cancel.cancel();
                let limit = self.state.settings.request_timeout.map(|t| t.as_secs_f64()).unwrap_or(0.0);
                self.finish(Outcome::TimedOut, None, None);
                Some(Event::Error { code: ErrorCode::Timeout, message: format!("the request took longer than the server's limit of {limit} s") })
            }
        }
    }

    /// Prompt length as the engine counted it (after `Started`).
    pub fn prompt_tokens(&self) -> usize {
        self.prompt_tokens
    }

    fn ms_since_start(&self, now: Instant) -> f64 {
        self.started.map(|s| now.duration_since(s).as_secs_f64() * 1000.0).unwrap_or(0.0)
    }

    fn observe(&mut self, event: &Event) {
        let now = Instant::now();
        let m = &self.state.metrics;
        match event {
            Event::Started { prompt_tokens } => {
                self.started = Some(now);
                self.last_stats = now;
                self.prompt_tokens = *prompt_tokens;
                m.queue_time.observe(now.duration_since(self.submitted).as_secs_f64());
            }
            Event::Token { sampled, .. } => {
                match self.last_token {
                    Some(prev) => m.inter_token_latency.observe(now.duration_since(prev).as_secs_f64()),
                    None => m.time_to_first_token.observe(now.duration_since(self.caller.arrived).as_secs_f64()),
                }
                self.last_token = Some(now);
                let ms = self.ms_since_start(now);
                self.clock.tick(ms, sampled.accepted_draft);
            }
            Event::Stats(_) => self.last_stats = now,
            Event::Done { finish_reason, usage, timings } => self.finish(Outcome::Finished(*finish_reason), Some(usage), Some(timings)),
            Event::Error { message, .. } => {
                tracing::debug!(endpoint = self.endpoint, "request failed: {message}");
                self.finish(Outcome::Failed, None, None)
            }
            Event::Queued { .. } | Event::PromptLogprobs(_) | Event::Text(_) => {}
        }
    }

    fn finish(&mut self, outcome: Outcome, usage: Option<&Usage>, timings: Option<&Timings>) {
        if self.done {
            return;
        }
        self.done = true;
        let m = &self.state.metrics;
        let total = self.caller.arrived.elapsed();
        m.e2e_latency.observe(total.as_secs_f64());
        m.finished(outcome.label());
        // Without a `Done` (cancelled, failed, timed out) count what the server saw.
        let (prompt, generated) = usage
            .map(|u| (u.prompt_tokens as u64, u.completion_tokens as u64))
            .unwrap_or((self.prompt_tokens as u64, self.clock.tokens as u64));
        m.prompt_tokens.fetch_add(prompt, Ordering::Relaxed);
        m.generation_tokens.fetch_add(generated, Ordering::Relaxed);
        if let Some(t) = timings {
            m.draft_tokens.fetch_add(u64::from(t.draft_n), Ordering::Relaxed);
            m.draft_accepted.fetch_add(u64::from(t.draft_n_accepted), Ordering::Relaxed);
        }
        m.request_prompt_tokens.observe(prompt as f64);
        m.request_generation_tokens.observe(generated as f64);
        let queue_ms = self.started.map(|s| s.duration_since(self.submitted).as_secs_f64() * 1000.0);
        tracing::info!(
            request_id = &*self.caller.request_id,
            endpoint = self.endpoint,
            client = self.caller.client.map(|c| c.to_string()),
            outcome = outcome.label(),
            prompt_tokens = usage.map(|u| u.prompt_tokens).unwrap_or(self.prompt_tokens as u32),
            completion_tokens = usage.map(|u| u.completion_tokens).unwrap_or(self.clock.tokens),
            queue_ms = queue_ms.map(|q| q.round() as u64),
            ttft_ms = timings.map(|t| t.ttft_ms.round() as u64),
            decode_tok_s = timings.map(|t| (t.predicted_per_second * 10.0).round() / 10.0),
            total_ms = total.as_millis() as u64,
            "request"
        );
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if !self.done {
            // The client left: stop at the next token boundary, or never start.
            self.cancel.cancel();
            self.finish(Outcome::Abandoned, None, None);
        }
    }
}
