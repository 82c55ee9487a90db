//! Two real `peregrine serve` replicas on the default model sharing one PostgreSQL
//! share store, behind nginx with `deploy/nginx.conf`: a share made on one opens on
//! the other and through the balancer, each replica's /metrics counts its own
//! requests, a generation streams through nginx token by token, and with one replica
//! killed the balancer keeps answering.

mod common;

use std::time::{Duration, Instant};

use common::nginx::Nginx;
use common::postgres::Postgres;
use common::served::Served;
use common::SseReader;
use peregrine_api::playground::{Share, ShareCreated};
use serde_json::{json, Value};

/// Finished requests a replica counted, over every finish reason.
async fn finished(client: &reqwest::Client, base: &str) -> f64 {
    let text = client.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
    text.lines()
        .filter(|l| l.starts_with("peregrine_requests_total{"))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .sum()
}

async fn complete(client: &reqwest::Client, base: &str) -> reqwest::Response {
    client
        .post(format!("{base}/v1/completions"))
        .json(&json!({ "prompt": "def add(a, b):", "max_tokens": 2, "temperature": 0 }))
        .send()
        .await
        .unwrap()
}

async fn create_share(client: &reqwest::Client, base: &str, prompt: &str) -> ShareCreated {
    let res = client.post(format!("{base}/api/shares")).json(&json!({ "prompt": prompt, "mode": "complete" })).send().await.unwrap();
    assert_eq!(res.status(), 201, "{base}: {}", res.text().await.unwrap());
    res.json().await.unwrap()
}

async fn open_share(client: &reqwest::Client, base: &str, id: &str) -> Share {
    let res = client.get(format!("{base}/api/shares/{id}")).send().await.unwrap();
    assert_eq!(res.status(), 200, "{base}: {}", res.text().await.unwrap());
    res.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_behind_nginx_share_one_postgres_store() {
    let started = Instant::now();
    let Some(pg) = Postgres::start().await else { return };
    let store = pg.database("replicas").await;
    let flags = ["--share-store", store.as_str()];
    let (mut a, b) = tokio::join!(Served::start(1024, &flags), Served::start(1024, &flags));
    let Some(lb) = Nginx::start(a.addr(), b.addr()).await else { return };
    let up = started.elapsed();
    let client = reqwest::Client::new();

    // One store: made on A, it opens on B and through the balancer.
    let made = create_share(&client, &a.base, "def fib(n):").await;
    assert_eq!(open_share(&client, &b.base, &made.id).await.share.prompt, "def fib(n):");
    assert_eq!(open_share(&client, &lb.base, &made.id).await.id, made.id);
    let other = create_share(&client, &lb.base, "through the balancer").await;
    assert_eq!(open_share(&client, &a.base, &other.id).await.share.prompt, "through the balancer");

    // Each replica counts its own requests: one on A, two on B.
    assert_eq!(complete(&client, &a.base).await.status(), 200);
    for _ in 0..2 {
        assert_eq!(complete(&client, &b.base).await.status(), 200);
    }
    assert_eq!((finished(&client, &a.base).await, finished(&client, &b.base).await), (1.0, 2.0));

    // Streamed through nginx: the first token arrives while the generation still runs.
    let res = client
        .post(lb.url("/api/generate"))
        .json(&json!({ "prompt": "def fib(n):", "max_tokens": 48, "ignore_eos": true, "temperature": 0 }))
        .send()
        .await
        .unwrap();
    let sent = Instant::now();
    let mut events = SseReader::new(res);
    let (mut first_token, mut tokens) = (None, 0);
    let done = loop {
        let e = events.next().await.expect("the stream ends with done");
        match e.event.as_str() {
            "token" => {
                first_token.get_or_insert(sent.elapsed());
                tokens += 1;
            }
            "done" => break sent.elapsed(),
            "error" => panic!("the stream failed: {}", e.data),
            _ => {}
        }
    };
    let first_token = first_token.expect("tokens were streamed");
    println!("through nginx: first token {first_token:.2?}, done {done:.2?}, {tokens} token events");
    assert!(tokens >= 10, "{tokens} token events");
    assert!(done - first_token > Duration::from_millis(100), "tokens came in one piece at the end: unbuffered SSE expected");
    let through = finished(&client, &a.base).await + finished(&client, &b.base).await;
    assert_eq!(through, 4.0, "the streamed run counted once, on the replica that ran it");

    // Kill A mid-run: requests through the balancer keep succeeding (a refused
    // connection is retried on B; afterwards A is skipped for fail_timeout).
    let mut served = 0;
    for i in 0..12 {
        if i == 4 {
            a.kill();
        }
        let res = client.get(lb.url(&format!("/api/shares/{}", made.id))).send().await.unwrap();
        assert_eq!(res.status(), 200, "request {i}: {}", lb.log());
        let created = create_share(&client, &lb.base, &format!("after {i}")).await;
        assert_eq!(open_share(&client, &b.base, &created.id).await.share.prompt, format!("after {i}"));
        served += 2;
    }
    let res = complete(&client, &lb.base).await;
    assert_eq!(res.status(), 200);
    let answer: Value = res.json().await.unwrap();
    assert!(answer["choices"][0]["text"].is_string(), "{answer}");
    assert!(finished(&client, &b.base).await >= 3.0);
    println!("{served} requests through nginx, replica A killed after 8; up in {up:.2?}, whole test {:.2?}", started.elapsed());
}
