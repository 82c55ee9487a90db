//! Continuous batching: the engine thread's loop when the runtime decodes several
//! sequences per step. Up to the batch of requests run at once, each in its own KV slot
//! with its own sampling state, stop strings and clock; a request joins at the next step
//! and leaves when it ends. Every step carries one token of each decoding request plus
//! at most one chunk of the oldest joining request's prompt (chunked prefill), so
//! running streams keep flowing while a long prompt is read, and a cancelled prompt
//! stops within one chunk. Slots are granted from a budget of KV positions (prompt +
//! max_tokens each): a request that does not fit now waits at the head of the queue.

use std::collections::VecDeque;
use std::time::Instant;

use crate::constraint::Guide;
use crate::error::{Error, Result};
use crate::generator::{score_prompt, Runner, Stream};
use crate::handle::{EngineLimits, Job, Shared};
use crate::request::{ErrorCode, Event};
use crate::runtime::{BatchDecode, Cancel, RunEnd, SlotTokens};
use crate::speculative::verify::{verify, Target};
use crate::speculative::{Draft, Drafter};

/// Prompt tokens a joining request adds to a step while others decode: small enough
/// that the running streams' next token is not held up long, large enough that the
/// prompt still streams the weights once per many tokens.
pub const PREFILL_CHUNK_WHILE_DECODING: usize = 64;

/// The batch the engine runs, fixed at load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchPlan {
    /// Requests decoded together (1: one at a time through `Runtime::generate`).
    pub batch: usize,
    /// KV positions the running requests may reserve together.
    pub kv_budget: usize,
}

impl BatchPlan {
    /// The operator's limits made concrete for this runtime; a batch it cannot run is an error.
    pub fn of(runner: &mut Runner, limits: &EngineLimits) -> Result<BatchPlan> {
        let context = runner.runtime().config().max_context;
        let batch = match (runner.runtime_mut().batch(), limits.max_batch) {
            (_, Some(0)) => return Err(Error::InvalidRequest("the batch (--max-batch) must be at least 1".into())),
            (None, None | Some(1)) => 1,
            (None, Some(n)) => {
                let kind = runner.runtime().backend().kind;
                return Err(Error::InvalidRequest(format!(
                    "the {kind} runtime of this model decodes one request at a time; --max-batch {n} needs the fast CPU runtime"
                )));
            }
            (Some(b), Some(n)) if n > b.capacity() => {
                return Err(Error::InvalidRequest(format!(
                    "--max-batch {n} is more than the {} sequences this runtime holds",
                    b.capacity()
                )));
            }
            (Some(_), Some(n)) => n,
            (Some(b), None) => b.default_batch(),
        };
        let kv_budget = limits.kv_budget.unwrap_or(context * batch);
        if kv_budget == 0 {
            return Err(Error::InvalidRequest("the KV budget (--kv-budget) must be at least 1 position".into()));
        }
        Ok(BatchPlan { batch, kv_budget })
    }
}

/// A request taken from the queue whose prompt is known, waiting for a slot and KV room.
struct Ready {
    job: Job,
    prompt: Vec<u32>,
    /// KV positions it reserves (prompt + max_tokens).
    need: usize,
    start: Instant,
    drafter: Drafter,
}

/// A running request.
struct Active<'t> {
    job: Job,
    stream: Stream<'t>,
    slot: usize,
    need: usize,
    /// Prompt tokens already in the slot's cache.
    fed: usize,
    /// The prompt and every token generated so far (what sampling penalties see).
    seen: Vec<u32>,
    generated: usize,
    /// The token to feed in the next step (decoding), `None` while the prompt runs.
    next: Option<u32>,
    /// Drafts the request's next tokens.
    drafter: Drafter,
    /// The draft that rides with `next` in the current step.
    draft: Draft,
    /// The request's grammar state, when it has one.
    guide: Option<Guide>,
}

/// How a step left a request.
enum After {
    Continue,
    Ended(RunEnd),
    /// The step failed; the request ends with this error (code, message).
    Failed(ErrorCode, String),
}

/// The engine thread's loop with a batch: admit, step, hand tokens out, retire.
pub(crate) fn serve_batched(shared: &Shared, runner: &mut Runner, plan: BatchPlan) {
    let text = runner.text().clone();
    let mut active: Vec<Active<'_>> = Vec::new();
    let mut ready: VecDeque<Ready> = VecDeque::new();
    let mut free: Vec<usize> = (0..plan.batch).rev().collect();
    let mut reserved = 0usize;
    loop {
        // Take what the batch has room for; sleep when there is nothing to do.
        let taken = {
            let Ok(mut q) = shared.queue.lock() else { return };
            let mut taken = Vec::new();
            loop {
                q.prune();
                while active.len() + ready.len() + taken.len() < plan.batch {
                    match q.jobs.pop_front() {
                        Some(job) => taken.push(job),
                        None => break,
                    }
                }
                if !(active.is_empty() && ready.is_empty() && taken.is_empty()) {
                    break;
                }
                q.running.clear();
                if q.shutdown {
                    return;
                }
                q = match shared.wake.wait(q) {
                    Ok(q) => q,
                    Err(_) => return,
                };
            }
            ready.retain(|r| !r.job.abandoned());
            q.running = active.iter().map(|a| &a.job).chain(ready.iter().map(|r| &r.job)).chain(&taken).map(|j| j.cancel.clone()).collect();
            if !taken.is_empty() {
                q.announce_positions();
            }
            taken
        };
        for job in taken {
            let start = Instant::now();
            match prepare(runner, &text, &job, plan.kv_budget) {
                Ok((prompt, need, drafter)) => ready.push_back(Ready { job, prompt, need, start, drafter }),
                Err(e) => fail(&job, &e),
            }
        }
        // Start the ready requests that fit, oldest first (a big one holds the line).
        while let Some(r) = ready.front() {
            if r.job.abandoned() {
                ready.pop_front();
                continue;
            }
            if reserved + r.need > plan.kv_budget || free.is_empty() {
                break;
            }
            let r = ready.pop_front().expect("front exists");
            let slot = take_slot(batch_of(runner), &mut free, &r);
            match start(runner, &text, r, slot) {
                Some(a) => {
                    reserved += a.need;
                    active.push(a);
                }
                None => {
                    batch_of(runner).close(slot);
                    free.push(slot);
                }
            }
        }
        if active.is_empty() {
            continue;
        }
        let ended = step(runner, &mut active);
        // Retire the ended requests, newest index first so the others keep theirs.
        for (i, after) in ended.into_iter().rev() {
            let a = active.remove(i);
            match after {
                After::Ended(end) => {
                    if let Err(e) = a.stream.finish(end, &mut |e| a.job.emit(e)) {
                        fail(&a.job, &e);
                    }
                }
                After::Failed(code, message) => {
                    let _ = a.job.events.send(Event::Error { code, message });
                }
                After::Continue => unreachable!("only ended requests are retired"),
            }
            batch_of(runner).close(a.slot);
            free.push(a.slot);
            reserved -= a.need;
        }
    }
}

/// The free slot for `r`: the one holding the longest prefix of its prompt (a
/// conversation's next turn finds its earlier turns), else the most recently freed.
fn take_slot(rt: &dyn BatchDecode, free: &mut Vec<usize>, r: &Ready) -> usize {
    let best = if r.job.request.cache_prompt {
        (0..free.len()).rev().max_by_key(|&i| rt.cached_prefix(free[i], &r.prompt)).unwrap_or(free.len() - 1)
    } else {
        free.len() - 1
    };
    free.remove(best)
}

/// The runtime's batch side (present: the plan has a batch only for runtimes with one).
fn batch_of(runner: &mut Runner) -> &mut dyn BatchDecode {
    runner.runtime_mut().batch().expect("a batched plan needs a runtime with a batch side")
}

fn fail(job: &Job, e: &Error) {
    let _ = job.events.send(Event::Error { code: ErrorCode::from(e), message: e.to_string() });
}

/// The request's prompt ids, the KV positions it needs (checked against the budget)
/// and its drafter.
fn prepare(runner: &Runner, text: &crate::generator::TextModel, job: &Job, budget: usize) -> Result<(Vec<u32>, usize, Drafter)> {
    let drafter = Drafter::new(runner.draft_plan(&job.request)?);
    let prompt = Stream::prepare(text, runner.runtime().config(), &job.request)?;
    let need = prompt.len() + job.request.max_tokens;
    if need > budget {
        return Err(Error::InvalidRequest(format!(
            "the prompt ({} tokens) and max_tokens ({}) need {need} KV positions, more than this server's budget of {budget}",
            prompt.len(),
            job.request.max_tokens
        )));
    }
    Ok((prompt, need, drafter))
}

/// Opens the request's slot and tells its client it started; `None` when it already
/// ended (nothing to generate, nobody listens, or an error, which it was told).
fn start<'t>(runner: &mut Runner, text: &'t crate::generator::TextModel, r: Ready, slot: usize) -> Option<Active<'t>> {
    let Ready { job, prompt, need, start, drafter } = r;
    let reused = match batch_of(runner).open(slot, need, &prompt, job.request.cache_prompt) {
        Ok(n) => n,
        Err(e) => {
            fail(&job, &e);
            return None;
        }
    };
    let seen = prompt.clone();
    let runtime = runner.runtime_mut();
    let abandoned = || job.abandoned();
    let begun = Stream::begin(text, &job.request, prompt, start, &mut |e| job.emit(e), &mut |p, top| {
        score_prompt(runtime, text, p, top, Cancel::when(&abandoned))
    });
    match begun {
        Ok(Some(mut stream)) => {
            stream.set_cached(reused);
            let guide = job.request.constraint.as_ref().map(|c| c.guide());
            Some(Active { job, stream, slot, need, fed: reused, seen, generated: 0, next: None, drafter, draft: Draft::default(), guide })
        }
        Ok(None) => None,
        Err(e) => {
            fail(&job, &e);
            None
        }
    }
}

/// One step: the decoding requests' tokens and a chunk of the oldest joining prompt,
/// then each finished row's token sampled and handed to its stream. Returns the
/// requests that ended, by index, ascending.
fn step(runner: &mut Runner, active: &mut [Active<'_>]) -> Vec<(usize, After)> {
    // A request cancelled mid-prompt stops before its next chunk.
    let stopped: Vec<bool> = active.iter().map(|a| a.next.is_none() && a.job.abandoned()).collect();
    let mut ended: Vec<(usize, After)> =
        stopped.iter().enumerate().filter(|(_, &s)| s).map(|(i, _)| (i, After::Ended(RunEnd::Stopped))).collect();
    let rt = batch_of(runner);
    // Each decoding request's draft rides as extra rows of its own sequence; drafts
    // beyond what the request may still emit would be verified for nothing.
    for a in active.iter_mut().filter(|a| a.next.is_some()) {
        a.draft = a.drafter.draft(&a.seen, a.job.request.max_tokens - a.generated - 1);
    }
    let decoding: usize = active.iter().filter(|a| a.next.is_some()).map(|a| 1 + a.draft.tokens.len()).sum();
    let room = rt.step_tokens().saturating_sub(decoding);
    let chunk_limit = if decoding > 0 { PREFILL_CHUNK_WHILE_DECODING.min(room) } else { room };
    let joining = (0..active.len()).find(|&i| active[i].next.is_none() && !stopped[i]);
    // Entries in `active` order: (index, tokens fed, rows of logits kept).
    let mut entries: Vec<(usize, Vec<u32>, usize)> = Vec::new();
    for (i, a) in active.iter().enumerate() {
        if let Some(t) = a.next {
            let mut tokens = vec![t];
            tokens.extend_from_slice(&a.draft.tokens);
            let rows = tokens.len();
            entries.push((i, tokens, rows));
        } else if Some(i) == joining && chunk_limit > 0 {
            let n = (a.stream.prompt.len() - a.fed).min(chunk_limit);
            entries.push((i, a.stream.prompt[a.fed..a.fed + n].to_vec(), 1));
        }
    }
    if entries.is_empty() {
        return ended;
    }
    let work: Vec<SlotTokens<'_>> =
        entries.iter().map(|(i, t, rows)| SlotTokens { slot: active[*i].slot, tokens: t, logit_rows: *rows }).collect();
    if let Err(e) = rt.step(&work) {
        let code = ErrorCode::from(&e);
        ended.extend(entries.iter().map(|(i, _, _)| (*i, After::Failed(code, e.to_string()))));
        ended.sort_unstable_by_key(|e| e.0);
        return ended;
    }
    let mut row = 0;
    for (i, fed, rows) in &entries {
        let first = row;
        row += rows;
        let a = &mut active[*i];
        if a.next.is_none() {
            a.draft = Draft::default();
            a.fed += fed.len();
            if a.fed < a.stream.prompt.len() {
                continue;
            }
        }
        let after = hand_out(a, rt, first);
        if !matches!(after, After::Continue) {
            ended.push((*i, after));
        }
    }
    ended.sort_unstable_by_key(|e| e.0);
    ended
}

/// Verifies the request's rows of the last step (from row `first`: after its token,
/// then after each drafted one), hands the accepted tokens and the target's own next
/// token to its stream, and rolls the rejected rows out of its slot.
fn hand_out(a: &mut Active<'_>, rt: &mut dyn BatchDecode, first: usize) -> After {
    let request = &a.job.request;
    let stop_tokens = a.stream.stop_tokens.clone();
    let target =
        Target { sampling: &request.sampling, stop_tokens: &stop_tokens, top_logprobs: request.top_logprobs, max_tokens: request.max_tokens };
    let (job, stream) = (&a.job, &mut a.stream);
    let rows = |j: usize| rt.logits(first + j);
    let on_token = &mut |s: &_| stream.on_token(s, job.abandoned(), &mut |e| job.emit(e));
    let verdict = match verify(&target, a.guide.as_mut(), on_token, &rows, &a.draft, &mut a.seen, &mut a.generated) {
        Ok(v) => v,
        Err(e) => return After::Failed(ErrorCode::from(&e), e.to_string()),
    };
    a.drafter.record(&a.draft, verdict.accepted, verdict.next);
    let rejected = a.draft.tokens.len() - verdict.accepted;
    if rejected > 0 {
        rt.rollback(a.slot, rejected);
    }
    a.stream.set_drafts(a.drafter.counts);
    match (verdict.next, verdict.end) {
        (Some(token), _) => {
            a.next = Some(token);
            After::Continue
        }
        (None, end) => After::Ended(end.expect("a verdict without a next token has ended")),
    }
}
