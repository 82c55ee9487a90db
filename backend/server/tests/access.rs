//! Who may call the real binary, and what it writes down: API keys on every API
//! route (401 in each API's shape, the page and /health public), keys from a file and
//! the environment, `--metrics-public`; `X-Request-Id` kept or made, returned and in
//! the JSON log lines; the client named by `X-Forwarded-For` only behind a trusted
//! proxy; `RUST_LOG` filtering; bad flags refused before the port is taken.

mod common;

use std::time::Duration;

use common::served::Served;
use serde_json::{json, Value};

const KEY: &str = "first-key-0001";
const FILE_KEY: &str = "second-key-0002";

/// Every route that wants a key: method, path, a body it accepts.
fn guarded_routes() -> Vec<(&'static str, &'static str, Option<Value>)> {
    vec![
        ("GET", "/v1/models", None),
        ("POST", "/v1/completions", Some(json!({"prompt": "def f():", "max_tokens": 1}))),
        ("POST", "/v1/chat/completions", Some(json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}))),
        ("GET", "/api/info", None),
        ("POST", "/api/generate", Some(json!({"prompt": "def f():", "max_tokens": 1}))),
        ("GET", "/api/shares/AAAAAAAAAAAA", None),
        ("POST", "/api/shares", Some(json!({"prompt": "x"}))),
        ("POST", "/infill", Some(json!({"input_prefix": "a", "input_suffix": "b"}))),
        ("POST", "/tokenize", Some(json!({"content": "hello"}))),
        ("POST", "/detokenize", Some(json!({"tokens": [1, 2]}))),
        ("GET", "/metrics", None),
        ("POST", "/completion", Some(json!({"prompt": "def f():", "n_predict": 1}))),
        ("GET", "/models", None),
        ("POST", "/chat/completions", Some(json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}))),
        ("POST", "/v1/responses", Some(json!({"input": "hi", "max_output_tokens": 1}))),
        ("POST", "/v1/messages", Some(json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}))),
    ]
}

async fn call(server: &Served, method: &str, path: &str, body: &Option<Value>, auth: Option<&str>) -> reqwest::Response {
    let client = reqwest::Client::new();
    let mut req = if method == "GET" { client.get(server.url(path)) } else { client.post(server.url(path)) };
    if let Some(b) = body {
        req = req.json(b);
    }
    if let Some(a) = auth {
        req = req.header("authorization", a);
    }
    req.send().await.expect("request")
}

/// A 401 in the route's error shape with the challenge.
async fn expect_401(r: reqwest::Response, path: &str, invalid_token: bool) {
    assert_eq!(r.status(), 401, "{path}");
    let challenge = r.headers()["www-authenticate"].to_str().unwrap().to_string();
    assert!(challenge.starts_with("Bearer realm=\"peregrine\""), "{path}: {challenge}");
    assert_eq!(challenge.contains("invalid_token"), invalid_token, "{path}: {challenge}");
    let body: Value = r.json().await.expect("JSON 401");
    if path == "/v1/messages" {
        assert_eq!(body["error"]["type"], "authentication_error", "{path}: {body}");
        return;
    }
    let openai = ["/v1", "/completion", "/models", "/chat", "/infill"].iter().any(|p| path.starts_with(p));
    let code = if openai { &body["error"]["code"] } else { &body["code"] };
    assert_eq!(code, "invalid_api_key", "{path}: {body}");
}

#[tokio::test]
async fn api_keys_guard_every_api_route_and_leave_the_page_and_health_public() {
    let dir = common::temp_dir("keys");
    let file = dir.join("keys.txt");
    std::fs::write(&file, format!("# ops keys\n\n{FILE_KEY}\n")).unwrap();
    let server = Served::start(1024, &["--api-key", KEY, "--api-key-file", file.to_str().unwrap()]).await;
    for (method, path, body) in guarded_routes() {
        expect_401(call(&server, method, path, &body, None).await, path, false).await;
        expect_401(call(&server, method, path, &body, Some("Bearer wrong-key")).await, path, true).await;
        expect_401(call(&server, method, path, &body, Some(&format!("Basic {KEY}"))).await, path, false).await;
        for auth in [format!("Bearer {KEY}"), format!("bearer {FILE_KEY}")] {
            let r = call(&server, method, path, &body, Some(&auth)).await;
            let status = r.status().as_u16();
            assert!(status != 401 && status < 500, "{method} {path} with a key: {status} {}", r.text().await.unwrap_or_default());
        }
    }
    for path in ["/health", "/", "/s/AAAAAAAAAAAA"] {
        assert_eq!(reqwest::get(server.url(path)).await.unwrap().status(), 200, "{path} stays public");
    }
    let models: Value = call(&server, "GET", "/v1/models", &None, Some(&format!("Bearer {KEY}"))).await.json().await.unwrap();
    assert_eq!(models["object"], "list");
}

#[tokio::test]
async fn a_key_from_the_environment_and_public_metrics() {
    let server = Served::start_with_env(1024, &["--metrics-public"], &[("PEREGRINE_API_KEY", "env-key-0003")]).await;
    assert_eq!(reqwest::get(server.url("/metrics")).await.unwrap().status(), 200);
    expect_401(call(&server, "GET", "/api/info", &None, None).await, "/api/info", false).await;
    assert_eq!(call(&server, "GET", "/api/info", &None, Some("Bearer env-key-0003")).await.status(), 200);
}

/// The JSON log line with this message and request id.
async fn log_line(server: &Served, message: &str, id: &str) -> Value {
    let line = server
        .wait_for_line(Duration::from_secs(10), |l| {
            l.contains(&format!("\"request_id\":\"{id}\"")) && l.contains(&format!("\"message\":\"{message}\""))
        })
        .await
        .unwrap_or_else(|| panic!("no {message} line for {id} in {:#?}", server.log_lines()));
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("log line is not JSON ({e}): {line}"))
}

async fn complete_as(server: &Served, id: Option<&str>) -> reqwest::Response {
    let mut req = reqwest::Client::new()
        .post(server.url("/v1/completions"))
        .header("x-forwarded-for", "198.51.100.1, 203.0.113.9")
        .json(&json!({"prompt": "def f():", "max_tokens": 2, "temperature": 0}));
    if let Some(id) = id {
        req = req.header("x-request-id", id);
    }
    let r = req.send().await.expect("POST");
    assert_eq!(r.status(), 200);
    r
}

#[tokio::test]
async fn json_logs_carry_the_request_id_and_the_client_a_trusted_proxy_names() {
    let trusting = Served::start(1024, &["--log-format", "json", "--trusted-proxy", "127.0.0.0/8"]).await;
    let plain = Served::start(1024, &["--log-format", "json"]).await;
    for (server, client) in [(&trusting, "203.0.113.9"), (&plain, "127.0.0.1")] {
        let r = complete_as(server, Some("trace-7f3a")).await;
        assert_eq!(r.headers()["x-request-id"], "trace-7f3a", "a client's id is returned");
        let access = log_line(server, "http", "trace-7f3a").await;
        assert_eq!((access["level"].as_str(), access["client"].as_str()), (Some("INFO"), Some(client)), "{access}");
        assert_eq!((access["path"].as_str(), access["status"].as_u64()), (Some("/v1/completions"), Some(200)), "{access}");
        let job = log_line(server, "request", "trace-7f3a").await;
        assert_eq!(job["client"], client, "{job}");
        assert_eq!((job["endpoint"].as_str(), job["completion_tokens"].as_u64()), (Some("/v1/completions"), Some(2)), "{job}");
    }
    // No id, or one unfit for a log line: a fresh one, returned and logged.
    for sent in [None, Some("x".repeat(200)), Some("has space".to_string())] {
        let r = complete_as(&plain, sent.as_deref()).await;
        let id = r.headers()["x-request-id"].to_str().unwrap().to_string();
        assert_eq!(id.len(), 22, "{sent:?} → {id}");
        log_line(&plain, "request", &id).await;
    }
}

#[tokio::test]
async fn rust_log_filters_the_request_lines() {
    let quiet = Served::start_with_env(1024, &["--log-format", "json"], &[("RUST_LOG", "warn")]).await;
    complete_as(&quiet, Some("quiet-1")).await;
    let loud = Served::start_with_env(1024, &["--log-format", "json"], &[("RUST_LOG", "peregrine_server=debug")]).await;
    complete_as(&loud, Some("loud-1")).await;
    log_line(&loud, "request", "loud-1").await;
    reqwest::get(loud.url("/health")).await.unwrap();
    assert!(loud.wait_for_line(Duration::from_secs(5), |l| l.contains("\"path\":\"/health\"")).await.is_some(), "debug shows probes");
    assert!(!quiet.log_lines().iter().any(|l| l.contains("quiet-1")), "warn hides request lines: {:#?}", quiet.log_lines());
}

#[tokio::test]
async fn bad_access_flags_stop_serve_before_it_binds() {
    let cases: [(&[&str], &str); 4] = [
        (&["--api-key", ""], "--api-key:"),
        (&["--api-key", "two words"], "--api-key:"),
        (&["--api-key-file", "/nonexistent/keys.txt"], "--api-key-file: cannot read"),
        (&["--trusted-proxy", "proxy.local"], "--trusted-proxy:"),
    ];
    for (flags, said) in cases {
        common::assert_refused_before_binding(flags, said);
    }
}
