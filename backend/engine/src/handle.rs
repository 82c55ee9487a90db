//! The engine thread and its handle: a bounded FIFO queue of requests, each with its
//! own event channel. The engine owns its thread; load errors come back through a
//! ready channel; dropping the receiver or calling cancel stops a request at the
//! next token boundary.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use crate::error::{Error, Result};
use crate::generator::Generator;
use crate::request::{Event, Request};

/// Default number of requests that may wait behind the running one.
pub const DEFAULT_MAX_QUEUE: usize = 16;

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
}

/// A queued request.
struct Job {
    request: Request,
    events: UnboundedSender<Event>,
    cancel: Arc<AtomicBool>,
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
}

struct Queue {
    jobs: VecDeque<Job>,
    shutdown: bool,
    /// True while a request runs.
    busy: bool,
}

/// Cloneable handle to the engine thread.
#[derive(Clone)]
pub struct EngineHandle {
    shared: Arc<Shared>,
    info: Arc<EngineInfo>,
    max_queue: usize,
}

/// A submitted request: its events, and a way to stop it.
pub struct Submission {
    pub events: UnboundedReceiver<Event>,
    pub cancel: CancelHandle,
}

/// Stops a request at its next token boundary (or before it starts).
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
    pub fn start<F>(load: F, max_queue: usize) -> Result<EngineHandle>
    where
        F: FnOnce() -> Result<Generator> + Send + 'static,
    {
        let shared = Arc::new(Shared { queue: Mutex::new(Queue { jobs: VecDeque::new(), shutdown: false, busy: false }), wake: Condvar::new() });
        let (ready_tx, ready_rx) = mpsc::channel::<Result<EngineInfo>>();
        let thread_shared = shared.clone();
        std::thread::Builder::new()
            .name("peregrine-engine".into())
            .spawn(move || {
                let mut generator = match load() {
                    Ok(g) => g,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(info_of(&generator, max_queue)));
                serve_jobs(&thread_shared, &mut generator);
            })
            .map_err(|e| Error::Unavailable(format!("cannot start the engine thread: {e}")))?;
        let info = ready_rx.recv().map_err(|_| Error::Unavailable("the engine thread died while loading".into()))??;
        Ok(EngineHandle { shared, info: Arc::new(info), max_queue })
    }

    /// The loaded model and backend.
    pub fn info(&self) -> &EngineInfo {
        &self.info
    }

    /// Requests waiting (not counting the one running).
    pub fn queue_len(&self) -> usize {
        self.shared.queue.lock().map(|q| q.jobs.len()).unwrap_or(0)
    }

    /// True while a request runs.
    pub fn busy(&self) -> bool {
        self.shared.queue.lock().map(|q| q.busy).unwrap_or(false)
    }

    /// Queues a request; a full queue is [`Error::Unavailable`].
    pub fn submit(&self, request: Request) -> Result<Submission> {
        let (tx, rx) = unbounded_channel();
        let cancel = Arc::new(AtomicBool::new(false));
        let mut q = self.shared.queue.lock().map_err(|_| Error::Unavailable("engine lock poisoned".into()))?;
        if q.shutdown {
            return Err(Error::Unavailable("the engine is shutting down".into()));
        }
        if q.jobs.len() >= self.max_queue {
            return Err(Error::Unavailable(format!("the queue is full ({} waiting)", q.jobs.len())));
        }
        let position = q.jobs.len();
        if q.busy || position > 0 {
            let _ = tx.send(Event::Queued { position });
        }
        q.jobs.push_back(Job { request, events: tx, cancel: cancel.clone() });
        self.shared.wake.notify_one();
        Ok(Submission { events: rx, cancel: CancelHandle(cancel) })
    }

    /// Stops taking requests and lets the thread end after the running one.
    pub fn shutdown(&self) {
        if let Ok(mut q) = self.shared.queue.lock() {
            q.shutdown = true;
            self.shared.wake.notify_all();
        }
    }
}

fn info_of(g: &Generator, max_queue: usize) -> EngineInfo {
    let c = g.runtime.config();
    let b = g.runtime.backend();
    EngineInfo {
        model_name: c.name.clone(),
        architecture: format!("{:?}", c.architecture).to_lowercase(),
        parameters: c.parameter_count(),
        context_length: c.max_context,
        vocab_size: c.vocab_size,
        backend: b.kind,
        devices: b.devices,
        max_queue,
    }
}

/// The engine thread's loop: take the oldest job, tell the rest their position, run it.
fn serve_jobs(shared: &Shared, generator: &mut Generator) {
    loop {
        let job = {
            let Ok(mut q) = shared.queue.lock() else { return };
            q.busy = false;
            while q.jobs.is_empty() && !q.shutdown {
                q = match shared.wake.wait(q) {
                    Ok(q) => q,
                    Err(_) => return,
                };
            }
            let Some(job) = q.jobs.pop_front() else { return };
            q.busy = true;
            for (position, waiting) in q.jobs.iter().enumerate() {
                let _ = waiting.events.send(Event::Queued { position });
            }
            job
        };
        if job.cancel.load(Ordering::Acquire) || job.events.is_closed() {
            continue;
        }
        // `false` (cancelled or receiver dropped) stops the run at the next token; the
        // terminal event is still sent to a listener that cancelled but stayed.
        let mut emit = |e: Event| job.events.send(e).is_ok() && !job.cancel.load(Ordering::Acquire);
        generator.run(&job.request, &mut emit);
    }
}
