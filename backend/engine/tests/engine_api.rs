//! The streaming engine API: event order, timings, FIFO queue positions and
//! cancellation (cancel() and a dropped receiver), driven through the real engine
//! thread. A gated runtime lets the test decide when each token is produced, so
//! cancellation is observed deterministically; one test runs the real reference model.

use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use peregrine_api::FinishReason;
use peregrine_engine::config::ModelConfig;
use peregrine_engine::cpu::reference_runtime::ReferenceRuntime;
use peregrine_engine::generator::Generator;
use peregrine_engine::handle::EngineHandle;
use peregrine_engine::request::{Event, Prompt, Request};
use peregrine_engine::runtime::{BackendInfo, DecodeJob, Flow, RunEnd, Runtime};
use peregrine_engine::sampling::Sampled;

/// Emits token `100 + i` each time the test sends a unit on the gate.
struct GatedRuntime {
    config: ModelConfig,
    gate: Arc<Mutex<mpsc::Receiver<()>>>,
}

impl Runtime for GatedRuntime {
    fn config(&self) -> &ModelConfig {
        &self.config
    }
    fn backend(&self) -> BackendInfo {
        BackendInfo { kind: "test".into(), devices: vec![] }
    }
    fn generate(&mut self, job: &DecodeJob<'_>, on_token: &mut dyn FnMut(&Sampled) -> Flow) -> peregrine_engine::Result<RunEnd> {
        for i in 0..job.max_tokens {
            if self.gate.lock().unwrap().recv().is_err() {
                return Ok(RunEnd::Stopped);
            }
            let s = Sampled { id: 100 + i as u32, logprob: -0.5, top: vec![], accepted_draft: false };
            if on_token(&s) == Flow::Stop {
                return Ok(RunEnd::Stopped);
            }
        }
        Ok(RunEnd::Length)
    }
    fn score(&mut self, _tokens: &[u32]) -> peregrine_engine::Result<Vec<Vec<f32>>> {
        Ok(vec![])
    }
}

fn tiny_config() -> ModelConfig {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf/qwen2-tied");
    peregrine_engine::hf::load_hf_dir(&dir).unwrap().0
}

fn gated_engine() -> (EngineHandle, mpsc::Sender<()>) {
    let (tx, rx) = mpsc::channel();
    let gate = Arc::new(Mutex::new(rx));
    let config = tiny_config();
    let engine = EngineHandle::start(move || Ok(Generator::new(Box::new(GatedRuntime { config, gate }), None, None)), 4).unwrap();
    (engine, tx)
}

fn request(max_tokens: usize) -> Request {
    Request { max_tokens, ..Request::new(Prompt::Tokens(vec![5, 6, 7])) }
}

async fn next(rx: &mut tokio::sync::mpsc::UnboundedReceiver<Event>) -> Event {
    tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.expect("event within 10 s").expect("channel open")
}

/// Skips stats and queue-position events.
async fn next_non_stats(rx: &mut tokio::sync::mpsc::UnboundedReceiver<Event>) -> Event {
    loop {
        match next(rx).await {
            Event::Stats(_) | Event::Queued { .. } => continue,
            e => return e,
        }
    }
}

#[tokio::test]
async fn events_arrive_in_order_with_usage() {
    let (engine, gate) = gated_engine();
    let mut sub = engine.submit(request(3)).unwrap();
    assert_eq!(next(&mut sub.events).await, Event::Started { prompt_tokens: 3 });
    for i in 0..3u32 {
        gate.send(()).unwrap();
        match next_non_stats(&mut sub.events).await {
            Event::Token { id, .. } => assert_eq!(id, 100 + i),
            other => panic!("expected a token, got {other:?}"),
        }
    }
    match next_non_stats(&mut sub.events).await {
        Event::Done { finish_reason, usage, timings } => {
            assert_eq!(finish_reason, FinishReason::Length);
            assert_eq!((usage.prompt_tokens, usage.completion_tokens, usage.total_tokens), (3, 3, 6));
            assert_eq!(timings.predicted_n, 3);
        }
        other => panic!("expected done, got {other:?}"),
    }
}

#[tokio::test]
async fn cancel_stops_at_the_next_token_and_queue_moves_on() {
    let (engine, gate) = gated_engine();
    let mut first = engine.submit(request(50)).unwrap();
    assert_eq!(next(&mut first.events).await, Event::Started { prompt_tokens: 3 });
    let mut second = engine.submit(request(1)).unwrap();
    assert_eq!(next(&mut second.events).await, Event::Queued { position: 0 });
    gate.send(()).unwrap();
    assert!(matches!(next_non_stats(&mut first.events).await, Event::Token { .. }));
    first.cancel.cancel();
    gate.send(()).unwrap();
    // The token in flight is delivered, then the run ends as cancelled.
    loop {
        match next_non_stats(&mut first.events).await {
            Event::Token { .. } => continue,
            Event::Done { finish_reason, usage, .. } => {
                assert_eq!(finish_reason, FinishReason::Cancelled);
                assert!(usage.completion_tokens <= 2);
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    // The queued request now runs.
    assert_eq!(next(&mut second.events).await, Event::Started { prompt_tokens: 3 });
    gate.send(()).unwrap();
    assert!(matches!(next_non_stats(&mut second.events).await, Event::Token { .. }));
    assert!(matches!(next_non_stats(&mut second.events).await, Event::Done { finish_reason: FinishReason::Length, .. }));
}

#[tokio::test]
async fn dropping_the_receiver_frees_the_engine() {
    let (engine, gate) = gated_engine();
    let mut first = engine.submit(request(50)).unwrap();
    assert_eq!(next(&mut first.events).await, Event::Started { prompt_tokens: 3 });
    drop(first);
    gate.send(()).unwrap(); // this token finds nobody listening: the run stops
    let mut second = engine.submit(request(1)).unwrap();
    loop {
        match next(&mut second.events).await {
            Event::Queued { .. } => continue,
            Event::Started { .. } => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    gate.send(()).unwrap();
    assert!(matches!(next_non_stats(&mut second.events).await, Event::Token { .. }));
}

#[tokio::test]
async fn a_full_queue_is_refused_and_bad_requests_are_errors() {
    let (engine, gate) = gated_engine();
    let mut running = engine.submit(request(50)).unwrap();
    assert_eq!(next(&mut running.events).await, Event::Started { prompt_tokens: 3 });
    let _q: Vec<_> = (0..4).map(|_| engine.submit(request(1)).unwrap()).collect();
    assert!(matches!(engine.submit(request(1)), Err(peregrine_engine::Error::Unavailable(_))));
    drop(gate);

    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf/qwen2-tied");
    let engine = EngineHandle::start(
        move || {
            let (config, weights) = peregrine_engine::hf::load_hf_dir(&dir)?;
            Ok(Generator::new(Box::new(ReferenceRuntime::new(&config, &weights)?), None, None))
        },
        4,
    )
    .unwrap();
    // Queued without `admit` (try_submit): the engine thread refuses them itself.
    let mut too_long = engine.try_submit(request(1000)).unwrap();
    assert!(matches!(next_non_stats(&mut too_long.events).await, Event::Error { .. }));
    let mut bad_id = engine.try_submit(Request { max_tokens: 2, ..Request::new(Prompt::Tokens(vec![999_999])) }).unwrap();
    assert!(matches!(next_non_stats(&mut bad_id.events).await, Event::Error { .. }));
    let mut text = engine.submit(Request::new(Prompt::Text("no tokenizer".into()))).unwrap();
    assert!(matches!(next_non_stats(&mut text.events).await, Event::Error { .. }));
    // The real model generates after those errors.
    let mut ok = engine.submit(Request { max_tokens: 4, ..Request::new(Prompt::Tokens(vec![5, 6, 7])) }).unwrap();
    let mut tokens = 0;
    loop {
        match next(&mut ok.events).await {
            Event::Token { .. } => tokens += 1,
            Event::Done { finish_reason, .. } => {
                assert_eq!(finish_reason, FinishReason::Length);
                break;
            }
            Event::Error { message, .. } => panic!("{message}"),
            _ => {}
        }
    }
    assert_eq!(tokens, 4);
}

#[test]
fn load_errors_come_back_through_the_ready_channel() {
    let err = EngineHandle::start(|| Err(peregrine_engine::Error::InvalidRequest("boom".into())), 1).err().expect("an error");
    assert!(err.to_string().contains("boom"));
}

#[tokio::test]
async fn queued_requests_of_several_clients_take_turns() {
    let (engine, gate) = gated_engine();
    let from = |ip: [u8; 4], max_tokens| Request { client: Some(std::net::IpAddr::from(ip)), ..request(max_tokens) };
    let (a, b) = ([10, 0, 0, 1], [10, 0, 0, 2]);
    // A runs; A's burst of three waits; then B asks once.
    let mut running = engine.submit(from(a, 1)).unwrap();
    assert_eq!(next(&mut running.events).await, Event::Started { prompt_tokens: 3 });
    let mut queued: Vec<_> = (0..3).map(|_| engine.submit(from(a, 1)).unwrap()).collect();
    let mut b_sub = engine.submit(from(b, 1)).unwrap();
    // B goes after A's first waiting request, not after all three.
    let last_position = |rx: &mut tokio::sync::mpsc::UnboundedReceiver<Event>| {
        let mut at = None;
        while let Ok(e) = rx.try_recv() {
            if let Event::Queued { position } = e {
                at = Some(position);
            }
        }
        at
    };
    assert_eq!(last_position(&mut b_sub.events), Some(1));
    let positions: Vec<_> = queued.iter_mut().map(|s| last_position(&mut s.events)).collect();
    assert_eq!(positions, vec![Some(0), Some(2), Some(3)], "A's later requests moved back one");
    // The engine then starts them in that order: each one's token is let through only
    // once it started, so a wrong order would leave the awaited one unstarted.
    gate.send(()).unwrap();
    while !matches!(next(&mut running.events).await, Event::Done { .. }) {}
    let mut rest: Vec<_> = queued.into_iter().collect();
    rest.insert(1, b_sub);
    for (turn, mut sub) in rest.into_iter().enumerate() {
        loop {
            match next(&mut sub.events).await {
                Event::Started { .. } => gate.send(()).unwrap(),
                Event::Done { .. } => break,
                Event::Queued { .. } | Event::Stats(_) | Event::Token { .. } | Event::Text(_) => {}
                other => panic!("turn {turn}: {other:?}"),
            }
        }
    }
}

#[tokio::test]
async fn a_request_the_model_cannot_serve_is_refused_before_it_queues() {
    let (engine, _gate) = gated_engine();
    let info = engine.info().clone();
    let too_long = Request { max_tokens: info.context_length, ..request(0) };
    let outside = Request { max_tokens: 4, ..Request::new(Prompt::Tokens(vec![info.vocab_size as u32])) };
    let empty = Request { max_tokens: 4, ..Request::new(Prompt::Tokens(vec![])) };
    let bad_sampling = Request { sampling: peregrine_engine::SamplingParams { top_p: 2.0, ..Default::default() }, ..request(4) };
    for (r, says) in [(too_long, "shorten the prompt"), (outside, "outside the vocabulary"), (empty, "empty"), (bad_sampling, "top_p")] {
        let err = engine.submit(r.clone()).err().expect("refused at submit").to_string();
        assert!(err.contains(says), "{err}");
        assert!(engine.admit(&r).is_err());
    }
    assert_eq!(engine.queue_len(), 0);
    assert!(engine.admit(&request(4)).is_ok());
}
