//! The queue, limits and timers over real HTTP with a scripted engine whose tokens the
//! test releases one by one: queue positions on the stream, 429 with Retry-After
//! (full queue, per-client limit), a queued request whose client left never runs,
//! stats ticks while tokens are slow, the request timeout, graceful shutdown; and the
//! queue, a client leaving and the timeout again with a batch of four running at once.

mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{dist_with_index, gated_batch_engine, gated_engine, metric, start, wait_for, Scripted, Server, SseReader};
use peregrine_server::app::AppState;
use peregrine_server::config::Settings;
use serde_json::{json, Value};

async fn serve(s: &Scripted, settings: Settings) -> Server {
    start(AppState::new(dist_with_index()).with_engine(s.engine.clone(), "scripted").with_settings(settings)).await
}

async fn generate(client: &reqwest::Client, server: &Server, prompt: &str, max_tokens: u32) -> reqwest::Response {
    client.post(server.url("/api/generate")).json(&json!({ "prompt": prompt, "max_tokens": max_tokens })).send().await.unwrap()
}

/// The next event that is not `stats`.
async fn next_non_stats(r: &mut SseReader) -> (String, Value) {
    loop {
        let e = r.next().await.expect("stream open");
        if e.event != "stats" {
            return (e.event.clone(), e.json());
        }
    }
}

/// Expects `started`, after at most one `queued` (the engine may still be wrapping up
/// the previous request when this one arrives).
async fn expect_started(r: &mut SseReader) {
    let mut first = next_non_stats(r).await;
    if first.0 == "queued" {
        first = next_non_stats(r).await;
    }
    assert_eq!(first.0, "started", "{}", first.1);
}

/// Lets `n` tokens through the gate.
fn release(gate: &mpsc::Sender<()>, n: usize) {
    for _ in 0..n {
        gate.send(()).unwrap();
    }
}

#[tokio::test]
async fn queued_requests_see_their_position_and_a_full_queue_is_429() {
    let (s, gate) = gated_engine(2);
    let server = serve(&s, Settings::default()).await;
    let client = reqwest::Client::new();
    let mut a = SseReader::new(generate(&client, &server, "first", 50).await);
    assert_eq!(next_non_stats(&mut a).await.0, "started");
    let mut b = SseReader::new(generate(&client, &server, "second", 2).await);
    assert_eq!(next_non_stats(&mut b).await, ("queued".into(), json!({ "type": "queued", "position": 0 })));
    let mut c = SseReader::new(generate(&client, &server, "third", 2).await);
    assert_eq!(next_non_stats(&mut c).await, ("queued".into(), json!({ "type": "queued", "position": 1 })));

    let full = generate(&client, &server, "fourth", 2).await;
    assert_eq!(full.status(), 429);
    let retry: u64 = full.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry >= 1);
    let body: Value = full.json().await.unwrap();
    assert_eq!(body["code"], "busy");
    assert_eq!(body["retry_after_ms"], retry * 1000);
    let openai = client.post(server.url("/v1/completions")).json(&json!({ "prompt": "x" })).send().await.unwrap();
    assert_eq!(openai.status(), 429);
    assert!(openai.headers().contains_key("retry-after"));
    let body: Value = openai.json().await.unwrap();
    assert_eq!(body["error"]["type"], "rate_limit_error");

    // The first finishes: the second starts, the third moves up.
    release(&gate, 50);
    loop {
        if next_non_stats(&mut a).await.0 == "done" {
            break;
        }
    }
    assert_eq!(next_non_stats(&mut b).await.0, "started");
    assert_eq!(next_non_stats(&mut c).await, ("queued".into(), json!({ "type": "queued", "position": 0 })));
    release(&gate, 4);
    assert_eq!(b.collect().await.last().unwrap().event, "done");
    assert_eq!(c.collect().await.last().unwrap().event, "done");
    let m = client.get(server.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert_eq!(metric(&m, "peregrine_requests_rejected_total{reason=\"queue_full\"}"), Some(2.0));
    assert_eq!(metric(&m, "peregrine_requests_total{finish_reason=\"length\"}"), Some(3.0));
}

#[tokio::test]
async fn a_client_over_its_limit_gets_429_until_a_request_ends() {
    let (s, gate) = gated_engine(4);
    let server = serve(&s, Settings { max_per_client: 1, ..Settings::default() }).await;
    let client = reqwest::Client::new();
    let mut a = SseReader::new(generate(&client, &server, "mine", 1).await);
    assert_eq!(next_non_stats(&mut a).await.0, "started");
    let second = generate(&client, &server, "again", 1).await;
    assert_eq!(second.status(), 429);
    assert!(second.headers().contains_key("retry-after"));
    let body: Value = second.json().await.unwrap();
    assert_eq!(body["code"], "client_limit");
    release(&gate, 1);
    assert_eq!(a.collect().await.last().unwrap().event, "done");
    let mut again = SseReader::new(generate(&client, &server, "again", 1).await);
    expect_started(&mut again).await;
    release(&gate, 1);
    assert_eq!(again.collect().await.last().unwrap().event, "done");
}

#[tokio::test]
async fn a_queued_request_whose_client_left_never_runs() {
    let (s, gate) = gated_engine(4);
    let server = serve(&s, Settings::default()).await;
    let client = reqwest::Client::new();
    let mut a = SseReader::new(generate(&client, &server, "running", 3).await);
    assert_eq!(next_non_stats(&mut a).await.0, "started");
    let mut b = SseReader::new(generate(&client, &server, "zebra quokka", 3).await);
    assert_eq!(next_non_stats(&mut b).await.0, "queued");
    drop(b); // the client goes away while queued
    let engine = s.engine.clone();
    assert!(wait_for(Duration::from_secs(5), || engine.queue_len() == 0).await, "the abandoned request left the queue");
    release(&gate, 3);
    assert_eq!(a.collect().await.last().unwrap().event, "done");
    let mut c = SseReader::new(generate(&client, &server, "after", 1).await);
    expect_started(&mut c).await;
    release(&gate, 1);
    assert_eq!(c.collect().await.last().unwrap().event, "done");
    let ran = s.ran.lock().unwrap().clone();
    assert_eq!(ran.len(), 2, "only the first and the third ran: {ran:?}");
    let m = client.get(server.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert_eq!(metric(&m, "peregrine_requests_total{finish_reason=\"cancelled\"}"), Some(1.0));
}

#[tokio::test]
async fn stats_arrive_every_250_ms_while_tokens_are_slow() {
    let (s, gate) = gated_engine(4);
    let server = serve(&s, Settings::default()).await;
    let client = reqwest::Client::new();
    let mut a = SseReader::new(generate(&client, &server, "slow", 2).await);
    assert_eq!(a.next().await.unwrap().event, "started");
    let t0 = Instant::now();
    let mut elapsed = Vec::new();
    while elapsed.len() < 4 {
        let e = a.next().await.unwrap();
        assert_eq!(e.event, "stats", "no tokens yet, only ticks");
        let v = e.json();
        assert_eq!(v["tokens"], 0);
        assert!(v["ttft_ms"].is_null());
        elapsed.push(v["elapsed_ms"].as_f64().unwrap());
    }
    let took = t0.elapsed();
    assert!(took >= Duration::from_millis(900) && took < Duration::from_millis(2500), "4 ticks took {took:?}");
    assert!(elapsed.windows(2).all(|w| w[1] > w[0] + 150.0), "{elapsed:?}");
    release(&gate, 2);
    let events = a.collect().await;
    assert_eq!(events.iter().filter(|e| e.event == "token").count(), 2);
    assert_eq!(events.last().unwrap().event, "done");
}

#[tokio::test]
async fn the_request_timeout_ends_the_stream_and_frees_the_engine() {
    let (s, gate) = gated_engine(4);
    let server = serve(&s, Settings { request_timeout: Some(Duration::from_millis(800)), ..Settings::default() }).await;
    let client = reqwest::Client::new();
    let mut a = SseReader::new(generate(&client, &server, "stuck", 5).await);
    assert_eq!(next_non_stats(&mut a).await.0, "started");
    let (name, v) = next_non_stats(&mut a).await;
    assert_eq!((name.as_str(), v["code"].as_str()), ("error", Some("timeout")), "{v}");
    assert!(a.next().await.is_none(), "the error is terminal");
    // The engine sees the cancellation at its next token and takes the next request.
    next_request_runs_after_timeouts(&client, &server, &gate, 1).await;
}

/// After timed-out requests: one gate opening lets the engine see the cancellations,
/// a new request then starts and finishes, and `/metrics` counted `timeouts`.
async fn next_request_runs_after_timeouts(client: &reqwest::Client, server: &Server, gate: &mpsc::Sender<()>, timeouts: usize) {
    release(gate, 1);
    let mut b = SseReader::new(generate(client, server, "next", 1).await);
    expect_started(&mut b).await;
    release(gate, 1);
    assert_eq!(b.collect().await.last().unwrap().event, "done");
    let m = client.get(server.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert_eq!(metric(&m, "peregrine_requests_total{finish_reason=\"timeout\"}"), Some(timeouts as f64));
}

#[tokio::test]
async fn shutdown_fails_queued_requests_and_cancels_the_running_one_after_the_grace() {
    let (s, gate) = gated_engine(4);
    let server = serve(&s, Settings { shutdown_grace: Duration::from_millis(300), ..Settings::default() }).await;
    let client = reqwest::Client::new();
    let mut a = SseReader::new(generate(&client, &server, "running", 50).await);
    assert_eq!(next_non_stats(&mut a).await.0, "started");
    release(&gate, 1);
    assert_eq!(next_non_stats(&mut a).await.0, "token");
    let mut b = SseReader::new(generate(&client, &server, "queued", 5).await);
    assert_eq!(next_non_stats(&mut b).await.0, "queued");
    let stopping = tokio::spawn(server.stop());
    let (name, v) = next_non_stats(&mut b).await;
    assert_eq!((name.as_str(), v["code"].as_str()), ("error", Some("unavailable")), "{v}");
    // After the grace period the running request is cancelled at its next token.
    tokio::time::sleep(Duration::from_millis(500)).await;
    release(&gate, 1);
    let rest = a.collect().await;
    let done = rest.last().unwrap();
    assert_eq!(done.event, "done");
    assert_eq!(done.json()["finish_reason"], "cancelled");
    tokio::time::timeout(Duration::from_secs(10), stopping).await.expect("the server stops").unwrap();
}

#[tokio::test]
async fn waiting_streams_get_keep_alive_comments() {
    let (s, gate) = gated_engine(4);
    let server = serve(&s, Settings { keep_alive: Duration::from_millis(100), ..Settings::default() }).await;
    let client = reqwest::Client::new();
    let mut a = SseReader::new(generate(&client, &server, "running", 1).await);
    assert_eq!(next_non_stats(&mut a).await.0, "started");
    let mut b = SseReader::new(generate(&client, &server, "waiting", 1).await);
    assert_eq!(next_non_stats(&mut b).await.0, "queued");
    tokio::time::sleep(Duration::from_millis(450)).await;
    release(&gate, 2);
    assert_eq!(next_non_stats(&mut b).await.0, "started");
    assert!(b.comments >= 2, "keep-alive comments while queued: {}", b.comments);
    assert_eq!(a.collect().await.last().unwrap().event, "done");
    assert_eq!(b.collect().await.last().unwrap().event, "done");
}

#[tokio::test]
async fn an_openai_stream_that_fails_ends_with_a_data_error_object() {
    let (s, gate) = gated_engine(4);
    let server = serve(&s, Settings { request_timeout: Some(Duration::from_millis(500)), ..Settings::default() }).await;
    let client = reqwest::Client::new();
    let res = client
        .post(server.url("/v1/chat/completions"))
        .json(&json!({ "messages": [{ "role": "user", "content": "Hi" }], "max_tokens": 5, "stream": true }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let events = SseReader::new(res).collect().await;
    let last = events.last().unwrap();
    assert_ne!(last.data, "[DONE]");
    let err = last.json();
    assert_eq!(err["error"]["code"], "timeout", "{err}");
    assert_eq!(err["error"]["type"], "server_error");
    release(&gate, 1);
}

/// The batch of the batched tests.
const BATCH: usize = 4;

/// Starts `n` requests of `max_tokens` that all get a place in the batch. The engine
/// takes a newcomer between steps, and a step waits for the gate: each newcomer after
/// the first joins when the step that holds the engine is let through.
async fn start_batch(client: &reqwest::Client, server: &Server, gate: &mpsc::Sender<()>, n: usize, max_tokens: u32) -> Vec<SseReader> {
    let mut running = Vec::new();
    for i in 0..n {
        let mut r = SseReader::new(generate(client, server, &format!("batch member {i}"), max_tokens).await);
        if i > 0 {
            release(gate, 1);
        }
        expect_started(&mut r).await;
        running.push(r);
    }
    running
}

#[tokio::test]
async fn with_a_batch_of_four_the_fifth_waits_a_full_queue_is_429_and_a_leaving_client_frees_its_place() {
    let (s, gate) = gated_batch_engine(2, BATCH);
    let server = serve(&s, Settings::default()).await;
    let client = reqwest::Client::new();
    let mut running = start_batch(&client, &server, &gate, BATCH, 50).await;
    let mut e = SseReader::new(generate(&client, &server, "fifth", 2).await);
    assert_eq!(next_non_stats(&mut e).await, ("queued".into(), json!({ "type": "queued", "position": 0 })));
    let mut f = SseReader::new(generate(&client, &server, "sixth", 2).await);
    assert_eq!(next_non_stats(&mut f).await, ("queued".into(), json!({ "type": "queued", "position": 1 })));
    assert_eq!(generate(&client, &server, "seventh", 2).await.status(), 429);

    // The second's client leaves: within a step or two (the server notices the closed
    // connection when it writes a token) its place goes to the fifth.
    drop(running.remove(1));
    let ran = s.ran.clone();
    let mut joined = false;
    for _ in 0..10 {
        release(&gate, 1);
        if wait_for(Duration::from_millis(300), || ran.lock().unwrap().len() == BATCH + 1).await {
            joined = true;
            break;
        }
    }
    assert!(joined, "the fifth request joined the batch");
    assert_eq!(next_non_stats(&mut e).await.0, "started");
    assert_eq!(next_non_stats(&mut f).await, ("queued".into(), json!({ "type": "queued", "position": 0 })));
    release(&gate, 60);
    for r in running {
        assert_eq!(r.collect().await.last().unwrap().event, "done");
    }
    assert_eq!(e.collect().await.last().unwrap().event, "done");
    assert_eq!(f.collect().await.last().unwrap().event, "done");
    assert_eq!(s.ran.lock().unwrap().len(), BATCH + 2, "every request but the refused one ran");
    let m = client.get(server.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert_eq!(metric(&m, "peregrine_requests_total{finish_reason=\"cancelled\"}"), Some(1.0));
    assert_eq!(metric(&m, "peregrine_requests_total{finish_reason=\"length\"}"), Some(BATCH as f64 + 1.0));
    assert_eq!(metric(&m, "peregrine_requests_rejected_total{reason=\"queue_full\"}"), Some(1.0));
}

#[tokio::test]
async fn with_a_batch_of_four_the_request_timeout_ends_every_stuck_stream_and_frees_the_engine() {
    let (s, gate) = gated_batch_engine(4, BATCH);
    let server = serve(&s, Settings { request_timeout: Some(Duration::from_millis(800)), ..Settings::default() }).await;
    let client = reqwest::Client::new();
    let mut running = start_batch(&client, &server, &gate, BATCH, 8).await;
    let m = client.get(server.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert_eq!(metric(&m, "peregrine_requests_running"), Some(BATCH as f64));
    for r in &mut running {
        loop {
            let (name, v) = next_non_stats(r).await;
            if name != "token" {
                assert_eq!((name.as_str(), v["code"].as_str()), ("error", Some("timeout")), "{v}");
                break;
            }
        }
    }
    // The engine sees the cancellations after its next step and takes the next request.
    next_request_runs_after_timeouts(&client, &server, &gate, BATCH).await;
}

/// TTFT and latency count from arrival, so a request that waited its turn shows the
/// wait in both; the wait itself is the queue time; token histograms count each request.
#[tokio::test]
async fn ttft_counts_the_queue_wait_and_token_histograms_count_requests() {
    let (s, gate) = gated_engine(4);
    let server = serve(&s, Settings::default()).await;
    let client = reqwest::Client::new();
    let mut a = SseReader::new(generate(&client, &server, "first", 2).await);
    assert_eq!(next_non_stats(&mut a).await.0, "started");
    release(&gate, 2);
    assert_eq!(a.collect().await.last().unwrap().event, "done");
    // The second waits 400 ms behind a third that holds the engine.
    let mut holder = SseReader::new(generate(&client, &server, "holder", 1).await);
    assert_eq!(next_non_stats(&mut holder).await.0, "started");
    let mut waiter = SseReader::new(generate(&client, &server, "waiter", 1).await);
    assert_eq!(next_non_stats(&mut waiter).await.0, "queued");
    tokio::time::sleep(Duration::from_millis(400)).await;
    release(&gate, 2);
    assert_eq!(holder.collect().await.last().unwrap().event, "done");
    assert_eq!(waiter.collect().await.last().unwrap().event, "done");
    let m = client.get(server.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let fast = |name: &str| metric(&m, &format!("{name}_bucket{{le=\"0.25\"}}")).unwrap();
    // The first was quick; the holder waited for the gate and the waiter for the holder.
    assert_eq!(metric(&m, "peregrine_time_to_first_token_seconds_count"), Some(3.0));
    assert_eq!(fast("peregrine_time_to_first_token_seconds"), 1.0, "{m}");
    assert_eq!(fast("peregrine_e2e_request_latency_seconds"), 1.0);
    assert_eq!(fast("peregrine_request_queue_time_seconds"), 2.0, "only the waiter queued long");
    assert_eq!(metric(&m, "peregrine_request_generation_tokens_sum"), Some(4.0));
    assert_eq!(metric(&m, "peregrine_request_generation_tokens_count"), Some(3.0));
    assert_eq!(metric(&m, "peregrine_request_prompt_tokens_count"), Some(3.0));
}
