//! Bounded load on loopback: 64 concurrent streaming clients, ~30 % of them leaving
//! mid-stream at random, 1,000 requests in all against a scripted engine (2 ms per
//! step, the real tokenizer), one request at a time and with a batch of four. Every request completes, is refused with 429 or is
//! cancelled by its client; none hangs; the first wave fills the queue and those
//! requests complete; RSS after the last request stays within 1.2× of RSS after the
//! first 100.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{dist_with_index, metric, scripted_batch_engine, start, Pace, SseReader};
use peregrine_server::app::AppState;
use serde_json::json;

/// Concurrent clients.
const CLIENTS: usize = 64;
/// Requests in all.
const TOTAL: usize = 1000;
/// The engine's queue length.
const MAX_QUEUE: usize = 8;
/// No request may take longer than this (a hang).
const REQUEST_LIMIT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Completed,
    Rejected,
    Cancelled,
}

/// Resident set size of this process (server and clients), in bytes.
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    statm.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 4096
}

/// A cheap deterministic pseudo-random number per request index.
fn rand(i: usize, salt: u64) -> u64 {
    let mut z = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z ^ (z >> 31)
}

async fn one_request(client: &reqwest::Client, url: &str, i: usize) -> Outcome {
    // The first wave stays to the end; later clients leave mid-stream 30 % of the time.
    let leave_after = (i >= CLIENTS && rand(i, 1) % 100 < 30).then(|| 1 + (rand(i, 2) % 6) as usize);
    let res = client.post(url).json(&json!({ "prompt": format!("load test {i}"), "max_tokens": 8 })).send().await.expect("request sent");
    if res.status() == 429 {
        assert!(res.headers().contains_key("retry-after"));
        return Outcome::Rejected;
    }
    assert_eq!(res.status(), 200, "request {i}");
    let mut events = SseReader::new(res);
    let mut seen = 0;
    while let Some(e) = events.next().await {
        seen += 1;
        match e.event.as_str() {
            "done" => return Outcome::Completed,
            "error" => panic!("request {i} failed: {}", e.data),
            _ => {}
        }
        if leave_after == Some(seen) {
            return Outcome::Cancelled; // dropping the reader closes the connection
        }
    }
    panic!("request {i}: the stream ended without a terminal event");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_clients_a_thousand_requests_none_hang_memory_flat() {
    load(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_load_with_a_batch_of_four() {
    load(4).await;
}

async fn load(batch: usize) {
    let s = scripted_batch_engine(Pace::Every(Duration::from_millis(2)), MAX_QUEUE, batch);
    let server = start(AppState::new(dist_with_index()).with_engine(s.engine.clone(), "scripted")).await;
    let url = server.url("/api/generate");
    let client = reqwest::Client::new();
    let next = Arc::new(AtomicUsize::new(0));
    let finished = Arc::new(AtomicUsize::new(0));
    let rss_100 = Arc::new(Mutex::new(None::<u64>));
    let outcomes = Arc::new(Mutex::new(vec![None; TOTAL]));
    let t0 = Instant::now();
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (client, url, next, finished, rss_100, outcomes) =
                (client.clone(), url.clone(), next.clone(), finished.clone(), rss_100.clone(), outcomes.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= TOTAL {
                        return;
                    }
                    let outcome = tokio::time::timeout(REQUEST_LIMIT, one_request(&client, &url, i))
                        .await
                        .unwrap_or_else(|_| panic!("request {i} hung"));
                    outcomes.lock().unwrap()[i] = Some(outcome);
                    if finished.fetch_add(1, Ordering::Relaxed) + 1 == 100 {
                        *rss_100.lock().unwrap() = Some(rss_bytes());
                    }
                    if outcome == Outcome::Rejected {
                        // Back off a little, as a client honouring Retry-After would (scaled down).
                        tokio::time::sleep(Duration::from_millis(50 + rand(i, 3) % 200)).await;
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("a client task panicked");
    }
    let elapsed = t0.elapsed();
    let rss_end = rss_bytes();
    let outcomes: Vec<Outcome> = outcomes.lock().unwrap().iter().map(|o| o.expect("every request has an outcome")).collect();
    let count = |o: Outcome| outcomes.iter().filter(|&&x| x == o).count();
    let (completed, rejected, cancelled) = (count(Outcome::Completed), count(Outcome::Rejected), count(Outcome::Cancelled));
    let first_wave_completed = outcomes[..CLIENTS].iter().filter(|&&o| o == Outcome::Completed).count();
    let rss_100 = rss_100.lock().unwrap().expect("RSS after 100");
    let metrics = reqwest::get(server.url("/metrics")).await.unwrap().text().await.unwrap();
    eprintln!(
        "load, batch {batch}: {TOTAL} requests from {CLIENTS} clients in {:.1} s: {completed} completed, {rejected} rejected (429), {cancelled} cancelled by the client; first wave completed {first_wave_completed}; RSS after 100 = {:.1} MiB, after {TOTAL} = {:.1} MiB ({:.3}×)",
        elapsed.as_secs_f64(),
        rss_100 as f64 / 1048576.0,
        rss_end as f64 / 1048576.0,
        rss_end as f64 / rss_100 as f64
    );
    assert_eq!(completed + rejected + cancelled, TOTAL);
    // The burst fills the queue before the engine takes more than one of it (it takes
    // newcomers between steps): at least max-queue + 1 complete, whatever the batch.
    assert!(first_wave_completed > MAX_QUEUE, "at least max-queue + 1 of the first wave complete ({first_wave_completed})");
    assert!(cancelled > 0 && rejected > 0);
    assert!(rss_end as f64 <= 1.2 * rss_100 as f64, "RSS grew from {rss_100} to {rss_end}");
    // Nothing is left running or waiting, and the server counted every outcome.
    let engine = s.engine.clone();
    assert!(common::wait_for(Duration::from_secs(5), || !engine.busy() && engine.queue_len() == 0).await);
    let m = |name: &str| metric(&metrics, name).unwrap_or(0.0) as usize;
    assert_eq!(m("peregrine_requests_rejected_total{reason=\"queue_full\"}"), rejected);
    // A client that leaves as its last tokens are sent may still have been served to
    // the end: the server counts it complete, the client cancelled. Every request that
    // was not refused ends one of the two ways on both sides.
    let (served, dropped) =
        (m("peregrine_requests_total{finish_reason=\"length\"}"), m("peregrine_requests_total{finish_reason=\"cancelled\"}"));
    assert!(served >= completed, "the server counted {served} complete, the clients {completed}");
    assert_eq!(served + dropped, completed + cancelled, "requests ended: server {served} + {dropped}, clients {completed} + {cancelled}");
    server.stop().await;
}
