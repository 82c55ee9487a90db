//! Runs one request on a runtime: tokenize (or template), generate, detokenize
//! incrementally, apply stop strings, and report events and timings.

use std::sync::Arc;
use std::time::Instant;

use peregrine_api::timing::{PromptTokensDetails, TokenClock};
use peregrine_api::{FinishReason, Timings, Usage};

use crate::constraint::{Constraint, GrammarSource, Grammars};
use crate::error::{Error, Result};
use crate::request::{ErrorCode, Event, Prompt, PromptToken, Request, STATS_INTERVAL};
use crate::runtime::{Cancel, DecodeJob, Flow, RunEnd, Runtime};
use crate::sampling::{log_softmax, top_k_indices, Sampled, TokenLogprob, MAX_TOP_LOGPROBS};
use crate::speculative::{DraftCounts, DraftPlan, SpeculativeMode};
use crate::stop::StopMatcher;
use crate::template::ChatTemplate;
use crate::tokenizer::{Detokenizer, Tokenizer};

/// A runtime with the text side of the model (what the loaders build): opaque to the
/// facade, which hands it from [`crate::build_generator`] to [`crate::EngineHandle::start`].
pub struct Generator {
    pub(crate) runtime: Box<dyn Runtime>,
    /// `None` for synthetic models: only token prompts are accepted then.
    pub(crate) tokenizer: Option<Tokenizer>,
    pub(crate) template: Option<ChatTemplate>,
}

impl Generator {
    /// A generator of any runtime: the tests' scripted ones, the apparatus's.
    #[cfg(feature = "lab")]
    pub fn new(runtime: Box<dyn Runtime>, tokenizer: Option<Tokenizer>, template: Option<ChatTemplate>) -> Generator {
        Generator { runtime, tokenizer, template }
    }

    /// The runtime alone (the benchmarks drive it without the engine thread).
    #[cfg(feature = "lab")]
    pub fn into_runtime(self) -> Box<dyn Runtime> {
        self.runtime
    }

    /// The runtime and the text side apart (the apparatus tokenizes and drives the
    /// runtime itself).
    #[cfg(feature = "lab")]
    pub fn into_parts(self) -> (Box<dyn Runtime>, TextModel) {
        let vocab_size = self.runtime.config().vocab_size;
        (self.runtime, TextModel::new(self.tokenizer, self.template, vocab_size))
    }

    /// Splits the generator into what the engine thread runs and the text side that
    /// request handlers share (they tokenize and check prompts before queueing).
    /// `speculative`: whether requests draft unless they say.
    pub(crate) fn into_runner(self, speculative: SpeculativeMode) -> Runner {
        let vocab_size = self.runtime.config().vocab_size;
        let text = TextModel::new(self.tokenizer, self.template, vocab_size);
        Runner { runtime: self.runtime, text: Arc::new(text), speculative }
    }
}

/// The tokenizer and chat template of a model; immutable, so shared across threads.
pub struct TextModel {
    /// `None` for synthetic models: only token prompts are accepted then.
    pub tokenizer: Option<Tokenizer>,
    pub template: Option<ChatTemplate>,
    /// The runtime's vocabulary size (token-id prompts are checked against it).
    pub vocab_size: usize,
    /// The grammar compiler over this vocabulary.
    grammars: Grammars,
}

impl TextModel {
    /// The text side of a model whose runtime has `vocab_size` logits.
    pub fn new(tokenizer: Option<Tokenizer>, template: Option<ChatTemplate>, vocab_size: usize) -> TextModel {
        TextModel { tokenizer, template, vocab_size, grammars: Grammars::default() }
    }

    /// `source` compiled for this model's vocabulary; a grammar the compiler rejects is
    /// [`Error::Grammar`] with its reason.
    pub fn constraint(&self, source: &GrammarSource) -> Result<Constraint> {
        let tokenizer =
            self.tokenizer.as_ref().ok_or_else(|| Error::InvalidRequest("this model has no tokenizer, so it cannot follow a grammar".into()))?;
        self.grammars.compile(tokenizer, self.vocab_size, source)
    }

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
            Prompt::Chat(messages) => self.chat_ids(messages, &[]),
            Prompt::ChatWithTools { messages, tools } => self.chat_ids(messages, tools),
        }
    }

    /// The text a chat prompt becomes: the conversation rendered by the chat template
    /// with its generation prompt (and the tools, for a template that lists them); a text
    /// prompt as it is. Token ids have no text of their own here: an error.
    pub fn prompt_text(&self, prompt: &Prompt) -> Result<String> {
        match prompt {
            Prompt::Text(text) => Ok(text.clone()),
            Prompt::Chat(messages) => self.chat_text(messages, &[]),
            Prompt::ChatWithTools { messages, tools } => self.chat_text(messages, tools),
            Prompt::Tokens(_) => Err(Error::InvalidRequest("a token-id prompt is not rendered by the chat template".into())),
        }
    }

    fn chat_text(&self, messages: &[crate::template::ChatMessage], tools: &[serde_json::Value]) -> Result<String> {
        let template =
            self.template.as_ref().ok_or_else(|| Error::InvalidRequest("this model has no chat template; use completion mode".into()))?;
        template.render_with_tools(messages, tools, true)
    }

    /// Ids of a conversation rendered by the chat template, with `tools` for it to list.
    fn chat_ids(&self, messages: &[crate::template::ChatMessage], tools: &[serde_json::Value]) -> Result<Vec<u32>> {
        let text = self.chat_text(messages, tools)?;
        // The template writes BOS itself where the model wants one.
        let tokenizer =
            self.tokenizer.as_ref().ok_or_else(|| Error::InvalidRequest("this model has no tokenizer; send token ids".into()))?;
        tokenizer.encode(&text, false)
    }

    /// Whether the chat template lists tools itself and asks for the `<tool_call>` blocks
    /// the server reads back.
    pub fn native_tools(&self) -> bool {
        self.template.as_ref().is_some_and(ChatTemplate::writes_tool_calls)
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
    /// Whether requests draft unless they say.
    speculative: SpeculativeMode,
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

    /// What `request` may draft on this runtime (a client error when it asks for more
    /// than the runtime verifies).
    pub(crate) fn draft_plan(&self, request: &Request) -> Result<DraftPlan> {
        if let (Some(c), false) = (&request.constraint, self.runtime.follows_grammars()) {
            return Err(crate::constraint::unsupported(&self.runtime.backend().kind, c.kind()));
        }
        let capacity = self.runtime.verify_capacity();
        DraftPlan::check(&request.speculative, capacity)?;
        Ok(DraftPlan::of(&request.speculative, self.speculative, capacity))
    }

    /// The runtime, to run work on.
    pub(crate) fn runtime_mut(&mut self) -> &mut dyn Runtime {
        self.runtime.as_mut()
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
        let text = self.text.clone();
        let draft = self.draft_plan(request)?;
        let prompt = Stream::prepare(&text, self.runtime.config(), request)?;
        let runtime = &mut self.runtime;
        let Some(mut stream) =
            Stream::begin(&text, request, prompt, start, emit, &mut |p, top| score_prompt(runtime.as_mut(), &text, p, top, cancel))?
        else {
            return Ok(());
        };
        let job = DecodeJob {
            prompt: &stream.prompt.clone(),
            max_tokens: request.max_tokens,
            sampling: &request.sampling,
            stop_tokens: &stream.stop_tokens.clone(),
            top_logprobs: request.top_logprobs,
            cancel,
            reuse_prefix: request.cache_prompt,
            draft,
            constraint: request.constraint.as_ref(),
        };
        let end = self.runtime.generate(&job, &mut |s: &Sampled| stream.on_token(s, cancel.requested(), emit))?;
        stream.set_cached(self.runtime.reused_prefix());
        stream.set_drafts(self.runtime.draft_counts());
        stream.finish(end, emit)
    }
}

/// Log-probability of each prompt token given its prefix, with alternatives; `None`
/// when `cancel` fired first.
pub(crate) fn score_prompt(
    runtime: &mut dyn Runtime,
    text: &TextModel,
    prompt: &[u32],
    top: usize,
    cancel: Cancel<'_>,
) -> Result<Option<Vec<PromptToken>>> {
    let Some(logits) = runtime.score_unless(prompt, cancel)? else { return Ok(None) };
    let text = |id: u32| text.token_str(id);
    let mut out = vec![PromptToken { id: prompt[0], text: text(prompt[0]), scored: None }];
    for (i, &id) in prompt.iter().enumerate().skip(1) {
        let lp = log_softmax(&logits[i - 1]);
        let alts = top_k_indices(&lp, top.min(MAX_TOP_LOGPROBS)).into_iter().map(|(id, logprob)| TokenLogprob { id, logprob }).collect();
        out.push(PromptToken { id, text: text(id), scored: Some(Sampled { id, logprob: lp[id as usize], top: alts, accepted_draft: false }) });
    }
    Ok(Some(out))
}

/// Scores a prompt's tokens (prompt ids, alternatives per token), for echo requests;
/// `None` when the request was cancelled meanwhile.
pub(crate) type ScorePrompt<'a> = dyn FnMut(&[u32], usize) -> Result<Option<Vec<PromptToken>>> + 'a;

/// A request's text side while it runs, between the runtime's tokens and the client's
/// events: incremental detokenizing, stop strings, the clock, the terminal event. One
/// type for the one-at-a-time path ([`Runner::run`]) and the batch scheduler, so both
/// send the same events for the same tokens.
pub(crate) struct Stream<'t> {
    start: Instant,
    /// The prompt's ids.
    pub prompt: Vec<u32>,
    /// Token ids that end generation (EOS unless `ignore_eos`).
    pub stop_tokens: Vec<u32>,
    clock: TokenClock,
    detok: Option<Detokenizer<'t>>,
    detok_error: Option<Error>,
    stops: StopMatcher,
    last_stats: f64,
    hit_stop_string: bool,
    listener_gone: bool,
    /// Prompt tokens taken from a cache instead of computed.
    cached: usize,
    /// Drafted and accepted tokens.
    drafts: DraftCounts,
}

impl<'t> Stream<'t> {
    /// The request's prompt ids, checked against the model's rules (no event yet).
    pub fn prepare(text: &TextModel, config: &crate::config::ModelConfig, request: &Request) -> Result<Vec<u32>> {
        let prompt = text.prompt_ids(&request.prompt)?;
        crate::admission::admit(config, &prompt, request.max_tokens, &request.sampling, request.top_logprobs)?;
        Ok(prompt)
    }

    /// Tells the client the request started (and its prompt's log-probabilities when
    /// asked, from `score`); `None` when the request already ended (nothing to
    /// generate, or the listener left), its terminal event sent.
    pub fn begin(
        text: &'t TextModel,
        request: &Request,
        prompt: Vec<u32>,
        start: Instant,
        emit: &mut dyn FnMut(Event) -> bool,
        score: &mut ScorePrompt<'_>,
    ) -> Result<Option<Stream<'t>>> {
        let stop_tokens: Vec<u32> = match (&text.tokenizer, request.ignore_eos) {
            (Some(t), false) => t.eos_ids().to_vec(),
            _ => Vec::new(),
        };
        let stream = Stream {
            start,
            prompt,
            stop_tokens,
            clock: TokenClock::default(),
            detok: text.tokenizer.as_ref().map(|t| t.detokenizer()),
            detok_error: None,
            stops: StopMatcher::new(&request.stop),
            last_stats: 0.0,
            hit_stop_string: false,
            listener_gone: false,
            cached: 0,
            drafts: DraftCounts::default(),
        };
        if !emit(Event::Started { prompt_tokens: stream.prompt.len() }) {
            stream.done(FinishReason::Cancelled, emit);
            return Ok(None);
        }
        if request.echo_logprobs {
            let scored = score(&stream.prompt, request.top_logprobs)?;
            if !scored.is_some_and(|s| emit(Event::PromptLogprobs(s))) {
                stream.done(FinishReason::Cancelled, emit);
                return Ok(None);
            }
        }
        if request.max_tokens == 0 {
            stream.done(FinishReason::Length, emit);
            return Ok(None);
        }
        Ok(Some(stream))
    }

    /// Records how many prompt tokens the runtime reused (timings and usage report it).
    pub fn set_cached(&mut self, n: usize) {
        self.cached = n;
    }

    /// Records the run's drafted and accepted tokens (timings report them).
    pub fn set_drafts(&mut self, counts: DraftCounts) {
        self.drafts = counts;
    }

    fn ms(&self) -> f64 {
        self.start.elapsed().as_secs_f64() * 1000.0
    }

    /// One generated token: its text (held back while a stop string may be starting),
    /// live stats now and then. `cancelled`: the client gave the request up (a cancel
    /// that landed during the prompt's last chunk: nothing more goes out).
    pub fn on_token(&mut self, s: &Sampled, cancelled: bool, emit: &mut dyn FnMut(Event) -> bool) -> Flow {
        if cancelled {
            self.listener_gone = true;
            return Flow::Stop;
        }
        let now = self.ms();
        self.clock.tick(now, s.accepted_draft);
        let piece = match self.detok.as_mut().map(|d| d.push(s.id)) {
            Some(Ok(text)) => text,
            Some(Err(e)) => {
                self.detok_error = Some(e);
                return Flow::Stop;
            }
            None => String::new(),
        };
        let scan = self.stops.push(&piece);
        if !emit(Event::Token { id: s.id, text: scan.emit, sampled: s.clone() }) {
            self.listener_gone = true;
            return Flow::Stop;
        }
        if now - self.last_stats >= STATS_INTERVAL.as_secs_f64() * 1e3 {
            self.last_stats = now;
            emit(Event::Stats(self.clock.stats(now)));
        }
        if scan.stopped {
            self.hit_stop_string = true;
            return Flow::Stop;
        }
        Flow::Continue
    }

    /// The run ended (`end`, as the token loop saw it): the held-back text, the last
    /// stats and the terminal event, or the detokenizer's error.
    pub fn finish(mut self, end: RunEnd, emit: &mut dyn FnMut(Event) -> bool) -> Result<()> {
        if let Some(e) = self.detok_error.take() {
            return Err(e);
        }
        // A gone or cancelling listener still gets a terminal event if it can hear it.
        let reason = match end {
            _ if self.listener_gone => FinishReason::Cancelled,
            RunEnd::StopToken => FinishReason::Stop,
            RunEnd::Length => FinishReason::Length,
            RunEnd::Stopped if self.hit_stop_string => FinishReason::Stop,
            RunEnd::Stopped => FinishReason::Cancelled,
        };
        if !self.hit_stop_string && !self.listener_gone {
            // Whatever the detokenizer and stop matcher still hold is real output.
            let mut tail = self.detok.as_mut().map(|d| d.finish()).unwrap_or_default();
            tail = self.stops.push(&tail).emit + &self.stops.flush();
            if !tail.is_empty() {
                emit(Event::Text(tail));
            }
        }
        emit(Event::Stats(self.clock.stats(self.ms())));
        self.done(reason, emit);
        Ok(())
    }

    fn done(&self, reason: FinishReason, emit: &mut dyn FnMut(Event) -> bool) {
        let prompt_n = self.prompt.len() as u32;
        let cached = self.cached as u32;
        let tokens = self.clock.tokens;
        let usage = Usage {
            prompt_tokens: prompt_n,
            completion_tokens: tokens,
            total_tokens: prompt_n + tokens,
            prompt_tokens_details: PromptTokensDetails { cached_tokens: cached },
        };
        let timings = Timings {
            cache_n: cached,
            draft_n: self.drafts.drafted as u32,
            draft_n_accepted: self.drafts.accepted as u32,
            ..self.clock.timings(prompt_n - cached)
        };
        emit(Event::Done { finish_reason: reason, usage, timings });
    }
}
