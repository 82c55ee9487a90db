//! One run's lifecycle as the page sees it, driven by stream events. Kept free of
//! browser types so every transition is tested natively.

use peregrine_api::playground::{Mode, StreamEvent};
use peregrine_api::{FinishReason, Stats, Timings, Usage};

/// Where a run is.
#[derive(Debug, Clone, PartialEq)]
pub enum Phase {
    /// Nothing has run yet in this page.
    Idle,
    /// The request is sent; no event has come back yet.
    Connecting,
    /// Waiting behind `position` other requests (0 = next).
    Queued { position: u32 },
    /// The engine took it; tokens may be flowing.
    Streaming,
    /// The server finished it.
    Done { finish_reason: FinishReason },
    /// The user stopped it; the figures are those seen until then.
    Stopped,
    /// It failed; the page says why and offers to run again.
    Failed(RunError),
}

/// Why a run failed, each with its own advice.
#[derive(Debug, Clone, PartialEq)]
pub enum RunError {
    /// The server's queue is full: try again after `retry_after_ms`.
    Busy { message: String, retry_after_ms: Option<u64> },
    /// The connection dropped or never opened.
    Network { message: String },
    /// The server refused or failed the request.
    Server { code: String, message: String },
}

impl RunError {
    /// One sentence for the status line.
    pub fn describe(&self) -> String {
        match self {
            RunError::Busy { message, retry_after_ms: Some(ms) } => {
                format!("Server busy: try again in {} ({message}).", crate::format::seconds_rounded_up(*ms))
            }
            RunError::Busy { message, retry_after_ms: None } => format!("Server busy: try again shortly ({message})."),
            RunError::Network { message } => format!("Connection lost: {message}. Check the server and run again."),
            RunError::Server { code, message } => format!("The server could not run this ({code}): {message}"),
        }
    }
}

/// Everything the page shows about the current run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunState {
    pub phase: Phase,
    /// The prompt this run was started with (a share only carries a run of its own prompt).
    pub prompt: String,
    /// Chat answers render as markdown, completions as code, an infill in place.
    pub mode: Mode,
    /// Infill: the text after the insertion point (`prompt` is the text before it).
    pub suffix: String,
    pub output: String,
    /// Tokens counted from `token` events, so the counter moves between `stats` events.
    pub tokens: u32,
    pub prompt_tokens: Option<u32>,
    /// Latest live figures.
    pub stats: Stats,
    /// (elapsed ms, decode tok/s) samples for the chart.
    pub samples: Vec<(f64, f64)>,
    /// Final figures, once done.
    pub usage: Option<Usage>,
    pub timings: Option<Timings>,
    /// The JSON schema the answer was asked to follow, if any.
    pub schema: Option<serde_json::Value>,
}

impl Default for RunState {
    fn default() -> Self {
        RunState {
            phase: Phase::Idle,
            prompt: String::new(),
            mode: Mode::Complete,
            suffix: String::new(),
            output: String::new(),
            tokens: 0,
            prompt_tokens: None,
            stats: Stats::default(),
            samples: Vec::new(),
            usage: None,
            timings: None,
            schema: None,
        }
    }
}

impl RunState {
    /// A fresh run of `prompt`, request in flight.
    pub fn connecting(prompt: &str, mode: Mode) -> Self {
        RunState { phase: Phase::Connecting, prompt: prompt.to_string(), mode, ..Self::default() }
    }

    /// Whether a request is in flight (Stop applies, Generate waits).
    pub fn is_active(&self) -> bool {
        matches!(self.phase, Phase::Connecting | Phase::Queued { .. } | Phase::Streaming)
    }

    /// Applies one server event. Events after the end (or after Stop) are ignored.
    pub fn apply(&mut self, event: StreamEvent) {
        if !self.is_active() {
            return;
        }
        match event {
            StreamEvent::Queued { position } => self.phase = Phase::Queued { position },
            StreamEvent::Started { prompt_tokens } => {
                self.phase = Phase::Streaming;
                self.prompt_tokens = Some(prompt_tokens);
            }
            StreamEvent::Token { text, tokens } => {
                self.phase = Phase::Streaming;
                self.output.push_str(&text);
                self.tokens += tokens;
            }
            StreamEvent::Stats(stats) => {
                self.phase = Phase::Streaming;
                self.tokens = self.tokens.max(stats.tokens);
                if let Some(rate) = stats.decode_tok_per_s {
                    self.samples.push((stats.elapsed_ms, rate));
                }
                self.stats = stats;
            }
            StreamEvent::Done { finish_reason, usage, timings } => {
                self.tokens = usage.completion_tokens;
                self.usage = Some(usage);
                self.timings = Some(timings);
                self.prompt_tokens = Some(usage.prompt_tokens);
                if timings.predicted_n >= 2 {
                    let end = self.elapsed_ms().max(timings.ttft_ms + timings.predicted_ms);
                    self.samples.push((end, timings.predicted_per_second));
                }
                self.phase = Phase::Done { finish_reason };
            }
            StreamEvent::Error { code, message, retry_after_ms } => {
                let error = if code == "busy" || retry_after_ms.is_some() {
                    RunError::Busy { message, retry_after_ms }
                } else {
                    RunError::Server { code, message }
                };
                self.phase = Phase::Failed(error);
            }
        }
    }

    /// A short name of the phase, for `data-state` (styling and tests).
    pub fn state_name(&self) -> &'static str {
        match self.phase {
            Phase::Idle => "idle",
            Phase::Connecting => "connecting",
            Phase::Queued { .. } => "queued",
            Phase::Streaming => "streaming",
            Phase::Done { .. } => "done",
            Phase::Stopped => "stopped",
            Phase::Failed(_) => "error",
        }
    }

    /// The user pressed Stop: freeze what was seen.
    pub fn stop(&mut self) {
        if self.is_active() {
            self.phase = Phase::Stopped;
        }
    }

    /// The request failed outside the event stream.
    pub fn fail(&mut self, error: RunError) {
        if self.is_active() {
            self.phase = Phase::Failed(error);
        }
    }

    /// The stream ended without a terminal event.
    pub fn stream_ended(&mut self) {
        self.fail(RunError::Network { message: "the stream ended before the run finished".into() });
    }

    /// Decode tokens/s to show: the final figure once done, else the live one.
    pub fn tok_per_s(&self) -> Option<f64> {
        match self.timings {
            Some(t) if t.predicted_n >= 2 => Some(t.predicted_per_second),
            Some(_) => None,
            None => self.stats.decode_tok_per_s,
        }
    }

    /// Tokens per pass over the weights to show (above 1 where speculative decoding's
    /// drafts are accepted): the final figure once done, else the live one.
    pub fn tokens_per_step(&self) -> Option<f64> {
        match self.timings {
            Some(t) if t.predicted_n > t.draft_n_accepted => Some(t.predicted_n as f64 / (t.predicted_n - t.draft_n_accepted) as f64),
            Some(_) => None,
            None => self.stats.tokens_per_step,
        }
    }

    /// Whether a finished answer validates against the schema it was asked to follow
    /// (`None` without a schema, or before the run ended).
    pub fn schema_verdict(&self) -> Option<crate::schema_check::Verdict> {
        let schema = self.schema.as_ref()?;
        matches!(self.phase, Phase::Done { .. } | Phase::Stopped).then(|| crate::schema_check::check(schema, &self.output))
    }

    /// Time to first token to show.
    pub fn ttft_ms(&self) -> Option<f64> {
        match self.timings {
            Some(t) if t.predicted_n >= 1 => Some(t.ttft_ms),
            Some(_) => None,
            None => self.stats.ttft_ms,
        }
    }

    /// Elapsed ms since the engine took the request.
    pub fn elapsed_ms(&self) -> f64 {
        match self.timings {
            Some(t) => self.stats.elapsed_ms.max(t.ttft_ms + t.predicted_ms),
            None => self.stats.elapsed_ms,
        }
    }

    /// A one-line summary of a finished or stopped run.
    pub fn summary(&self) -> Option<String> {
        use crate::format::{ms, seconds, tok_per_s};
        let how = match &self.phase {
            Phase::Done { finish_reason: FinishReason::Stop } => "Done (the model stopped)",
            Phase::Done { finish_reason: FinishReason::Length } => "Done (max tokens reached)",
            Phase::Done { finish_reason: FinishReason::Cancelled } => "Cancelled",
            Phase::Stopped => "Stopped",
            _ => return None,
        };
        let mut s = format!(
            "{how}: {} tokens in {} at {} tok/s decode, first token after {}",
            self.tokens,
            seconds(self.elapsed_ms()),
            tok_per_s(self.tok_per_s()),
            ms(self.ttft_ms())
        );
        if let Some(t) = self.timings.filter(|t| t.prompt_n > 0) {
            s.push_str(&format!("; prompt {} tokens at {} tok/s", t.prompt_n, tok_per_s(Some(t.prompt_per_second))));
        }
        s.push('.');
        Some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(tokens: u32, rate: Option<f64>, elapsed_ms: f64) -> StreamEvent {
        StreamEvent::Stats(Stats { tokens, ttft_ms: Some(100.0), decode_tok_per_s: rate, elapsed_ms, tokens_per_step: None })
    }

    #[test]
    fn a_run_goes_queued_streaming_done_and_keeps_the_final_figures() {
        let mut r = RunState::connecting("def f():", Mode::Complete);
        assert!(r.is_active());
        r.apply(StreamEvent::Queued { position: 1 });
        assert_eq!(r.phase, Phase::Queued { position: 1 });
        r.apply(StreamEvent::Started { prompt_tokens: 4 });
        r.apply(StreamEvent::Token { text: "  return".into(), tokens: 2 });
        assert_eq!((r.tokens, r.phase.clone()), (2, Phase::Streaming));
        r.apply(stats(2, Some(9.0), 300.0));
        r.apply(StreamEvent::Token { text: " 1".into(), tokens: 1 });
        assert_eq!(r.tok_per_s(), Some(9.0));
        let timings = Timings {
            prompt_n: 4,
            prompt_ms: 100.0,
            prompt_per_second: 40.0,
            predicted_n: 3,
            predicted_ms: 200.0,
            predicted_per_second: 10.0,
            ttft_ms: 100.0,
            cache_n: 0,
            ..Timings::default()
        };
        let usage = Usage { prompt_tokens: 4, completion_tokens: 3, total_tokens: 7, ..Usage::default() };
        r.apply(StreamEvent::Done { finish_reason: FinishReason::Length, usage, timings });
        assert_eq!(r.phase, Phase::Done { finish_reason: FinishReason::Length });
        assert_eq!(
            (r.output.as_str(), r.tokens, r.tok_per_s(), r.ttft_ms(), r.elapsed_ms()),
            ("  return 1", 3, Some(10.0), Some(100.0), 300.0)
        );
        assert_eq!(r.samples.last(), Some(&(300.0, 10.0)));
        assert!(r.summary().unwrap().starts_with("Done (max tokens reached): 3 tokens in 0.30 s at 10.0 tok/s"));
        r.apply(StreamEvent::Token { text: "late".into(), tokens: 1 });
        assert_eq!(r.output, "  return 1", "nothing after the terminal event");
    }

    #[test]
    fn a_schema_run_is_judged_once_it_ended() {
        let mut r = RunState { schema: Some(serde_json::json!({"type": "object", "required": ["a"]})), ..RunState::connecting("x", Mode::Chat) };
        r.apply(StreamEvent::Token { text: "{\"a\": 1}".into(), tokens: 3 });
        assert_eq!(r.schema_verdict(), None, "not while streaming");
        r.apply(StreamEvent::Done { finish_reason: FinishReason::Stop, usage: Usage::default(), timings: Timings::default() });
        assert_eq!(r.schema_verdict(), Some(crate::schema_check::Verdict::Valid { unchecked: vec![] }));
        assert_eq!(RunState::connecting("x", Mode::Chat).schema_verdict(), None, "no schema, no verdict");
    }

    #[test]
    fn tokens_per_step_is_live_then_final() {
        let mut r = RunState::connecting("x", Mode::Complete);
        assert_eq!(r.tokens_per_step(), None);
        r.apply(StreamEvent::Stats(Stats { tokens: 6, tokens_per_step: Some(2.0), ..Stats::default() }));
        assert_eq!(r.tokens_per_step(), Some(2.0));
        let timings = Timings { predicted_n: 10, draft_n: 8, draft_n_accepted: 6, ..Timings::default() };
        let usage = Usage { completion_tokens: 10, ..Usage::default() };
        r.apply(StreamEvent::Done { finish_reason: FinishReason::Length, usage, timings });
        assert_eq!(r.tokens_per_step(), Some(2.5));
    }

    #[test]
    fn stop_freezes_the_output() {
        let mut r = RunState::connecting("x", Mode::Chat);
        r.apply(StreamEvent::Token { text: "a".into(), tokens: 1 });
        r.stop();
        r.apply(StreamEvent::Token { text: "b".into(), tokens: 1 });
        assert_eq!((r.phase.clone(), r.output.as_str()), (Phase::Stopped, "a"));
        assert!(r.summary().unwrap().starts_with("Stopped: 1 tokens"));
        assert!(!r.is_active());
    }

    #[test]
    fn busy_errors_carry_the_retry_time() {
        let mut r = RunState::connecting("x", Mode::Chat);
        r.apply(StreamEvent::Error { code: "busy".into(), message: "the queue is full".into(), retry_after_ms: Some(2100) });
        let Phase::Failed(e) = &r.phase else { panic!("{:?}", r.phase) };
        assert_eq!(e.describe(), "Server busy: try again in 3 s (the queue is full).");
        let mut r = RunState::connecting("x", Mode::Chat);
        r.stream_ended();
        assert!(matches!(r.phase, Phase::Failed(RunError::Network { .. })));
    }

    #[test]
    fn a_single_token_has_no_decode_rate() {
        let mut r = RunState::connecting("x", Mode::Chat);
        let timings = Timings { predicted_n: 1, ttft_ms: 50.0, ..Timings::default() };
        r.apply(StreamEvent::Done { finish_reason: FinishReason::Stop, usage: Usage::default(), timings });
        assert_eq!((r.tok_per_s(), r.ttft_ms()), (None, Some(50.0)));
    }
}
