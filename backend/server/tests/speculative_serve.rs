//! Speculative decoding over HTTP: the `speculative` and `speculative.n_max` fields on
//! the playground and OpenAI routes (bad values and asks a runtime cannot run are 400s
//! naming the field), `timings.draft_n` / `draft_n_accepted` in answers, the `/metrics`
//! counters, and the same greedy text with drafts as without.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::extract::connect_info::MockConnectInfo;
use axum::http::{header, Request, StatusCode};
use common::{dist_with_index, engine_lock, metric, real_engine, scripted_engine, start, Pace};
use http_body_util::BodyExt;
use peregrine_server::app::{app, AppState};
use serde_json::{json, Value};

const MODEL_ID: &str = "test-model";

/// Status and JSON body of one in-process call.
async fn call(router: &axum::Router, uri: &str, body: Value) -> (StatusCode, Value) {
    let req = Request::builder()
        .method("POST")
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let res = tower::ServiceExt::oneshot(router.clone(), req).await.unwrap();
    let status = res.status();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// The field a 400 names: OpenAI's `error.param`, or the playground's message.
fn assert_names(status: StatusCode, body: &Value, field: &str) {
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    match body.get("error") {
        Some(e) => assert_eq!(e["param"], field, "{body}"),
        None => assert!(body["message"].as_str().is_some_and(|m| m.contains(field)), "{body}"),
    }
}

fn with(mut body: Value, extra: Value) -> Value {
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

#[tokio::test]
async fn bad_speculative_fields_are_400s_naming_the_field() {
    // The scripted runtime steps one token at a time: it verifies no drafts.
    let scripted = scripted_engine(Pace::Every(Duration::from_millis(1)), 8);
    let state = AppState::new(dist_with_index()).with_engine(scripted.engine.clone(), MODEL_ID);
    let router = app(state).layer(MockConnectInfo(SocketAddr::from(([127, 0, 0, 1], 4000))));
    let bodies = [
        ("/api/generate", json!({ "prompt": "x", "max_tokens": 2 })),
        ("/v1/completions", json!({ "prompt": "x", "max_tokens": 2 })),
        ("/v1/chat/completions", json!({ "messages": [{ "role": "user", "content": "x" }], "max_tokens": 2 })),
    ];
    for (uri, body) in &bodies {
        let (s, b) = call(&router, uri, with(body.clone(), json!({ "speculative": "lookup" }))).await;
        assert_names(s, &b, "speculative");
        let (s, b) = call(&router, uri, with(body.clone(), json!({ "speculative": "sometimes" }))).await;
        assert_names(s, &b, "speculative");
        let (s, b) = call(&router, uri, with(body.clone(), json!({ "speculative.n_max": -1 }))).await;
        assert_names(s, &b, "speculative.n_max");
        let (s, b) = call(&router, uri, with(body.clone(), json!({ "speculative.n_max": 1 }))).await;
        assert_names(s, &b, "speculative.n_max");
        // Off, or no drafts, runs anywhere.
        let (s, b) = call(&router, uri, with(body.clone(), json!({ "speculative": "off", "speculative.n_max": 0 }))).await;
        assert_eq!(s, StatusCode::OK, "{uri}: {b}");
    }
}

#[tokio::test]
async fn drafts_are_counted_in_timings_and_metrics_and_change_no_token() {
    let _turn = engine_lock().await;
    let server = start(AppState::new(dist_with_index()).with_engine(real_engine(), MODEL_ID)).await;
    let post = |path: &'static str, body: Value| {
        let url = server.url(path);
        async move {
            let res = reqwest::Client::new().post(url).json(&body).send().await.unwrap();
            (res.status(), res.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let rows = "| id | name |\n| --- | --- |\n| 1 | alpha |\n| 2 | beta |\n| 3 | gamma |\n| 4 | delta |\n";
    let body = json!({ "prompt": rows, "max_tokens": 32, "temperature": 0 });
    // The fast runtime verifies 8 rows: 7 drafted tokens at most.
    for n_max in [json!(8), json!(1_000_000_000_000i64), json!(-3)] {
        let (s, b) = post("/v1/completions", with(body.clone(), json!({ "speculative.n_max": n_max }))).await;
        assert_names(s, &b, "speculative.n_max");
    }
    let before = reqwest::get(server.url("/metrics")).await.unwrap().text().await.unwrap();
    let (s, on) = post("/v1/completions", with(body.clone(), json!({ "speculative": "lookup", "speculative.n_max": 4 }))).await;
    assert_eq!(s, StatusCode::OK, "{on}");
    let (s, off) = post("/v1/completions", with(body.clone(), json!({ "speculative": "off" }))).await;
    assert_eq!(s, StatusCode::OK, "{off}");
    assert_eq!(on["choices"][0]["text"], off["choices"][0]["text"], "the same greedy text with drafts");
    let drafted = on["timings"]["draft_n"].as_u64().unwrap();
    let accepted = on["timings"]["draft_n_accepted"].as_u64().unwrap();
    assert!(drafted > 0 && accepted > 0 && accepted <= drafted, "{}", on["timings"]);
    assert_eq!((off["timings"]["draft_n"].as_u64(), off["timings"]["draft_n_accepted"].as_u64()), (Some(0), Some(0)));
    let after = reqwest::get(server.url("/metrics")).await.unwrap().text().await.unwrap();
    let grew = |name: &str| metric(&after, name).unwrap() - metric(&before, name).unwrap();
    assert_eq!(grew("peregrine_draft_tokens_total"), drafted as f64);
    assert_eq!(grew("peregrine_draft_accepted_total"), accepted as f64);
    server.stop().await;
}
