//! The engine thread and its handle: a bounded FIFO queue of requests, each with its
//! own event channel; up to the batch of them run at once when the runtime decodes
//! several sequences per step (scheduler.rs), else one at a time. The engine owns its thread; load errors come back through a
//! ready channel; dropping the receiver or calling cancel stops a request at the
//! next token boundary (or, mid-prompt, at the next prefill chunk), and a queued
//! request whose receiver is gone leaves the queue without running. The tokenizer and template are shared with the handle so callers
//! can tokenize and check prompts before queueing.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::generator::{Generator, Runner, TextModel};
use crate::request::{ErrorCode, Event, Prompt, Request};
use crate::runtime::Cancel;
use crate::scheduler::BatchPlan;
use crate::speculative::{DraftPlan, SpeculativeMode, VerifyCapacity};

/// Default number of requests that may wait behind the running ones.
pub const DEFAULT_MAX_QUEUE: usize = 16;

/// How much work the engine takes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineLimits {
    /// Requests that may wait for a place in the batch.
    pub max_queue: usize,
    /// Requests decoded together (`None`: the runtime's default; 1 = one at a time).
    pub max_batch: Option<usize>,
    /// KV-cache positions (prompt + max_tokens) the running requests may reserve
    /// together (`None`: the context length × the batch, so any request fits alone).
    pub kv_budget: Option<usize>,
    /// Whether requests draft by prompt lookup unless they say (`--speculative`).
    pub speculative: SpeculativeMode,
}

impl From<usize> for EngineLimits {
    /// A queue of `max_queue` in front of one request at a time.
    fn from(max_queue: usize) -> EngineLimits {
        EngineLimits { max_queue, max_batch: Some(1), kv_budget: None, speculative: SpeculativeMode::default() }
    }
}

/// What the server tells clients about the loaded model.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineInfo {
    pub model_name: String,
    pub architecture: String,
    pub parameters: u64,
    pub context_length: usize,
    pub vocab_size: usize,
    /// `cpu` or `cuda`.
    pub backend: String,
    pub devices: Vec<String>,
    pub max_queue: usize,
    /// Requests decoded together.
    pub max_batch: usize,
    /// KV-cache positions the running requests may reserve together.
    pub kv_budget: usize,
}

/// A queued request.
pub(crate) struct Job {
    pub request: Request,
    pub events: UnboundedSender<Event>,
    pub cancel: Arc<AtomicBool>,
}

impl Job {
    /// Nobody will read this job's events (the client left or cancelled).
    pub fn abandoned(&self) -> bool {
        self.events.is_closed() || self.cancel.load(Ordering::Acquire)
    }

    /// Sends `e`; false once nobody listens or the client cancelled (the run stops at
    /// the next token; the terminal event still reaches a listener that cancelled but stayed).
    pub fn emit(&self, e: Event) -> bool {
        self.events.send(e).is_ok() && !self.cancel.load(Ordering::Acquire)
    }
}

pub(crate) struct Shared {
    pub queue: Mutex<Queue>,
    pub wake: Condvar,
}

pub(crate) struct Queue {
    pub jobs: VecDeque<Job>,
    pub shutdown: bool,
    /// The cancel flags of the requests the engine holds (running, or taken from the
    /// queue and about to start); empty while idle.
    pub running: Vec<Arc<AtomicBool>>,
    /// Requests the engine runs at once (known once the model loaded).
    pub batch: usize,
}

impl Queue {
    /// Where a new request of `client` joins the queue: clients take turns, so it
    /// goes before the first queued request whose client already has more requests
    /// ahead of it than `client` has (a burst of one client waits behind the others'
    /// first requests), else at the end.
    pub fn turn_position(&self, client: Option<std::net::IpAddr>) -> usize {
        let mut ahead: Vec<(Option<std::net::IpAddr>, usize)> = Vec::new();
        let mut turns = Vec::with_capacity(self.jobs.len());
        for j in &self.jobs {
            let c = j.request.client;
            let n = match ahead.iter_mut().find(|(k, _)| *k == c) {
                Some((_, n)) => {
                    *n += 1;
                    *n
                }
                None => {
                    ahead.push((c, 1));
                    1
                }
            };
            turns.push(n - 1);
        }
        let mine = ahead.iter().find(|(k, _)| *k == client).map_or(0, |(_, n)| *n);
        turns.iter().position(|&t| t > mine).unwrap_or(self.jobs.len())
    }

    /// Drops queued jobs whose clients left and tells the others their new position,
    /// so a dead request never holds a queue slot or runs.
    pub fn prune(&mut self) {
        let before = self.jobs.len();
        self.jobs.retain(|j| !j.abandoned());
        if self.jobs.len() != before {
            self.announce_positions();
        }
    }

    pub fn announce_positions(&self) {
        for (position, waiting) in self.jobs.iter().enumerate() {
            let _ = waiting.events.send(Event::Queued { position });
        }
    }
}

/// Why a request was not queued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejected {
    /// The queue already holds `waiting` requests (its limit).
    QueueFull { waiting: usize },
    /// The engine stopped taking work (shutting down, or its thread is gone).
    ShuttingDown,
}

impl std::fmt::Display for Rejected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rejected::QueueFull { waiting } => write!(f, "the queue is full ({waiting} waiting)"),
            Rejected::ShuttingDown => write!(f, "the engine is shutting down"),
        }
    }
}

/// Cloneable handle to the engine thread.
#[derive(Clone)]
pub struct EngineHandle {
    shared: Arc<Shared>,
    info: Arc<EngineInfo>,
    text: Arc<TextModel>,
    config: Arc<ModelConfig>,
    /// What the runtime's steps verify (requests asking more are refused).
    verify: VerifyCapacity,
    /// Whether the runtime masks logits with a request's grammar.
    grammars: bool,
    max_queue: usize,
}

/// A submitted request: its events, and a way to stop it.
pub struct Submission {
    pub events: UnboundedReceiver<Event>,
    pub cancel: CancelHandle,
}

/// Stops a request at its next token boundary or prefill chunk (or before it starts).
#[derive(Clone, Debug)]
pub struct CancelHandle(Arc<AtomicBool>);

impl CancelHandle {
    /// Asks the engine to stop this request.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Release);
    }
}

impl EngineHandle {
    /// Starts the engine thread; `load` runs on it and builds the generator. Returns
    /// once loading finished, with its error if it failed.
    pub fn start<F>(load: F, limits: impl Into<EngineLimits>) -> Result<EngineHandle>
    where
        F: FnOnce() -> Result<Generator> + Send + 'static,
    {
        let limits = limits.into();
        let max_queue = limits.max_queue;
        let queue = Queue { jobs: VecDeque::new(), shutdown: false, running: Vec::new(), batch: 1 };
        let shared = Arc::new(Shared { queue: Mutex::new(queue), wake: Condvar::new() });
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(EngineInfo, Arc<TextModel>, Arc<ModelConfig>, VerifyCapacity, bool)>>();
        let thread_shared = shared.clone();
        std::thread::Builder::new()
            .name("peregrine-engine".into())
            .spawn(move || {
                let mut runner = match load() {
                    Ok(g) => g.into_runner(limits.speculative),
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let plan = match BatchPlan::of(&mut runner, &limits) {
                    Ok(plan) => plan,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                if let Ok(mut q) = thread_shared.queue.lock() {
                    q.batch = plan.batch;
                }
                let config = Arc::new(runner.runtime().config().clone());
                let verify = runner.runtime().verify_capacity();
                let grammars = runner.runtime().follows_grammars();
                let _ = ready_tx.send(Ok((info_of(&runner, max_queue, &plan), runner.text().clone(), config, verify, grammars)));
                if plan.batch > 1 {
                    crate::scheduler::serve_batched(&thread_shared, &mut runner, plan);
                } else {
                    serve_jobs(&thread_shared, &mut runner);
                }
            })
            .map_err(|e| Error::Unavailable(format!("cannot start the engine thread: {e}")))?;
        let (info, text, config, verify, grammars) =
            ready_rx.recv().map_err(|_| Error::Unavailable("the engine thread died while loading".into()))??;
        Ok(EngineHandle { shared, info: Arc::new(info), text, config, verify, grammars, max_queue })
    }

    /// The loaded model and backend.
    pub fn info(&self) -> &EngineInfo {
        &self.info
    }

    /// What one step of the runtime verifies (a request's `speculative.n_max` is held to it).
    pub fn verify_capacity(&self) -> VerifyCapacity {
        self.verify
    }

    /// Whether the runtime follows a request's grammar (the CPU runtimes); a
    /// constrained request on one that does not is refused.
    pub fn follows_grammars(&self) -> bool {
        self.grammars
    }

    /// The tokenizer and chat template, to tokenize and check prompts before queueing.
    pub fn text(&self) -> &Arc<TextModel> {
        &self.text
    }

    /// Requests waiting (not counting the running ones); abandoned ones are dropped first.
    pub fn queue_len(&self) -> usize {
        self.shared
            .queue
            .lock()
            .map(|mut q| {
                q.prune();
                q.jobs.len()
            })
            .unwrap_or(0)
    }

    /// True while a request runs.
    pub fn busy(&self) -> bool {
        self.running() > 0
    }

    /// Requests the engine holds (running, or about to start).
    pub fn running(&self) -> usize {
        self.shared.queue.lock().map(|q| q.running.len()).unwrap_or(0)
    }

    /// Checks a request against the model's rules (admission.rs: sampling ranges, token
    /// ids in the vocabulary, a non-empty prompt that fits the context with max_tokens)
    /// before it waits in the queue. Text and chat prompts are tokenized on the engine
    /// thread, so only their sampling fields are checked here; the engine thread checks
    /// them in full when it takes them.
    pub fn admit(&self, request: &Request) -> Result<()> {
        DraftPlan::check(&request.speculative, self.verify)?;
        if let (Some(c), false) = (&request.constraint, self.grammars) {
            return Err(crate::constraint::unsupported(&self.info.backend, c.kind()));
        }
        match &request.prompt {
            Prompt::Tokens(ids) => crate::admission::admit(&self.config, ids, request.max_tokens, &request.sampling, request.top_logprobs),
            Prompt::Text(_) | Prompt::Chat(_) | Prompt::ChatWithTools { .. } => {
                crate::admission::admit_sampling(&request.sampling, request.top_logprobs)
            }
        }
    }

    /// Checks ([`Self::admit`]) and queues a request; a full queue or a stopping engine is
    /// [`Error::Unavailable`].
    pub fn submit(&self, request: Request) -> Result<Submission> {
        self.admit(&request)?;
        self.try_submit(request).map_err(|r| Error::Unavailable(r.to_string()))
    }

    /// Queues a request, saying why when it cannot; call [`Self::admit`] first to refuse
    /// a bad one before it waits (the engine thread refuses it otherwise, later).
    pub fn try_submit(&self, request: Request) -> std::result::Result<Submission, Rejected> {
        let (tx, rx) = unbounded_channel();
        let cancel = Arc::new(AtomicBool::new(false));
        let mut q = self.shared.queue.lock().map_err(|_| Rejected::ShuttingDown)?;
        if q.shutdown {
            return Err(Rejected::ShuttingDown);
        }
        q.prune();
        if q.jobs.len() >= self.max_queue {
            return Err(Rejected::QueueFull { waiting: q.jobs.len() });
        }
        let position = q.turn_position(request.client);
        let job = Job { request, events: tx, cancel: cancel.clone() };
        if position == q.jobs.len() {
            if q.running.len() >= q.batch || position > 0 {
                let _ = job.events.send(Event::Queued { position });
            }
            q.jobs.push_back(job);
        } else {
            // Ahead of another client's later requests: everyone behind moves back one.
            q.jobs.insert(position, job);
            q.announce_positions();
        }
        self.shared.wake.notify_one();
        Ok(Submission { events: rx, cancel: CancelHandle(cancel) })
    }

    /// Stops the running requests at their next token boundary (shutdown after a grace period).
    pub fn cancel_running(&self) {
        if let Ok(q) = self.shared.queue.lock() {
            for flag in &q.running {
                flag.store(true, Ordering::Release);
            }
        }
    }

    /// Stops taking requests: queued ones end with an `Unavailable` error, the running
    /// ones finish (or is cancelled with [`Self::cancel_running`]), then the thread ends.
    pub fn shutdown(&self) {
        if let Ok(mut q) = self.shared.queue.lock() {
            q.shutdown = true;
            for job in q.jobs.drain(..) {
                let _ = job.events.send(Event::Error { code: ErrorCode::Unavailable, message: "the server is shutting down".into() });
            }
            self.shared.wake.notify_all();
        }
    }
}

fn info_of(r: &Runner, max_queue: usize, plan: &BatchPlan) -> EngineInfo {
    let c = r.runtime().config();
    let b = r.runtime().backend();
    EngineInfo {
        model_name: c.name.clone(),
        architecture: format!("{:?}", c.architecture).to_lowercase(),
        parameters: c.parameter_count(),
        context_length: c.max_context,
        vocab_size: c.vocab_size,
        backend: b.kind,
        devices: b.devices,
        max_queue,
        max_batch: plan.batch,
        kv_budget: plan.kv_budget,
    }
}

/// The engine thread's loop: take the oldest live job, tell the rest their position, run it.
fn serve_jobs(shared: &Shared, runner: &mut Runner) {
    loop {
        let job = {
            let Ok(mut q) = shared.queue.lock() else { return };
            q.running.clear();
            let job = loop {
                q.prune();
                if let Some(job) = q.jobs.pop_front() {
                    break job;
                }
                if q.shutdown {
                    return;
                }
                q = match shared.wake.wait(q) {
                    Ok(q) => q,
                    Err(_) => return,
                };
            };
            q.running.push(job.cancel.clone());
            q.announce_positions();
            job
        };
        let mut emit = |e: Event| job.emit(e);
        // The same question during prefill, asked by the runtime between chunks.
        let abandoned = || job.abandoned();
        runner.run(&job.request, Cancel::when(&abandoned), &mut emit);
    }
}
