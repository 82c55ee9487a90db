//! Cancelling during the prompt: the CPU runtimes ask `DecodeJob::cancel` before each
//! prefill chunk (fast) or prompt token (reference), and the engine thread answers
//! yes for a cancelled or abandoned request, so a long prompt nobody wants stops
//! within one chunk and the queue moves on. Counted on the tiny fixture, timed on
//! the default model through the real engine thread.

mod common;

use std::cell::Cell;
use std::path::Path;
use std::time::{Duration, Instant};

use common::llamacpp::default_model;
use peregrine_api::FinishReason;
use peregrine_engine::cpu::act_quant::ActPrecision;
use peregrine_engine::cpu::fast_runtime::{FastOptions, FastRuntime};
use peregrine_engine::cpu::isa::Isa;
use peregrine_engine::cpu::reference_runtime::ReferenceRuntime;
use peregrine_engine::generator::Generator;
use peregrine_engine::gguf::load_gguf;
use peregrine_engine::handle::{EngineHandle, Submission};
use peregrine_engine::request::{Event, Prompt, Request};
use peregrine_engine::runtime::{Cancel, DecodeJob, Flow, RunEnd, Runtime};
use peregrine_engine::sampling::SamplingParams;

/// Prompt tokens of the timed test: 8 chunks of the default prefill batch, long
/// enough that a whole prefill dwarfs one chunk on any machine.
const LONG_PROMPT: usize = 2048;
/// The timed test cancels this long after the engine took the request.
const CANCEL_AFTER: Duration = Duration::from_millis(50);
/// A cancelled prefill must end within this share of the uncancelled one (one
/// chunk is 1/8 of it; the rest is margin for a noisy shared machine).
const MAX_SHARE_OF_PREFILL: f64 = 0.5;

/// A prompt of ordinary ids below `vocab`, without repeats that could look special.
fn prompt(n: usize, vocab: usize) -> Vec<u32> {
    (0..n).map(|i| (3 + (i * 37) % (vocab - 3)) as u32).collect()
}

/// Runs `prompt` with a cancel predicate that counts its calls and answers yes from
/// call `fire_at` on; returns how it ended, the tokens and the number of calls.
fn run_counted(rt: &mut dyn Runtime, prompt: &[u32], max_tokens: usize, fire_at: usize) -> (RunEnd, Vec<u32>, usize) {
    let asked = Cell::new(0usize);
    let requested = || {
        asked.set(asked.get() + 1);
        asked.get() >= fire_at
    };
    let sampling = SamplingParams::default();
    let job = DecodeJob {
        prompt,
        max_tokens,
        sampling: &sampling,
        stop_tokens: &[],
        top_logprobs: 0,
        cancel: Cancel::when(&requested),
        reuse_prefix: false,
        draft: peregrine_engine::speculative::DraftPlan::OFF,
        constraint: None,
    };
    let mut ids = Vec::new();
    let end = rt
        .generate(&job, &mut |s| {
            ids.push(s.id);
            Flow::Continue
        })
        .unwrap();
    (end, ids, asked.get())
}

fn tiny() -> (peregrine_engine::config::ModelConfig, peregrine_engine::weights::Weights) {
    peregrine_engine::hf::load_hf_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf/qwen2-tied")).unwrap()
}

#[test]
fn fast_runtime_scoring_asks_before_every_chunk_and_gives_up_there() {
    let (config, weights) = tiny();
    let batch = 16;
    let options = FastOptions { threads: 1, isa: Isa::detect(None), prefill_batch: batch, act_precision: ActPrecision::Int16 };
    let mut rt = FastRuntime::new(&config, &weights, options).unwrap();
    let p = prompt(100, config.vocab_size);
    let asked = Cell::new(0usize);
    let never = || {
        asked.set(asked.get() + 1);
        false
    };
    let full = rt.score_unless(&p, Cancel::when(&never)).unwrap().expect("not cancelled");
    assert_eq!((full.len(), asked.get()), (p.len(), p.len().div_ceil(batch)), "every position scored, asked once per chunk");
    assert_eq!(full, rt.score(&p).unwrap(), "the same logits as score");
    asked.set(0);
    let third = || {
        asked.set(asked.get() + 1);
        asked.get() >= 3
    };
    assert!(rt.score_unless(&p, Cancel::when(&third)).unwrap().is_none(), "cancelled scoring gives nothing");
    assert_eq!(asked.get(), 3, "stopped before the third chunk");
    assert_eq!(rt.score(&p).unwrap(), full, "a later scoring is unharmed");
}

#[test]
fn fast_runtime_asks_before_every_prefill_chunk_and_stops_there() {
    let (config, weights) = tiny();
    let batch = 16;
    let options = FastOptions { threads: 1, isa: Isa::detect(None), prefill_batch: batch, act_precision: ActPrecision::Int16 };
    let mut rt = FastRuntime::new(&config, &weights, options).unwrap();
    let p = prompt(100, config.vocab_size);
    let chunks = p.len().div_ceil(batch);

    let (end, full, asked) = run_counted(&mut rt, &p, 4, usize::MAX);
    assert_eq!((end, full.len(), asked), (RunEnd::Length, 4, chunks), "uncancelled: asked once per chunk");

    let (end, ids, asked) = run_counted(&mut rt, &p, 4, 3);
    assert_eq!((end, asked), (RunEnd::Stopped, 3), "cancelled before the third chunk");
    assert!(ids.is_empty(), "no token after a cancel in the prompt: {ids:?}");

    let (end, ids, asked) = run_counted(&mut rt, &p, 4, 1);
    assert_eq!((end, asked, ids.len()), (RunEnd::Stopped, 1, 0), "cancelled before the first chunk");

    // The half-filled cache of the cancelled runs leaves no trace.
    let (_, again, _) = run_counted(&mut rt, &p, 4, usize::MAX);
    assert_eq!(again, full);
}

#[test]
fn reference_runtime_asks_before_every_prompt_token_and_stops_there() {
    let (config, weights) = tiny();
    let mut rt = ReferenceRuntime::new(&config, &weights).unwrap();
    let p = prompt(40, config.vocab_size);

    let (end, full, asked) = run_counted(&mut rt, &p, 3, usize::MAX);
    assert_eq!((end, full.len(), asked), (RunEnd::Length, 3, p.len()), "uncancelled: asked once per prompt token");

    let (end, ids, asked) = run_counted(&mut rt, &p, 3, 10);
    assert_eq!((end, asked), (RunEnd::Stopped, 10), "cancelled before the tenth prompt token");
    assert!(ids.is_empty(), "no token after a cancel in the prompt: {ids:?}");

    let (_, again, _) = run_counted(&mut rt, &p, 3, usize::MAX);
    assert_eq!(again, full);
}

/// The fast runtime on the default model behind the real engine thread (token prompts).
fn default_engine() -> (EngineHandle, usize) {
    let (_, config, weights) = load_gguf(&default_model()).unwrap();
    let vocab = config.vocab_size;
    let engine = EngineHandle::start(
        move || {
            let rt = FastRuntime::new(&config, &weights, FastOptions::defaults())?;
            eprintln!("engine: {}", rt.backend().devices.join(", "));
            Ok(Generator::new(Box::new(rt), None, None))
        },
        4,
    )
    .unwrap();
    (engine, vocab)
}

/// A request that reads its whole prompt (no reuse of an earlier run's cache: the
/// test times prefills of the same prompt).
fn request(prompt: Vec<u32>, max_tokens: usize) -> Request {
    Request { max_tokens, ignore_eos: true, cache_prompt: false, ..Request::new(Prompt::Tokens(prompt)) }
}

/// The next event other than queue positions and stats; panics after 120 s.
async fn next(sub: &mut Submission) -> Event {
    loop {
        let e =
            tokio::time::timeout(Duration::from_secs(120), sub.events.recv()).await.expect("an event within 120 s").expect("channel open");
        if !matches!(e, Event::Queued { .. } | Event::Stats(_)) {
            return e;
        }
    }
}

/// Events up to and including the terminal one.
async fn rest(sub: &mut Submission) -> Vec<Event> {
    let mut out = Vec::new();
    loop {
        let e = next(sub).await;
        let end = matches!(e, Event::Done { .. } | Event::Error { .. });
        out.push(e);
        if end {
            return out;
        }
    }
}

/// Submits a short request behind the running one; after `t0` it must start and
/// finish normally. Returns seconds from `t0` to its first token.
async fn next_request_runs(mut sub: Submission, t0: Instant) -> f64 {
    assert!(matches!(next(&mut sub).await, Event::Started { prompt_tokens: 8 }));
    let events = rest(&mut sub).await;
    let first = t0.elapsed().as_secs_f64(); // upper bound: its events were read after all arrived
    let tokens = events.iter().filter(|e| matches!(e, Event::Token { .. })).count();
    match events.last() {
        Some(Event::Done { finish_reason: FinishReason::Length, usage, .. }) => assert_eq!((tokens, usage.completion_tokens), (4, 4)),
        other => panic!("the next request did not finish normally: {other:?}"),
    }
    first
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_long_prompt_stops_within_a_chunk_and_the_queue_moves_on() {
    let (engine, vocab) = default_engine();
    let long = prompt(LONG_PROMPT, vocab);
    let short = prompt(8, vocab);

    // Warm up (first-touch of the packed weights and the cache), then time the
    // whole prefill of the long prompt: Started → its one token.
    let mut warm = engine.submit(request(long[..300].to_vec(), 1)).unwrap();
    rest(&mut warm).await;
    let mut full = engine.submit(request(long.clone(), 1)).unwrap();
    assert!(matches!(next(&mut full).await, Event::Started { .. }));
    let t = Instant::now();
    let events = rest(&mut full).await;
    let prefill = t.elapsed().as_secs_f64();
    assert!(matches!(events.last(), Some(Event::Done { finish_reason: FinishReason::Length, .. })), "{:?}", events.last());

    // cancel(): the run ends as cancelled, with no token, within a chunk.
    let mut a = engine.submit(request(long.clone(), 16)).unwrap();
    let b = engine.submit(request(short.clone(), 4)).unwrap();
    assert!(matches!(next(&mut a).await, Event::Started { prompt_tokens: LONG_PROMPT }));
    tokio::time::sleep(CANCEL_AFTER).await;
    a.cancel.cancel();
    let t0 = Instant::now();
    let events = rest(&mut a).await;
    let stopped = t0.elapsed().as_secs_f64();
    assert!(!events.iter().any(|e| matches!(e, Event::Token { .. } | Event::Text(_))), "nothing is emitted after the cancel: {events:?}");
    match events.last() {
        Some(Event::Done { finish_reason, usage, .. }) => {
            assert_eq!(*finish_reason, FinishReason::Cancelled);
            assert_eq!(usage.completion_tokens, 0);
        }
        other => panic!("expected done, got {other:?}"),
    }
    let next_after_cancel = next_request_runs(b, t0).await;

    // A dropped receiver (the client left without a word): the engine notices too.
    let a = engine.submit(request(long.clone(), 16)).unwrap();
    let mut b = engine.submit(request(short, 4)).unwrap();
    let Submission { mut events, cancel: _keep_uncancelled } = a;
    // A position may come first: the previous run ends just after its `Done`.
    while !matches!(events.recv().await.expect("channel open"), Event::Started { .. }) {}
    tokio::time::sleep(CANCEL_AFTER).await;
    drop(events);
    let t0 = Instant::now();
    assert!(matches!(next(&mut b).await, Event::Started { .. }));
    let started = t0.elapsed().as_secs_f64();
    let events = rest(&mut b).await;
    assert!(matches!(events.last(), Some(Event::Done { finish_reason: FinishReason::Length, .. })), "{:?}", events.last());

    eprintln!(
        "cancel mid-prefill ({LONG_PROMPT} tokens, cancelled {} ms after start): whole prefill {prefill:.3} s; \
         cancel() → done {stopped:.3} s; → next request done {next_after_cancel:.3} s; dropped receiver → next request started {started:.3} s",
        CANCEL_AFTER.as_millis()
    );
    let bound = prefill * MAX_SHARE_OF_PREFILL;
    assert!(stopped < bound, "the cancelled prefill took {stopped:.3} s to stop (whole prefill {prefill:.3} s)");
    assert!(next_after_cancel < bound + prefill * 0.25, "the next request finished {next_after_cancel:.3} s after the cancel");
    assert!(started < bound, "the next request started {started:.3} s after the receiver was dropped (whole prefill {prefill:.3} s)");
}
