//! Runs one request on a runtime: tokenize (or template), generate, detokenize
//! incrementally, apply stop strings, and report events and timings.

use std::sync::Arc;
use std::time::Instant;

use peregrine_api::{timing::TokenClock, FinishReason, Usage};

use crate::error::{Error, Result};
use crate::request::{ErrorCode, Event, Prompt, PromptToken, Request, STATS_INTERVAL};
use crate::runtime::{Cancel, DecodeJob, Flow, RunEnd, Runtime};
use crate::sampling::{log_softmax, top_k_indices, Sampled, TokenLogprob, MAX_TOP_LOGPROBS};
use crate::stop::StopMatcher;
use crate::template::ChatTemplate;
use crate::tokenizer::{Detokenizer, Tokenizer};

/// A runtime with the text side of the model (what the loaders build).
pub struct Generator {
    pub runtime: Box<dyn Runtime>,
    /// `None` for synthetic models: only token prompts are accepted then.
    pub tokenizer: Option<Tokenizer>,
    pub template: Option<ChatTemplate>,
}

impl Generator {
    /// Splits the generator into what the engine thread runs and the text side that
    /// request handlers share (they tokenize and check prompts before queueing).
    pub fn into_runner(self) -> Runner {
        let vocab_size = self.runtime.config().vocab_size;
        let text = TextModel { tokenizer: self.tokenizer, template: self.template, vocab_size };
        Runner { runtime: self.runtime, text: Arc::new(text) }
    }
}

/// The tokenizer and chat template of a model; immutable, so shared across threads.
pub struct TextModel {
    /// `None` for synthetic models: only token prompts are accepted then.
    pub tokenizer: Option<Tokenizer>,
    pub template: Option<ChatTemplate>,
    /// The runtime's vocabulary size (token-id prompts are checked against it).
    pub vocab_size: usize,
}

impl TextModel {
    /// Every id inside the vocabulary, else a client error naming the first that is not.
    pub fn check_ids(&self, ids: &[u32]) -> Result<()> {
        match ids.iter().find(|&&id| id as usize >= self.vocab_size) {
            Some(bad) => Err(Error::InvalidRequest(format!("token id {bad} is outside the vocabulary ({})", self.vocab_size))),
            None => Ok(()),
        }
    }

    /// Turns a prompt into ids.
    pub fn prompt_ids(&self, prompt: &Prompt) -> Result<Vec<u32>> {
        let need_tok =
            || self.tokenizer.as_ref().ok_or_else(|| Error::InvalidRequest("this model has no tokenizer; send token ids".into()));
        match prompt {
            Prompt::Tokens(ids) => {
                self.check_ids(ids)?;
                Ok(ids.clone())
            }
            Prompt::Text(text) => need_tok()?.encode(text, true),
            Prompt::Chat(messages) => {
                let template = self
                    .template
                    .as_ref()
                    .ok_or_else(|| Error::InvalidRequest("this model has no chat template; use completion mode".into()))?;
                let text = template.render(messages, true)?;
                // The template writes BOS itself where the model wants one.
                need_tok()?.encode(&text, false)
            }
        }
    }

    /// The text of one token (special tokens spelled out; a partial UTF-8 sequence
    /// becomes U+FFFD), or "" without a tokenizer.
    pub fn token_str(&self, id: u32) -> String {
        self.tokenizer.as_ref().and_then(|t| t.decode(&[id]).ok()).unwrap_or_default()
    }
}

/// What the engine thread owns: the runtime, plus a shared handle on the text side.
pub struct Runner {
    runtime: Box<dyn Runtime>,
    text: Arc<TextModel>,
}

impl Runner {
    /// The text side, for handlers that tokenize before queueing.
    pub fn text(&self) -> &Arc<TextModel> {
        &self.text
    }

    /// The runtime (model shape and backend).
    pub fn runtime(&self) -> &dyn Runtime {
        self.runtime.as_ref()
    }

    /// Runs `request`, sending events through `emit` (which returns false once
    /// nobody listens: that cancels at the next token). `cancel` says the same between
    /// prompt chunks, where no event is sent. Errors become an `Error` event.
    pub fn run(&mut self, request: &Request, cancel: Cancel<'_>, emit: &mut dyn FnMut(Event) -> bool) {
        if let Err(e) = self.run_inner(request, cancel, emit) {
            emit(Event::Error { code: ErrorCode::from(&e), message: e.to_string() });
        }
    }

    fn run_inner(&mut self, request: &Request, cancel: Cancel<'_>, emit: &mut dyn FnMut(Event) -> bool) -> Result<()> {
        let start = Instant::now();
        let ms = move || start.elapsed().as_secs_f64() * 1000.0;
        let text = self.text.clone();
        let prompt = text.prompt_ids(&request.prompt)?;
        crate::admission::admit(self.runtime.config(), &prompt, request.max_tokens, &request.sampling, request.top_logprobs)?;
        let prompt_n = prompt.len() as u32;
        let finish = |emit: &mut dyn FnMut(Event) -> bool, reason, clock: &TokenClock| {
            let usage = Usage { prompt_tokens: prompt_n, completion_tokens: clock.tokens, total_tokens: prompt_n + clock.tokens };
            emit(Event::Done { finish_reason: reason, usage, timings: clock.timings(prompt_n) });
        };
        let mut clock = TokenClock::default();
        if !emit(Event::Started { prompt_tokens: prompt.len() }) {
            finish(emit, FinishReason::Cancelled, &clock);
            return Ok(());
        }
        if request.echo_logprobs {
            let scored = self.score_prompt(&prompt, request.top_logprobs)?;
            if !emit(Event::PromptLogprobs(scored)) {
                finish(emit, FinishReason::Cancelled, &clock);
                return Ok(());
            }
        }
        if request.max_tokens == 0 {
            finish(emit, FinishReason::Length, &clock);
            return Ok(());
        }
        let stop_tokens: Vec<u32> = match (&text.tokenizer, request.ignore_eos) {
            (Some(t), false) => t.eos_ids().to_vec(),
            _ => Vec::new(),
        };
        let mut detok: Option<Detokenizer<'_>> = text.tokenizer.as_ref().map(|t| t.detokenizer());
        let mut detok_error = None;
        let mut stops = StopMatcher::new(&request.stop);
        let mut last_stats = 0.0;
        let mut hit_stop_string = false;
        let mut listener_gone = false;
        let job = DecodeJob {
            prompt: &prompt,
            max_tokens: request.max_tokens,
            sampling: &request.sampling,
            stop_tokens: &stop_tokens,
            top_logprobs: request.top_logprobs,
            cancel,
        };
        let mut on_token = |s: &Sampled| -> Flow {
            // A cancel that landed during the prompt's last chunk: nothing more goes out.
            if cancel.requested() {
                listener_gone = true;
                return Flow::Stop;
            }
            let now = ms();
            clock.tick(now);
            let piece = match detok.as_mut().map(|d| d.push(s.id)) {
                Some(Ok(text)) => text,
                Some(Err(e)) => {
                    detok_error = Some(e);
                    return Flow::Stop;
                }
                None => String::new(),
            };
            let scan = stops.push(&piece);
            if !emit(Event::Token { id: s.id, text: scan.emit, sampled: s.clone() }) {
                listener_gone = true;
                return Flow::Stop;
            }
            if now - last_stats >= STATS_INTERVAL.as_secs_f64() * 1e3 {
                last_stats = now;
                emit(Event::Stats(clock.stats(now)));
            }
            if scan.stopped {
                hit_stop_string = true;
                return Flow::Stop;
            }
            Flow::Continue
        };
        let end = self.runtime.generate(&job, &mut on_token)?;
        if let Some(e) = detok_error {
            return Err(e);
        }
        // A gone or cancelling listener still gets a terminal event if it can hear it.
        let reason = match end {
            _ if listener_gone => FinishReason::Cancelled,
            RunEnd::StopToken => FinishReason::Stop,
            RunEnd::Length => FinishReason::Length,
            RunEnd::Stopped if hit_stop_string => FinishReason::Stop,
            RunEnd::Stopped => FinishReason::Cancelled,
        };
        if !hit_stop_string && !listener_gone {
            // Whatever the detokenizer and stop matcher still hold is real output.
            let mut tail = detok.as_mut().map(|d| d.finish()).unwrap_or_default();
            tail = stops.push(&tail).emit + &stops.flush();
            if !tail.is_empty() {
                emit(Event::Text(tail));
            }
        }
        emit(Event::Stats(clock.stats(ms())));
        finish(emit, reason, &clock);
        Ok(())
    }

    /// Log-probability of each prompt token given its prefix, with alternatives.
    fn score_prompt(&mut self, prompt: &[u32], top: usize) -> Result<Vec<PromptToken>> {
        let logits = self.runtime.score(prompt)?;
        let text = |id: u32| self.text.token_str(id);
        let mut out = vec![PromptToken { id: prompt[0], text: text(prompt[0]), scored: None }];
        for (i, &id) in prompt.iter().enumerate().skip(1) {
            let lp = log_softmax(&logits[i - 1]);
            let alts =
                top_k_indices(&lp, top.min(MAX_TOP_LOGPROBS)).into_iter().map(|(id, logprob)| TokenLogprob { id, logprob }).collect();
            out.push(PromptToken { id, text: text(id), scored: Some(Sampled { id, logprob: lp[id as usize], top: alts }) });
        }
        Ok(out)
    }
}
