//! The application driven in-process (`tower::ServiceExt::oneshot`): validation and
//! error shapes on every route. Bad input is always a clear 4xx, never a 500.

mod common;

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use axum::body::Body;
use axum::extract::connect_info::MockConnectInfo;
use axum::http::{header, Request, StatusCode};
use axum::Router;
use common::{scripted_engine, Pace, Scripted};
use http_body_util::BodyExt;
use peregrine_server::app::{app, AppState};
use peregrine_server::config::Settings;
use peregrine_server::engine_slot::EngineSlot;
use serde_json::{json, Value};

/// Model id the tests' engine is registered under.
const MODEL_ID: &str = "test-model";

fn scripted() -> &'static Scripted {
    static S: OnceLock<Scripted> = OnceLock::new();
    S.get_or_init(|| scripted_engine(Pace::Every(Duration::from_millis(1)), 8))
}

fn test_app(settings: Settings) -> Router {
    let state = AppState::new(common::dist_with_index()).with_engine(scripted().engine.clone(), MODEL_ID).with_settings(settings);
    app(state).layer(MockConnectInfo(SocketAddr::from(([127, 0, 0, 1], 4000))))
}

struct Answer {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    text: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }
}

async fn call(app: &Router, method: &str, uri: &str, body: &str) -> Answer {
    call_with(app, method, uri, body, &[(header::CONTENT_TYPE, "application/json")]).await
}

/// [`call`] with exactly these headers.
async fn call_with(app: &Router, method: &str, uri: &str, body: &str, headers: &[(header::HeaderName, &str)]) -> Answer {
    let mut req = Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        req = req.header(name, *value);
    }
    let req = req.body(Body::from(body.to_string())).unwrap();
    let res = tower::ServiceExt::oneshot(app.clone(), req).await.unwrap();
    let status = res.status();
    let headers = res.headers().clone();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    Answer { status, headers, text: String::from_utf8_lossy(&bytes).into_owned() }
}

/// Asserts a playground error: status, `code`, and a message.
fn playground_error(a: &Answer, status: u16, code: &str) {
    assert_eq!(a.status.as_u16(), status, "{}", a.text);
    let v = a.json();
    assert_eq!(v["code"], code, "{v}");
    assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
}

/// Asserts an OpenAI error: status and `{"error": {message, type, param, code}}`.
fn openai_error(a: &Answer, status: u16, code: &str) -> Value {
    assert_eq!(a.status.as_u16(), status, "{}", a.text);
    let v = a.json();
    let e = &v["error"];
    assert_eq!(e["code"], code, "{v}");
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    assert!(e["type"].is_string() && e.get("param").is_some(), "{v}");
    e.clone()
}

#[tokio::test]
async fn playground_generate_rejects_bad_input_with_clear_400s() {
    let app = test_app(Settings::default());
    playground_error(&call(&app, "POST", "/api/generate", "{not json").await, 400, "invalid_request");
    playground_error(&call(&app, "POST", "/api/generate", "").await, 400, "invalid_request");
    playground_error(&call(&app, "POST", "/api/generate", r#"{"prompt": 5}"#).await, 400, "invalid_request");
    playground_error(&call(&app, "POST", "/api/generate", r#"{"max_tokens": 5}"#).await, 400, "invalid_request");
    playground_error(&call(&app, "POST", "/api/generate", r#"{"prompt": "x", "mode": "poem"}"#).await, 400, "invalid_request");
    playground_error(&call(&app, "POST", "/api/generate", r#"{"prompt": "x", "max_tokens": -1}"#).await, 400, "invalid_request");
    playground_error(&call(&app, "POST", "/api/generate", r#"{"prompt": "x", "max_tokens": 0}"#).await, 400, "invalid_request");
    // max_tokens 0 is a 400 on every route but echo scoring.
    let e = openai_error(&call(&app, "POST", "/v1/completions", r#"{"prompt": "x", "max_tokens": 0}"#).await, 400, "invalid_request");
    assert_eq!(e["param"], "max_tokens");
    let chat = r#"{"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}"#;
    assert_eq!(openai_error(&call(&app, "POST", "/v1/chat/completions", chat).await, 400, "invalid_request")["param"], "max_tokens");
    playground_error(&call(&app, "POST", "/api/generate", r#"{"prompt": "x", "temperature": 3}"#).await, 400, "invalid_request");
    playground_error(&call(&app, "POST", "/api/generate", r#"{"prompt": "x", "top_p": 0}"#).await, 400, "invalid_request");
    playground_error(&call(&app, "POST", "/api/generate", r#"{"prompt": "x", "stop": [""]}"#).await, 400, "invalid_request");
    playground_error(
        &call(&app, "POST", "/api/generate", r#"{"prompt": "x", "stop": ["a","b","c","d","e","f","g","h","i"]}"#).await,
        400,
        "invalid_request",
    );
    // An empty completion prompt has no tokens for this model (no BOS).
    playground_error(&call(&app, "POST", "/api/generate", r#"{"prompt": ""}"#).await, 400, "invalid_request");
    // Prompt longer than the context (8192 tokens) with a 64 KiB-safe body.
    let long = "hello ".repeat(9000);
    playground_error(
        &call(&app, "POST", "/api/generate", &json!({ "prompt": long, "max_tokens": 8 }).to_string()).await,
        400,
        "context_length_exceeded",
    );
}

#[tokio::test]
async fn oversized_prompts_and_bodies_are_413() {
    let app = test_app(Settings { max_body_bytes: 200 * 1024, ..Settings::default() });
    let big = "x".repeat(peregrine_api::playground::MAX_PROMPT_BYTES + 1);
    playground_error(&call(&app, "POST", "/api/generate", &json!({ "prompt": big }).to_string()).await, 413, "payload_too_large");
    let huge = "x".repeat(300 * 1024);
    playground_error(&call(&app, "POST", "/api/generate", &json!({ "prompt": huge }).to_string()).await, 413, "payload_too_large");
    openai_error(&call(&app, "POST", "/v1/completions", &json!({ "prompt": huge }).to_string()).await, 413, "payload_too_large");
    playground_error(&call(&app, "POST", "/api/shares", &json!({ "prompt": big }).to_string()).await, 413, "payload_too_large");
}

#[tokio::test]
async fn playground_generate_streams_events_in_process() {
    let app = test_app(Settings::default());
    let req = Request::builder()
        .method("POST")
        .uri("/api/generate")
        .header(header::ACCEPT_ENCODING, "gzip")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(r#"{"prompt": "Hello", "max_tokens": 3}"#))
        .unwrap();
    let res = tower::ServiceExt::oneshot(app.clone(), req).await.unwrap();
    assert_eq!(res.status(), 200);
    assert!(res.headers()[header::CONTENT_TYPE].to_str().unwrap().starts_with("text/event-stream"));
    assert!(res.headers().get(header::CONTENT_ENCODING).is_none(), "event streams are never compressed (they would be buffered)");
    let text = String::from_utf8(res.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
    let a = Answer { status: StatusCode::OK, headers: Default::default(), text };
    let names: Vec<&str> = a.text.lines().filter_map(|l| l.strip_prefix("event: ")).collect();
    assert_eq!(names.first(), Some(&"started"), "{}", a.text);
    assert_eq!(names.last(), Some(&"done"), "{}", a.text);
    assert_eq!(names.iter().filter(|n| **n == "token").count(), 3, "{}", a.text);
    let done = a.text.lines().filter_map(|l| l.strip_prefix("data: ")).next_back().unwrap();
    let done: Value = serde_json::from_str(done).unwrap();
    assert_eq!(done["type"], "done");
    assert_eq!(done["finish_reason"], "length");
    assert_eq!(done["usage"]["completion_tokens"], 3);
}

#[tokio::test]
async fn openai_errors_have_openai_shape_and_status() {
    let app = test_app(Settings::default());
    openai_error(&call(&app, "POST", "/v1/completions", "{oops").await, 400, "invalid_request");
    let e = openai_error(&call(&app, "POST", "/v1/completions", r#"{"prompt": "x", "max_tokens": "many"}"#).await, 400, "invalid_request");
    assert_eq!(e["param"], "max_tokens");
    openai_error(&call(&app, "POST", "/v1/completions", r#"{"max_tokens": 1}"#).await, 400, "invalid_request");
    let e = openai_error(&call(&app, "POST", "/v1/completions", r#"{"prompt": "x", "n": 9}"#).await, 400, "invalid_request");
    assert_eq!(e["param"], "n");
    openai_error(
        &call(&app, "POST", "/v1/completions", r#"{"prompt": "x", "logit_bias": {"5": 1, "05": 2}}"#).await,
        400,
        "invalid_request",
    );
    openai_error(&call(&app, "POST", "/v1/completions", r#"{"prompt": "x", "temperature": -1}"#).await, 400, "invalid_request");
    openai_error(&call(&app, "POST", "/v1/completions", r#"{"prompt": "x", "logprobs": 50}"#).await, 400, "invalid_request");
    let e =
        openai_error(&call(&app, "POST", "/v1/completions", r#"{"prompt": "x", "frequency_penalty": 2.5}"#).await, 400, "invalid_request");
    assert_eq!(e["param"], "frequency_penalty");
    let e =
        openai_error(&call(&app, "POST", "/v1/completions", r#"{"prompt": "x", "logit_bias": {"abc": 1}}"#).await, 400, "invalid_request");
    assert_eq!(e["param"], "logit_bias");
    let e =
        openai_error(&call(&app, "POST", "/v1/completions", r#"{"prompt": "x", "logit_bias": {"5": 101}}"#).await, 400, "invalid_request");
    assert_eq!(e["param"], "logit_bias");
    openai_error(&call(&app, "POST", "/v1/completions", r#"{"prompt": "x", "stop": 7}"#).await, 400, "invalid_request");
    openai_error(&call(&app, "POST", "/v1/completions", r#"{"prompt": [1, -2]}"#).await, 400, "invalid_request");
    openai_error(&call(&app, "POST", "/v1/completions", r#"{"prompt": ["a", "b"]}"#).await, 400, "invalid_request");
    openai_error(&call(&app, "POST", "/v1/completions", r#"{"prompt": [99999999]}"#).await, 400, "invalid_request");
    openai_error(&call(&app, "POST", "/v1/completions", r#"{"prompt": "x", "max_tokens": 100000}"#).await, 400, "context_length_exceeded");
    let e = openai_error(&call(&app, "POST", "/v1/completions", r#"{"model": "gpt-4o", "prompt": "x"}"#).await, 404, "model_not_found");
    assert_eq!(e["param"], "model");
    openai_error(&call(&app, "POST", "/v1/chat/completions", r#"{"messages": []}"#).await, 400, "invalid_request");
    openai_error(&call(&app, "POST", "/v1/chat/completions", r#"{"messages": "hi"}"#).await, 400, "invalid_request");
    openai_error(
        &call(&app, "POST", "/v1/chat/completions", r#"{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}"#).await,
        400,
        "invalid_request",
    );
    openai_error(
        &call(&app, "POST", "/v1/chat/completions", r#"{"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}"#).await,
        400,
        "invalid_request",
    );
    openai_error(
        &call(&app, "POST", "/v1/chat/completions", r#"{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}"#)
            .await,
        400,
        "invalid_request",
    );
    openai_error(
        &call(&app, "POST", "/v1/chat/completions", r#"{"messages": [{"role": "user", "content": "x"}], "n": 9}"#).await,
        400,
        "invalid_request",
    );
    openai_error(
        &call(&app, "POST", "/v1/chat/completions", r#"{"model": "nope", "messages": [{"role": "user", "content": "x"}]}"#).await,
        404,
        "model_not_found",
    );
    openai_error(&call(&app, "GET", "/v1/models/nope", "").await, 404, "model_not_found");
    openai_error(&call(&app, "GET", "/v1/engines", "").await, 404, "not_found");
}

#[tokio::test]
async fn openai_completion_and_chat_answer_with_usage_and_timings() {
    let app = test_app(Settings::default());
    let a = call(&app, "GET", "/v1/models", "").await;
    assert_eq!(a.status, 200);
    assert_eq!(a.json()["data"][0]["id"], MODEL_ID);
    assert_eq!(call(&app, "GET", &format!("/v1/models/{MODEL_ID}"), "").await.status, 200);

    let a =
        call(&app, "POST", "/v1/completions", &json!({ "model": MODEL_ID, "prompt": [19556], "max_tokens": 2, "logprobs": 1 }).to_string())
            .await;
    assert_eq!(a.status, 200, "{}", a.text);
    let v = a.json();
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["choices"][0]["text"], " hello world");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["choices"][0]["logprobs"]["tokens"], json!([" hello", " world"]));
    assert_eq!(
        v["usage"],
        json!({ "prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3, "prompt_tokens_details": { "cached_tokens": 0 } })
    );
    assert_eq!(v["timings"]["predicted_n"], 2);

    let a = call(&app, "POST", "/v1/chat/completions", &json!({ "messages": [{ "role": "user", "content": [{ "type": "text", "text": "Hi" }] }], "max_completion_tokens": 1, "logprobs": true, "top_logprobs": 2 }).to_string()).await;
    assert_eq!(a.status, 200, "{}", a.text);
    let v = a.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"], json!({ "role": "assistant", "content": " hello" }));
    let lp = &v["choices"][0]["logprobs"]["content"][0];
    assert_eq!(lp["token"], " hello");
    assert_eq!(lp["top_logprobs"].as_array().unwrap().len(), 2);
    assert_eq!(v["usage"]["completion_tokens"], 1);
}

#[tokio::test]
async fn tokenize_and_detokenize_follow_llama_cpp() {
    let app = test_app(Settings::default());
    let a = call(&app, "POST", "/tokenize", r#"{"content": "Hello world"}"#).await;
    assert_eq!(a.status, 200, "{}", a.text);
    let tokens = a.json()["tokens"].clone();
    assert!(tokens.as_array().is_some_and(|t| !t.is_empty()));
    let a = call(&app, "POST", "/tokenize", r#"{"content": "Hello", "with_pieces": true}"#).await;
    assert_eq!(a.json()["tokens"][0]["piece"], "Hello");
    let a = call(&app, "POST", "/detokenize", &json!({ "tokens": tokens }).to_string()).await;
    assert_eq!(a.json()["content"], "Hello world");
    playground_error(&call(&app, "POST", "/detokenize", r#"{"tokens": [4000000000]}"#).await, 400, "invalid_request");
    playground_error(&call(&app, "POST", "/tokenize", r#"{"text": "x"}"#).await, 400, "invalid_request");
    let huge = json!({ "content": "a".repeat(peregrine_server::config::DEFAULT_MAX_TOKENIZE_BYTES + 1) }).to_string();
    playground_error(&call(&app, "POST", "/tokenize", &huge).await, 413, "payload_too_large");
}

#[tokio::test]
async fn info_metrics_and_unknown_routes() {
    let app = test_app(Settings { max_per_client: 3, ..Settings::default() });
    let a = call(&app, "GET", "/api/info", "").await;
    assert_eq!(a.status, 200);
    let info: peregrine_api::Info = serde_json::from_str(&a.text).expect("Info still parses");
    assert_eq!(info.backend, "cpu");
    assert_eq!(info.max_queue, 8);
    assert_eq!(a.json()["limits"]["max_per_client"], 3);
    assert_eq!(a.json()["tensor_parallel"], 1, "one CPU engine: no split");
    let a = call(&app, "GET", "/metrics", "").await;
    assert_eq!(a.status, 200);
    assert!(a.headers[header::CONTENT_TYPE].to_str().unwrap().starts_with("text/plain"));
    for name in [
        "peregrine_time_to_first_token_seconds_bucket{le=\"+Inf\"}",
        "peregrine_inter_token_latency_seconds_count",
        "peregrine_e2e_request_latency_seconds_sum",
        "peregrine_request_queue_time_seconds_count",
        "peregrine_prompt_tokens_total",
        "peregrine_generation_tokens_total",
        "peregrine_requests_total{finish_reason=\"stop\"}",
        "peregrine_requests_running",
        "peregrine_requests_waiting",
        "peregrine_request_prompt_tokens_bucket{le=\"10\"}",
        "peregrine_request_generation_tokens_count",
    ] {
        assert!(common::metric(&a.text, name).is_some(), "{name} missing from\n{}", a.text);
    }
    let label = format!("model_name=\"{MODEL_ID}\"");
    let unlabelled: Vec<&str> = a.text.lines().filter(|l| !l.starts_with('#') && !l.contains(&label)).collect();
    assert!(unlabelled.is_empty(), "series without {label}: {unlabelled:?}");
    playground_error(&call(&app, "GET", "/api/nothing-here", "").await, 404, "not_found");
    playground_error(&call(&app, "GET", "/api/shares/short", "").await, 404, "not_found");
    // This server has no share store.
    playground_error(&call(&app, "GET", "/api/shares/AAAAAAAAAAAA", "").await, 503, "unavailable");
    assert_eq!(call(&app, "GET", "/api/generate", "").await.status, 405);
}

#[tokio::test]
async fn without_an_engine_api_routes_are_503_and_health_reflects_loading() {
    let none = app(AppState::new(common::dist_with_index()));
    assert_eq!(call(&none, "GET", "/health", "").await.status, 200);
    playground_error(&call(&none, "POST", "/api/generate", r#"{"prompt": "x"}"#).await, 503, "unavailable");
    playground_error(&call(&none, "GET", "/api/info", "").await, 503, "unavailable");
    openai_error(&call(&none, "GET", "/v1/models", "").await, 503, "unavailable");
    openai_error(
        &call(&none, "POST", "/v1/chat/completions", r#"{"messages": [{"role": "user", "content": "x"}]}"#).await,
        503,
        "unavailable",
    );

    let loading = app(AppState::new(common::dist_with_index()).with_engine_slot(EngineSlot::loading()));
    let a = call(&loading, "GET", "/health", "").await;
    assert_eq!(a.status, 503);
    assert_eq!(a.json()["status"], "loading");
}

#[tokio::test]
async fn static_files_are_cached_by_hash_and_never_escape_dist() {
    let dist = common::dist_with_index();
    std::fs::write(dist.parent().unwrap().join("peregrine-secret.txt"), "top secret").unwrap();
    let app = app(AppState::new(dist));
    let a = call(&app, "GET", "/frontend-0123456789abcdef_bg.wasm", "").await;
    assert_eq!(a.status, 200);
    assert!(a.headers[header::CACHE_CONTROL].to_str().unwrap().contains("immutable"));
    let a = call(&app, "GET", "/", "").await;
    assert!(a.text.contains("Peregrine test page"));
    assert_eq!(a.headers[header::CACHE_CONTROL], "no-cache");
    for path in ["/../peregrine-secret.txt", "/%2e%2e/peregrine-secret.txt", "/..%2fperegrine-secret.txt", "/%2e%2e%2fperegrine-secret.txt"]
    {
        let a = call(&app, "GET", path, "").await;
        assert!(!a.text.contains("top secret"), "{path} escaped dist/");
    }
}

#[tokio::test]
async fn cors_is_closed_by_default_and_opens_for_configured_origins() {
    let preflight = |app: Router| async move {
        let req = Request::builder()
            .method("OPTIONS")
            .uri("/v1/models")
            .header(header::ORIGIN, "https://example.com")
            .header(header::ACCESS_CONTROL_REQUEST_METHOD, "GET")
            .body(Body::empty())
            .unwrap();
        tower::ServiceExt::oneshot(app, req).await.unwrap()
    };
    let closed = preflight(test_app(Settings::default())).await;
    assert!(closed.headers().get(header::ACCESS_CONTROL_ALLOW_ORIGIN).is_none());
    let open = preflight(test_app(Settings { cors_origins: vec!["https://example.com".into()], ..Settings::default() })).await;
    assert_eq!(open.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN], "https://example.com");
}

#[tokio::test]
async fn a_foreign_web_page_can_neither_post_forms_nor_rebind_dns() {
    // A cross-site page can send a form or text/plain post without a preflight: refused.
    let app = test_app(Settings::default());
    let body = r#"{"prompt": "x", "max_tokens": 1}"#;
    for (path, kind) in
        [("/api/generate", "playground"), ("/api/shares", "playground"), ("/v1/completions", "openai"), ("/tokenize", "playground")]
    {
        for declared in ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"] {
            let a = call_with(&app, "POST", path, body, &[(header::CONTENT_TYPE, declared)]).await;
            match kind {
                "playground" => playground_error(&a, 415, "unsupported_media_type"),
                _ => drop(openai_error(&a, 415, "unsupported_media_type")),
            }
        }
        let a = call_with(&app, "POST", path, body, &[]).await;
        assert_eq!(a.status, 415, "{path} without a Content-Type: {}", a.text);
    }
    let ok = call_with(&app, "POST", "/api/shares", body, &[(header::CONTENT_TYPE, "application/json; charset=utf-8")]).await;
    assert_ne!(ok.status, 415, "{}", ok.text);

    // Every response says how a browser may use it.
    for path in ["/", "/api/info", "/v1/models", "/nope.js"] {
        let a = call_with(&app, "GET", path, "", &[]).await;
        assert_eq!(a.headers["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(a.headers["x-frame-options"], "DENY", "{path}");
        assert_eq!(a.headers["referrer-policy"], "no-referrer", "{path}");
        let csp = a.headers["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("frame-ancestors 'none'") && csp.contains("script-src 'self' 'wasm-unsafe-eval'"), "{path}: {csp}");
    }

    // Bound to loopback, only loopback names are answered; a probe's /health answers any.
    let hosts = Settings { allowed_hosts: Some(vec!["localhost".into(), "127.0.0.1".into(), "[::1]".into()]), ..Settings::default() };
    let app = test_app(hosts);
    for host in ["localhost:8080", "127.0.0.1:8080", "[::1]:8080", "LOCALHOST"] {
        assert_eq!(call_with(&app, "GET", "/api/info", "", &[(header::HOST, host)]).await.status, 200, "{host}");
    }
    for host in ["attacker.example", "attacker.example:8080", "127.0.0.1.attacker.example"] {
        let a = call_with(&app, "GET", "/api/info", "", &[(header::HOST, host)]).await;
        playground_error(&a, 421, "misdirected_host");
        assert!(a.json()["message"].as_str().unwrap().contains("--allowed-host"), "{}", a.text);
    }
    let long = "a".repeat(10_000);
    let a = call_with(&app, "GET", "/", "", &[(header::HOST, &long)]).await;
    assert_eq!(a.status, 421);
    assert!(a.text.len() < 1_000, "the refused host is not echoed whole");
    assert_eq!(call_with(&app, "GET", "/health", "", &[(header::HOST, "10.0.0.7:8080")]).await.status, 200);
}

#[tokio::test]
async fn an_unknown_model_name_is_not_echoed_whole() {
    let app = test_app(Settings::default());
    let name = "m".repeat(500_000);
    let a = call(&app, "POST", "/v1/completions", &json!({ "model": name, "prompt": "x" }).to_string()).await;
    let e = openai_error(&a, 404, "model_not_found");
    assert!(a.text.len() < 2_000, "{} bytes", a.text.len());
    assert!(e["message"].as_str().unwrap().contains("mmm…"), "{e}");
}
