//! The accept loop under abuse, on a real port with short limits: a client that sends
//! its headers slowly, an idle keep-alive connection and a body shorter than its
//! Content-Length are cut off at their deadlines; at the connection cap an arrival
//! evicts the longest-idle connection, and when all are busy the spare connections
//! answer /health and refuse the rest.
//! Every wait is bounded.

mod common;

use std::time::{Duration, Instant};

use common::{dist_with_index, start};
use peregrine_server::app::AppState;
use peregrine_server::config::{ConnectionLimits, Settings};
use peregrine_server::share_store::ShareStore;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const DEADLINE: Duration = Duration::from_millis(400);
/// Longest any check waits for the server to act.
const PATIENCE: Duration = Duration::from_secs(5);

fn limits(max_connections: usize) -> Settings {
    Settings { connections: ConnectionLimits { header_timeout: DEADLINE, body_timeout: DEADLINE, max_connections }, ..Settings::default() }
}

async fn connect(base: &str) -> TcpStream {
    TcpStream::connect(base.trim_start_matches("http://")).await.expect("connect")
}

/// Reads until the server closes the connection (or PATIENCE passes).
async fn until_closed(s: &mut TcpStream) -> (String, Option<Duration>) {
    common::read_until_closed(s, Instant::now(), PATIENCE).await
}

/// One request on a fresh connection; the whole answer (the request asks to close).
async fn request(base: &str, path: &str) -> String {
    let mut s = connect(base).await;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes()).await.unwrap();
    until_closed(&mut s).await.0
}

#[tokio::test]
async fn slow_headers_idle_connections_and_short_bodies_are_cut_off() {
    let server = start(AppState::new(dist_with_index()).with_settings(limits(64))).await;
    // Slow headers: half a request line and one header, then silence.
    let mut slow = connect(&server.base).await;
    slow.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n").await.unwrap();
    let (_, closed) = until_closed(&mut slow).await;
    assert!(closed.is_some_and(|t| t < DEADLINE * 4), "slow headers closed after {closed:?}");
    // A silent socket: closed too.
    let mut silent = connect(&server.base).await;
    let (_, closed) = until_closed(&mut silent).await;
    assert!(closed.is_some_and(|t| t < DEADLINE * 4), "silent socket closed after {closed:?}");
    // Keep-alive: one answered request, then idle until the deadline closes it.
    let mut idle = connect(&server.base).await;
    idle.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n").await.unwrap();
    let (answer, closed) = until_closed(&mut idle).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(closed.is_some_and(|t| t < DEADLINE * 4), "idle keep-alive closed after {closed:?}");
    server.stop().await;

    // A body shorter than its Content-Length: 408 at the body deadline.
    let data = common::temp_dir("short-body");
    let state = AppState::new(dist_with_index()).with_shares(ShareStore::open(&data).unwrap()).with_settings(limits(64));
    let server = start(state).await;
    let mut short = connect(&server.base).await;
    let head = "POST /api/shares HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n";
    short.write_all(format!("{head}{{\"prompt\":").as_bytes()).await.unwrap();
    let sent = Instant::now();
    let (answer, _) = until_closed(&mut short).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("request_timeout"), "{answer}");
    assert!(sent.elapsed() < DEADLINE * 4, "408 after {:?}", sent.elapsed());
    server.stop().await;
}

#[tokio::test]
async fn at_the_cap_an_arrival_evicts_the_longest_idle_and_busy_caps_leave_health_answering() {
    let data = common::temp_dir("cap");
    let server = start(AppState::new(dist_with_index()).with_shares(ShareStore::open(&data).unwrap()).with_settings(Settings {
        // Long deadlines here: the held connections must stay open for the check.
        connections: ConnectionLimits { header_timeout: PATIENCE * 6, body_timeout: PATIENCE * 6, max_connections: 2 },
        ..Settings::default()
    }))
    .await;
    // Two idle sockets fill the cap; a third arrival closes the older and is served.
    let mut older = connect(&server.base).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let newer = connect(&server.base).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let page = request(&server.base, "/").await;
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    let (_, closed) = until_closed(&mut older).await;
    assert!(closed.is_some_and(|t| t < Duration::from_secs(1)), "the longest-idle socket closed after {closed:?}");

    // Two busy connections (bodies still arriving) fill the cap: nothing to evict, so
    // spares answer /health and refuse the rest with a clear 503.
    drop(newer);
    let mut busy = Vec::new();
    for _ in 0..2 {
        let mut s = connect(&server.base).await;
        let head = "POST /api/shares HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{";
        s.write_all(head.as_bytes()).await.unwrap();
        busy.push(s);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let health = request(&server.base, "/health").await;
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    let other = request(&server.base, "/").await;
    assert!(other.starts_with("HTTP/1.1 503") && other.contains("open connections"), "{other}");
    // Once the busy ones close, the cap frees.
    busy.clear();
    let mut ok = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if request(&server.base, "/").await.starts_with("HTTP/1.1 200") {
            ok = true;
            break;
        }
    }
    assert!(ok, "the cap frees once the busy connections close");
    server.stop().await;
}
