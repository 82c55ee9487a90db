//! Continuous batching through the real engine thread on the default model (fast CPU
//! runtime, real tokenizer): a request gives the same tokens alone and alongside others
//! (one joining mid-way, one cancelled mid-way, one seeded sampler, one stop string),
//! the KV budget makes requests wait or refuses them, queue positions count the batch,
//! and batches a runtime cannot run are load errors.

mod common;

use std::time::Duration;

use common::llamacpp::default_model;
use peregrine_api::FinishReason;
use peregrine_engine::handle::{EngineHandle, EngineLimits, Submission};
use peregrine_engine::request::{ErrorCode, Event, Prompt, Request};
use peregrine_engine::sampling::SamplingParams;
use peregrine_engine::{build_generator, load_model, CpuRuntimeKind, EngineOptions};

/// Threads of the engines under test (this machine's CI has two cores).
const THREADS: usize = 2;

fn engine(max_batch: usize, kv_budget: Option<usize>) -> EngineHandle {
    engine_with(CpuRuntimeKind::Fast, max_batch, kv_budget).expect("engine starts")
}

fn engine_with(runtime: CpuRuntimeKind, max_batch: usize, kv_budget: Option<usize>) -> peregrine_engine::Result<EngineHandle> {
    let mut options = EngineOptions::cpu();
    options.cpu.threads = Some(THREADS);
    options.cpu.runtime = runtime;
    let limits = EngineLimits { max_queue: 8, max_batch: Some(max_batch), kv_budget, speculative: Default::default() };
    EngineHandle::start(move || build_generator(load_model(&default_model())?, &options), limits)
}

fn request(prompt: &str, max_tokens: usize) -> Request {
    Request { max_tokens, ..Request::new(Prompt::Text(prompt.into())) }
}

/// The requests of the equality test: greedy ones, a seeded sampler, a stop string.
fn requests() -> Vec<Request> {
    let mut seeded = request("Once upon a time, in a small village,", 40);
    seeded.sampling = SamplingParams { temperature: 0.9, top_k: 40, seed: 7, ..SamplingParams::default() };
    let mut stopped = request("The three primary colours are", 48);
    stopped.stop = vec![".".into()];
    vec![
        request("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n", 48),
        seeded,
        request("The capital of France is", 40),
        stopped,
    ]
}

/// What a request produced: token ids, text, how it ended.
#[derive(Debug, Clone, PartialEq)]
struct Outcome {
    ids: Vec<u32>,
    text: String,
    finish: Option<FinishReason>,
    error: Option<(ErrorCode, String)>,
}

/// The next event; panics after 120 s.
async fn next(sub: &mut Submission) -> Event {
    tokio::time::timeout(Duration::from_secs(120), sub.events.recv()).await.expect("an event within 120 s").expect("channel open")
}

impl Outcome {
    fn new() -> Outcome {
        Outcome { ids: Vec::new(), text: String::new(), finish: None, error: None }
    }
}

/// Reads events until the terminal one; `cancel_after`: cancel once that many tokens came.
async fn run_out(sub: &mut Submission, cancel_after: Option<usize>) -> Outcome {
    read(sub, Outcome::new(), cancel_after, usize::MAX).await
}

/// Reads events into `out` until the terminal one, or until it holds `pause_at` tokens.
async fn read(sub: &mut Submission, mut out: Outcome, cancel_after: Option<usize>, pause_at: usize) -> Outcome {
    while out.ids.len() < pause_at {
        match next(sub).await {
            Event::Token { id, text, .. } => {
                out.ids.push(id);
                out.text += &text;
                if Some(out.ids.len()) == cancel_after {
                    sub.cancel.cancel();
                }
            }
            Event::Text(t) => out.text += &t,
            Event::Done { finish_reason, .. } => {
                out.finish = Some(finish_reason);
                return out;
            }
            Event::Error { code, message } => {
                out.error = Some((code, message));
                return out;
            }
            _ => {}
        }
    }
    out
}

async fn alone(engine: &EngineHandle, r: &Request) -> Outcome {
    run_out(&mut engine.submit(r.clone()).expect("queued"), None).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_gives_the_same_tokens_alone_and_batched() {
    let rs = requests();
    // One at a time through Runtime::generate: the reference.
    let single = engine(1, None);
    let mut solo = Vec::new();
    for r in &rs {
        solo.push(alone(&single, r).await);
    }
    single.shutdown();
    for (r, o) in rs.iter().zip(&solo) {
        assert!(o.error.is_none() && o.ids.len() > 3, "{r:?} gave {o:?}");
    }
    assert_eq!(solo[3].finish, Some(FinishReason::Stop), "the stop string ends its request: {:?}", solo[3]);

    let batched = engine(4, None);
    // Alone on the batched engine: the same as the one-at-a-time path.
    assert_eq!(alone(&batched, &rs[0]).await, solo[0]);
    // Three start together, the third of which is cancelled mid-way; the fourth joins
    // mid-way (into the cancelled one's slot) while the others decode.
    let mut subs: Vec<Submission> = rs[..3].iter().map(|r| batched.submit(r.clone()).expect("queued")).collect();
    let mut victim = batched.submit(request("Write a long story about a dragon:", 64)).expect("queued");
    let first = read(&mut subs[0], Outcome::new(), None, 5).await;
    assert!(first.finish.is_none(), "the first request is still decoding");
    let victim_out = run_out(&mut victim, Some(3)).await;
    let mut joiner = batched.submit(rs[3].clone()).expect("queued");
    let mut outs = vec![read(&mut subs[0], first, None, usize::MAX).await];
    for sub in &mut subs[1..] {
        outs.push(run_out(sub, None).await);
    }
    outs.push(run_out(&mut joiner, None).await);
    for (i, (o, s)) in outs.iter().zip(&solo).enumerate() {
        assert_eq!(o, s, "request {i}: batched differs from alone");
    }
    // The cancelled request's tokens are the start of what it gives alone.
    assert_eq!(victim_out.finish, Some(FinishReason::Cancelled), "{victim_out:?}");
    let victim_alone = alone(&batched, &request("Write a long story about a dragon:", 64)).await;
    assert!(victim_out.ids.len() >= 3 && victim_alone.ids.starts_with(&victim_out.ids), "{victim_out:?} vs {victim_alone:?}");
    assert!(tokio::time::timeout(Duration::from_secs(5), async {
        while batched.busy() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kv_budget_makes_requests_wait_or_refuses_them() {
    // Each request below needs 8-ish prompt + 40 positions; two do not fit in 70.
    let engine = engine(4, Some(70));
    let too_big = alone(&engine, &request("Hello there", 100)).await;
    let (code, message) = too_big.error.expect("refused");
    assert_eq!(code, ErrorCode::InvalidRequest);
    assert!(message.contains("budget of 70"), "{message}");

    let r = request("The capital of France is", 40);
    let mut a = engine.submit(Request { ignore_eos: true, ..r.clone() }).expect("queued");
    let mut b = engine.submit(Request { ignore_eos: true, ..r }).expect("queued");
    // b cannot start before a ends: its first event after a's Done is Started.
    let mut a_done = false;
    let mut order = Vec::new();
    while !a_done {
        // Biased: when a's Done and b's Started are both waiting, a's is read first
        // (an unbiased select would pick one at random and report a false order).
        tokio::select! {
            biased;
            e = next(&mut a) => if let Event::Done { .. } = e { a_done = true; order.push("a done") },
            e = next(&mut b) => if let Event::Started { .. } = e { order.push("b started") },
        }
    }
    let b_out = run_out(&mut b, None).await;
    assert_eq!(order, ["a done"], "b started before a finished: {order:?}");
    assert_eq!(b_out.ids.len(), 40);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_positions_count_the_batch() {
    let engine = engine(2, None);
    let r = Request { ignore_eos: true, ..request("Count to ten:", 24) };
    let mut subs: Vec<Submission> = (0..2).map(|_| engine.submit(r.clone()).expect("queued")).collect();
    for s in &mut subs {
        // Both have a place in the batch: they start (a Queued may come first while
        // the engine thread has not yet taken the one ahead).
        while !matches!(next(s).await, Event::Started { .. }) {}
    }
    // The batch is full now: the third waits, first in line.
    subs.push(engine.submit(r.clone()).expect("queued"));
    assert_eq!(next(&mut subs[2]).await, Event::Queued { position: 0 });
    for s in &mut subs {
        assert_eq!(run_out(s, None).await.ids.len(), 24);
    }
    assert_eq!(engine.info().max_batch, 2);
}

#[test]
fn batches_a_runtime_cannot_run_are_load_errors() {
    let err = |r: peregrine_engine::Result<EngineHandle>| r.err().expect("refused").to_string();
    assert!(err(engine_with(CpuRuntimeKind::Fast, 0, None)).contains("at least 1"));
    assert!(err(engine_with(CpuRuntimeKind::Fast, 9, None)).contains("more than the 8"));
    assert!(err(engine_with(CpuRuntimeKind::Reference, 2, None)).contains("one request at a time"));
    assert!(err(engine_with(CpuRuntimeKind::Fast, 2, Some(0))).contains("at least 1 position"));
    let default = EngineHandle::start(
        || {
            let mut options = EngineOptions::cpu();
            options.cpu.threads = Some(THREADS);
            build_generator(load_model(&default_model())?, &options)
        },
        EngineLimits { max_queue: 2, max_batch: None, kv_budget: None, speculative: Default::default() },
    )
    .expect("starts");
    assert_eq!(default.info().max_batch, peregrine_engine::cpu::fast_runtime::DEFAULT_BATCH);
    assert_eq!(default.info().kv_budget, default.info().context_length * default.info().max_batch);
}
