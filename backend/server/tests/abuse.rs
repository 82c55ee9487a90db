//! The red-team run against the real `peregrine serve` binary on the default model
//! (CPU, loopback, a 1024-descriptor limit as a default shell gives), repeated with the
//! same counts: slow, silent, idle and short-body sockets; a 1,100-socket flood; eight
//! concurrent tokenize requests at the size limit; one client flooding the queue; an
//! abandoned echo-scoring request; foreign Content-Type and Host. Each check prints what
//! it measured (`cargo test --test abuse -- --nocapture`) and asserts the defence held.
//! Every loop is bounded in count and time; the checks take turns (one server at a time).

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use common::served::Served;
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

/// Longest any socket check waits for the server to act.
const PATIENCE: Duration = Duration::from_secs(20);

/// One check's server at a time: memory and timing figures are the check's own.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Reads until the server closes the connection (or PATIENCE after `since` passes).
async fn until_closed(s: &mut (impl AsyncRead + Unpin), since: Instant) -> (String, Option<Duration>) {
    common::read_until_closed(s, since, PATIENCE).await
}

/// A client whose connections come from `127.0.0.N` (loopback answers on all of 127/8),
/// so the server sees N as a separate client.
fn client_from(n: u8) -> reqwest::Client {
    reqwest::Client::builder().local_address(IpAddr::V4(Ipv4Addr::new(127, 0, 0, n))).build().expect("client")
}

/// A short greedy completion; its status and how long it took.
async fn short_completion(client: &reqwest::Client, server: &Served) -> (u16, Duration) {
    let started = Instant::now();
    let res = client
        .post(server.url("/v1/completions"))
        .json(&json!({ "prompt": "def add(a, b):", "max_tokens": 8, "temperature": 0 }))
        .send()
        .await
        .expect("completion request");
    let status = res.status().as_u16();
    let _ = res.bytes().await;
    (status, started.elapsed())
}

/// Lets this process open the flood's sockets whatever the shell's soft limit.
fn raise_descriptor_limit(want: u64) {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0, "getrlimit");
        if lim.rlim_cur < want {
            lim.rlim_cur = want.min(lim.rlim_max);
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0, "setrlimit");
        }
    }
    assert!(lim.rlim_cur >= want, "this test needs {want} open files; the hard limit is {}", lim.rlim_max);
}

fn seconds(d: Option<Duration>) -> String {
    d.map_or("never".into(), |d| format!("{:.2} s", d.as_secs_f64()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_silent_idle_and_short_sockets_close_at_their_deadlines_while_others_are_served() {
    let _turn = ONE_AT_A_TIME.lock().await;
    // Before: 6/6 slow-header and silent sockets open after 60 s, 500/500 idle keep-alives
    // after 35 s, a short body waited forever. Room for all 513 under the cap here.
    let deadline = Duration::from_secs(2);
    let server = Served::start(1024, &["--header-timeout", "2", "--body-timeout", "2", "--max-connections", "900"]).await;
    let addr = server.addr().to_string();
    let mut sockets = JoinSet::new();
    for kind in
        std::iter::repeat_n("silent", 6).chain(std::iter::repeat_n("slow headers", 6)).chain(std::iter::repeat_n("idle keep-alive", 500))
    {
        // Connected one after another, the silent ones first: in a burst a full accept
        // queue makes the kernel answer with SYN cookies and drop the handshake's last ACK,
        // and a socket that then never sends a byte is one the server never saw.
        let s = TcpStream::connect(&addr).await.expect("connect");
        let since = Instant::now();
        sockets.spawn(async move {
            let (mut read, mut write) = s.into_split();
            match kind {
                // Slowloris: a header line every 300 ms, never the blank line.
                "slow headers" => {
                    write.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n").await.unwrap();
                    tokio::spawn(async move {
                        for _ in 0..60 {
                            tokio::time::sleep(Duration::from_millis(300)).await;
                            if write.write_all(b"X-Trickle: 1\r\n").await.is_err() {
                                break;
                            }
                        }
                    });
                }
                "silent" => drop(tokio::spawn(async move {
                    tokio::time::sleep(PATIENCE).await;
                    drop(write)
                })),
                _ => {
                    write.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n").await.unwrap();
                    drop(tokio::spawn(async move {
                        tokio::time::sleep(PATIENCE).await;
                        drop(write)
                    }));
                }
            }
            let (answer, closed) = until_closed(&mut read, since).await;
            (kind, answer, closed)
        });
    }
    // A body shorter than its Content-Length.
    let mut short = TcpStream::connect(&addr).await.unwrap();
    let head = "POST /api/shares HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"prompt\":";
    short.write_all(head.as_bytes()).await.unwrap();
    let short_sent = Instant::now();
    // Meanwhile another client is served.
    let (status, took) = short_completion(&client_from(2), &server).await;
    assert_eq!(status, 200, "a completion while the sockets hang");
    let (answer, short_closed) = until_closed(&mut short, short_sent).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "short body: {answer}");

    let mut worst: std::collections::BTreeMap<&str, (usize, usize, Duration)> = Default::default();
    while let Some(done) = sockets.join_next().await {
        let (kind, answer, closed) = done.expect("socket task");
        if kind == "idle keep-alive" {
            assert!(answer.starts_with("HTTP/1.1 200"), "keep-alive answer: {answer}");
        }
        let entry = worst.entry(kind).or_insert((0, 0, Duration::ZERO));
        entry.1 += 1;
        if let Some(t) = closed {
            entry.0 += 1;
            entry.2 = entry.2.max(t);
        }
    }
    for (kind, (closed, all, latest)) in &worst {
        println!("{kind}: {closed}/{all} closed, the last after {:.2} s (deadline {} s)", latest.as_secs_f64(), deadline.as_secs());
        assert_eq!(closed, all, "{kind}: every socket closed");
        assert!(*latest < deadline * 2 + Duration::from_secs(1), "{kind}: closed after {latest:?}");
    }
    println!("short body: 408 after {}; a completion meanwhile: {:.2} s", seconds(short_closed), took.as_secs_f64());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_1100_idle_sockets_leaves_health_and_completions_answering() {
    let _turn = ONE_AT_A_TIME.lock().await;
    // Before: "Too many open files"; fresh /health and completions unanswered until the
    // flood closed. Default cap (512) and deadlines; the server has 1024 descriptors.
    raise_descriptor_limit(1400);
    let mut server = Served::start(1024, &[]).await;
    let mut flood = Vec::new();
    for _ in 0..1100 {
        match TcpStream::connect(server.addr()).await {
            Ok(s) => flood.push(s),
            Err(e) => panic!("connect {} of the flood: {e}", flood.len() + 1),
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let health = reqwest::get(server.url("/health")).await.expect("/health during the flood");
    let health_took = started.elapsed();
    assert_eq!(health.status(), 200);
    let (status, took) = short_completion(&client_from(2), &server).await;
    assert_eq!(status, 200, "a completion during the flood");
    let mut closed = 0;
    let mut buf = [0u8; 1];
    for s in &flood {
        if matches!(s.try_read(&mut buf), Ok(0)) {
            closed += 1;
        }
    }
    println!(
        "1,100 idle sockets: /health in {:.0} ms, a completion in {:.2} s; {closed} flood sockets closed to make room",
        health_took.as_secs_f64() * 1e3,
        took.as_secs_f64()
    );
    assert!(health_took < Duration::from_secs(3), "/health took {health_took:?}");
    assert!(server.running(), "the server is still up");
}

/// About `bytes` of source-like text with many distinct tokens.
fn code_text(bytes: usize) -> String {
    let mut s = String::with_capacity(bytes + 64);
    let mut i = 0u64;
    while s.len() < bytes {
        s.push_str(&format!("fn item_{i}(x: u32) -> u32 {{ x * {} + {} }} // note {}\n", i % 97, i * 7919 % 10007, i ^ 0x5a5a));
        i += 1;
    }
    s.truncate(bytes);
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_tokenize_requests_at_the_size_limit_keep_memory_bounded() {
    let _turn = ONE_AT_A_TIME.lock().await;
    // Before: 8 concurrent 1 MiB with_pieces requests took RSS to 4.38 GB (1.09 GB after)
    // and a concurrent completion from 0.51 to 6.82 s. Now 1 MiB is refused, and 8 at
    // the 256 KiB limit run two at a time.
    let server = Served::start(1024, &[]).await;
    let client = client_from(1);
    let (_, alone) = short_completion(&client_from(2), &server).await;
    let rss_before = server.memory_mib("VmRSS");
    let big = json!({ "content": code_text(1 << 20), "with_pieces": true });
    let res = client.post(server.url("/tokenize")).json(&big).send().await.unwrap();
    assert_eq!(res.status(), 413, "1 MiB of content");
    let limit = json!({ "content": code_text(peregrine_server::config::DEFAULT_MAX_TOKENIZE_BYTES), "with_pieces": true });
    let started = Instant::now();
    let mut burst = JoinSet::new();
    for _ in 0..8 {
        let (client, url, body) = (client.clone(), server.url("/tokenize"), limit.clone());
        burst.spawn(async move {
            let res = client.post(url).json(&body).send().await.unwrap();
            let status = res.status().as_u16();
            let tokens = res.json::<Value>().await.ok().and_then(|v| v["tokens"].as_array().map(Vec::len)).unwrap_or(0);
            (status, tokens)
        });
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (status, during) = short_completion(&client_from(2), &server).await;
    assert_eq!(status, 200);
    let mut tokens = 0;
    while let Some(done) = burst.join_next().await {
        let (status, n) = done.unwrap();
        assert_eq!(status, 200, "a tokenize request at the limit");
        tokens = n;
    }
    let burst_took = started.elapsed();
    let peak = server.memory_mib("VmHWM");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = server.memory_mib("VmRSS");
    println!(
        "8 × 256 KiB with_pieces ({tokens} tokens each) in {:.2} s: RSS {rss_before:.0} MiB before, peak {peak:.0} MiB, {after:.0} MiB after; \
         a completion {:.2} s alone, {:.2} s during the burst",
        burst_took.as_secs_f64(),
        alone.as_secs_f64(),
        during.as_secs_f64()
    );
    assert!(peak - rss_before < TOKENIZE_PEAK_GROWTH_MIB, "peak grew by {:.0} MiB", peak - rss_before);
}

/// Bound on the memory the burst may add at its peak.
const TOKENIZE_PEAK_GROWTH_MIB: f64 = 768.0;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_flooding_the_queue_leaves_two_others_served_first() {
    let _turn = ONE_AT_A_TIME.lock().await;
    // Before: no per-client limit by default and chat max_tokens the whole context: 17
    // requests of one client held engine and queue for minutes, everyone else got 429.
    // Now 8 in flight per client (default), and a chat request without max_tokens gets
    // --default-max-tokens (small here, so the check is short).
    let server = Served::start(1024, &["--default-max-tokens", "48"]).await;
    let chat = json!({ "messages": [{ "role": "user", "content": "Count from 1 to 200, one number per line." }], "temperature": 0 });
    let started = Instant::now();
    let mut all = JoinSet::new();
    let send = |all: &mut JoinSet<_>, who: &'static str, client: reqwest::Client| {
        let (url, body) = (server.url("/v1/chat/completions"), chat.clone());
        all.spawn(async move {
            let res = client.post(url).json(&body).send().await.unwrap();
            let status = res.status().as_u16();
            let _ = res.bytes().await;
            (who, status, started.elapsed())
        });
    };
    let flooder = client_from(1);
    for _ in 0..17 {
        send(&mut all, "flooder", flooder.clone());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    send(&mut all, "second", client_from(2));
    send(&mut all, "third", client_from(3));
    let mut flooder_done = Vec::new();
    let mut others = Vec::new();
    let mut refused = 0;
    while let Some(done) = tokio::time::timeout(Duration::from_secs(300), all.join_next()).await.expect("the requests end") {
        let (who, status, at) = done.unwrap();
        match (who, status) {
            ("flooder", 200) => flooder_done.push(at),
            ("flooder", 429) => refused += 1,
            (_, 200) => others.push((who, at)),
            other => panic!("unexpected answer {other:?}"),
        }
    }
    let last_flooder = flooder_done.iter().copied().max().expect("some of the flood ran");
    println!(
        "flooder: {} served, {refused} × 429, the last done at {:.2} s; {}",
        flooder_done.len(),
        last_flooder.as_secs_f64(),
        others.iter().map(|(w, at)| format!("{w} client done at {:.2} s", at.as_secs_f64())).collect::<Vec<_>>().join(", ")
    );
    assert_eq!(flooder_done.len(), peregrine_server::config::DEFAULT_MAX_PER_CLIENT, "the flooder's in-flight limit");
    assert_eq!(others.len(), 2, "both other clients are served");
    for (who, at) in others {
        assert!(at < last_flooder, "the {who} client waits behind the flood ({at:?} vs {last_flooder:?})");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_scoring_request_frees_the_engine_within_a_chunk() {
    let _turn = ONE_AT_A_TIME.lock().await;
    // Before: a 3,600-token echo-scoring request abandoned after 1 s held the engine ~53 s.
    let server = Served::start(1024, &["--max-batch", "1"]).await;
    let client = client_from(1);
    let mut prompt = String::new();
    let mut n = 0;
    while n < 3600 {
        prompt.push_str(&code_text(4096));
        let res: Value =
            client.post(server.url("/tokenize")).json(&json!({ "content": prompt })).send().await.unwrap().json().await.unwrap();
        n = res["tokens"].as_array().expect("tokens").len();
    }
    let scoring = json!({ "prompt": prompt, "max_tokens": 0, "echo": true, "logprobs": 1 });
    let abandoned = tokio::time::timeout(Duration::from_secs(1), client.post(server.url("/v1/completions")).json(&scoring).send()).await;
    assert!(abandoned.is_err(), "scoring {n} tokens takes longer than a second");
    let since = Instant::now();
    let (status, took) = short_completion(&client_from(2), &server).await;
    assert_eq!(status, 200);
    println!("{n}-token scoring abandoned after 1 s: the next request done {:.2} s later", since.elapsed().as_secs_f64());
    assert!(took < Duration::from_secs(20), "the engine was held {took:?} after the abandon");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_content_types_and_hosts_are_refused_and_ours_served() {
    let _turn = ONE_AT_A_TIME.lock().await;
    // Before: a text/plain POST from a foreign page created a share and ran a generation,
    // and any Host was answered (DNS rebinding).
    let server = Served::start(1024, &[]).await;
    let client = reqwest::Client::new();
    let share = json!({ "prompt": "x", "mode": "complete" }).to_string();
    for kind in ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"] {
        let res = client
            .post(server.url("/api/shares"))
            .header("content-type", kind)
            .header("origin", "http://evil.example")
            .body(share.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 415, "{kind}");
        let res = client.post(server.url("/api/generate")).header("content-type", kind).body(r#"{"prompt":"x"}"#).send().await.unwrap();
        assert_eq!(res.status(), 415, "{kind} on /api/generate");
    }
    let mut raw = TcpStream::connect(server.addr()).await.unwrap();
    raw.write_all(b"GET /api/info HTTP/1.1\r\nHost: evil.example:8080\r\nConnection: close\r\n\r\n").await.unwrap();
    let (answer, _) = until_closed(&mut raw, Instant::now()).await;
    assert!(answer.starts_with("HTTP/1.1 421"), "a rebinding Host: {answer}");
    // Our own page's way of calling: JSON on the server's own host.
    let res = client.post(server.url("/api/shares")).json(&json!({ "prompt": "def f():", "mode": "complete" })).send().await.unwrap();
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
    println!("text/plain, form and multipart POSTs: 415; Host evil.example: 421; a JSON share from our host: 201");
}
