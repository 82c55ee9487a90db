//! The routes other clients expect, driven in-process on the scripted engine (it says
//! " hello world" over and over): llama.cpp's native `/completion` and its answer
//! shapes, the OpenAI routes without `/v1`, `n_predict`, and every route's allow-list
//! (an unknown or unimplemented field is a 400 naming it; label fields pass).

mod common;

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use axum::body::Body;
use axum::extract::connect_info::MockConnectInfo;
use axum::http::{header, Request};
use axum::Router;
use common::{scripted_engine, Pace, Scripted};
use http_body_util::BodyExt;
use peregrine_server::app::{app, AppState};
use peregrine_server::config::Settings;
use serde_json::{json, Value};

const MODEL_ID: &str = "test-model";

fn scripted() -> &'static Scripted {
    static S: OnceLock<Scripted> = OnceLock::new();
    S.get_or_init(|| scripted_engine(Pace::Every(Duration::from_millis(1)), 16))
}

fn test_app() -> Router {
    test_app_with(Settings::default())
}

fn test_app_with(settings: Settings) -> Router {
    let state = AppState::new(common::dist_with_index()).with_engine(scripted().engine.clone(), MODEL_ID).with_settings(settings);
    app(state).layer(MockConnectInfo(SocketAddr::from(([127, 0, 0, 1], 4000))))
}

/// Status and body text of one request.
async fn call(app: &Router, method: &str, uri: &str, body: Value) -> (u16, String) {
    let body = if body.is_null() { String::new() } else { body.to_string() };
    let req = Request::builder().method(method).uri(uri).header(header::CONTENT_TYPE, "application/json").body(Body::from(body)).unwrap();
    let res = tower::ServiceExt::oneshot(app.clone(), req).await.unwrap();
    let status = res.status().as_u16();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

async fn call_json(app: &Router, uri: &str, body: Value) -> Value {
    let (status, text) = call(app, "POST", uri, body).await;
    assert_eq!(status, 200, "{uri}: {text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{uri}: not JSON ({e}): {text}"))
}

/// The `data:` payloads of an event stream.
fn data_lines(text: &str) -> Vec<&str> {
    text.lines().filter_map(|l| l.strip_prefix("data: ")).collect()
}

/// A 400 naming `param`, in OpenAI's shape or the playground's (`code` at the top).
fn assert_names(uri: &str, status: u16, text: &str, param: &str) {
    assert_eq!(status, 400, "{uri} with `{param}`: {text}");
    let v: Value = serde_json::from_str(text).unwrap();
    match v.get("error") {
        Some(e) if e.is_object() => {
            assert_eq!(e["param"], param, "{uri}: {v}");
            assert_eq!(e["type"], "invalid_request_error", "{uri}: {v}");
            assert!(e["message"].as_str().unwrap().contains(param), "{uri}: {v}");
        }
        _ => assert!(v["message"].as_str().unwrap().contains(param), "{uri}: {v}"),
    }
}

#[tokio::test]
async fn native_completion_answers_in_llama_cpp_shape() {
    let app = test_app();
    let v = call_json(&app, "/completion", json!({ "prompt": "Hi", "n_predict": 3, "temperature": 0 })).await;
    assert_eq!(v["content"], " hello world hello");
    assert_eq!(v["stop"], true);
    assert_eq!(v["stop_type"], "limit");
    assert_eq!(v["tokens_predicted"], 3);
    assert!(v["tokens_evaluated"].as_u64().is_some_and(|n| n >= 1), "{v}");
    assert_eq!(v["timings"]["predicted_n"], 3);
    assert!(v.get("completion_probabilities").is_none(), "{v}");

    // Token-id prompts, and n_probs as llama.cpp writes probabilities.
    let v = call_json(&app, "/completion", json!({ "prompt": [19556, 19556], "n_predict": 2, "n_probs": 2 })).await;
    assert_eq!(v["tokens_evaluated"], 2);
    let probs = v["completion_probabilities"].as_array().unwrap();
    assert_eq!(probs.len(), 2, "{v}");
    assert_eq!(probs[0]["token"], " hello");
    assert!(probs[0]["id"].is_u64() && probs[0]["logprob"].as_f64().unwrap() <= 0.0, "{v}");
    assert_eq!(probs[0]["top_logprobs"].as_array().unwrap().len(), 2, "{v}");
    assert_eq!(probs[0]["top_logprobs"][0]["id"], probs[0]["id"], "the chosen greedy token leads its alternatives: {v}");

    // Streamed: one piece per token, a last object with `stop: true`, no `[DONE]`.
    let (status, text) = call(&app, "POST", "/completion", json!({ "prompt": "Hi", "n_predict": 2, "stream": true, "n_probs": 1 })).await;
    assert_eq!(status, 200, "{text}");
    let chunks: Vec<Value> = data_lines(&text).iter().map(|d| serde_json::from_str(d).unwrap()).collect();
    assert_eq!(chunks.len(), 3, "{text}");
    assert_eq!(chunks[0]["content"], " hello");
    assert_eq!(chunks[0]["stop"], false);
    assert_eq!(chunks[0]["completion_probabilities"][0]["token"], " hello");
    assert_eq!(chunks[1]["tokens_predicted"], 2);
    let last = &chunks[2];
    assert_eq!(
        (last["stop"].clone(), last["stop_type"].clone(), last["tokens_predicted"].clone()),
        (json!(true), json!("limit"), json!(2))
    );
    assert!(last["timings"]["predicted_per_second"].is_number(), "{last}");

    // Its own mistakes in OpenAI's error shape, naming the field.
    let (status, text) = call(&app, "POST", "/completion", json!({ "prompt": "Hi", "n_predict": -5 })).await;
    assert_names("/completion", status, &text, "n_predict");
    let (status, text) = call(&app, "POST", "/completion", json!({ "n_predict": 1 })).await;
    assert_names("/completion", status, &text, "prompt");
}

#[tokio::test]
async fn native_completion_without_n_predict_takes_the_servers_default_length() {
    let app = test_app_with(Settings { default_max_tokens: 4, ..Settings::default() });
    let v = call_json(&app, "/completion", json!({ "prompt": "Hi" })).await;
    assert_eq!((v["tokens_predicted"].clone(), v["stop_type"].clone()), (json!(4), json!("limit")), "{v}");
    let v = call_json(&app, "/completion", json!({ "prompt": "Hi", "n_predict": 6 })).await;
    assert_eq!(v["tokens_predicted"], 6, "an explicit length is not capped by the default: {v}");
}

#[tokio::test]
async fn openai_routes_answer_without_the_v1_prefix() {
    let app = test_app();
    let (status, text) = call(&app, "GET", "/models", Value::Null).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap()["data"][0]["id"], MODEL_ID);
    assert_eq!(call(&app, "GET", &format!("/models/{MODEL_ID}"), Value::Null).await.0, 200);
    let body = json!({ "prompt": "Hi", "max_tokens": 2, "temperature": 0 });
    let bare = call_json(&app, "/completions", body.clone()).await;
    let v1 = call_json(&app, "/v1/completions", body).await;
    assert_eq!(bare["object"], "text_completion");
    assert_eq!(bare["choices"][0]["text"], v1["choices"][0]["text"]);
    let chat = json!({ "messages": [{ "role": "user", "content": "Hi" }], "max_tokens": 1 });
    assert_eq!(call_json(&app, "/chat/completions", chat).await["choices"][0]["message"]["content"], " hello");
    // The bare routes' errors are OpenAI's too.
    let (status, text) = call(&app, "POST", "/chat/completions", json!({ "messages": [], "max_tokens": 1 })).await;
    assert_names("/chat/completions", status, &text, "messages");
}

#[tokio::test]
async fn n_predict_limits_openai_routes_as_max_tokens() {
    let app = test_app();
    let v = call_json(&app, "/v1/completions", json!({ "prompt": "Hi", "n_predict": 3 })).await;
    assert_eq!(v["usage"]["completion_tokens"], 3, "{v}");
    let v = call_json(&app, "/v1/chat/completions", json!({ "messages": [{ "role": "user", "content": "Hi" }], "n_predict": 2 })).await;
    assert_eq!(v["usage"]["completion_tokens"], 2, "{v}");
    let (status, text) = call(&app, "POST", "/v1/completions", json!({ "prompt": "Hi", "n_predict": 2, "max_tokens": 3 })).await;
    assert_names("/v1/completions", status, &text, "n_predict");
}

/// A minimal valid body of each route with a body.
fn routes() -> Vec<(&'static str, Value)> {
    let chat = json!({ "messages": [{ "role": "user", "content": "Hi" }], "max_tokens": 1 });
    vec![
        ("/v1/completions", json!({ "prompt": "Hi", "max_tokens": 1 })),
        ("/completions", json!({ "prompt": "Hi", "max_tokens": 1 })),
        ("/v1/chat/completions", chat.clone()),
        ("/chat/completions", chat),
        ("/completion", json!({ "prompt": "Hi", "n_predict": 1 })),
        ("/api/generate", json!({ "prompt": "Hi", "max_tokens": 1 })),
        ("/tokenize", json!({ "content": "Hi" })),
        ("/detokenize", json!({ "tokens": [19556] })),
        ("/api/shares", json!({ "prompt": "Hi" })),
        ("/infill", json!({ "input_prefix": "a", "input_suffix": "b", "n_predict": 1 })),
        ("/apply-template", json!({ "messages": [{ "role": "user", "content": "Hi" }] })),
    ]
}

fn with(body: &Value, key: &str, value: Value) -> Value {
    let mut b = body.clone();
    b[key] = value;
    b
}

#[tokio::test]
async fn every_route_refuses_unknown_fields_by_name() {
    let app = test_app();
    for (uri, body) in routes() {
        for key in ["max_token", "temprature", "bogus"] {
            let (status, text) = call(&app, "POST", uri, with(&body, key, json!(1))).await;
            assert_names(uri, status, &text, key);
            assert!(text.contains("Unrecognized request argument supplied"), "{uri}: {text}");
        }
    }
}

#[tokio::test]
async fn unimplemented_fields_are_refused_by_name_on_every_generating_route() {
    let app = test_app();
    let generating =
        ["/v1/completions", "/completions", "/v1/chat/completions", "/chat/completions", "/completion", "/infill", "/api/generate"];
    for (uri, body) in routes().into_iter().filter(|(u, _)| generating.contains(u)) {
        // The grammar fields are refused where the route does not take them, and where it
        // does because this scripted runtime does not apply grammars (the CPU runtimes
        // do: tests/structured_output.rs).
        for (key, value) in [
            ("grammar", json!("root ::= \"yes\" | \"no\"")),
            ("grammar", json!("this is not GBNF")),
            ("json_schema", json!({ "type": "object" })),
            ("tool_choice", json!("required")),
            ("mirostat", json!(2)),
            ("return_tokens", json!(true)),
        ] {
            let (status, text) = call(&app, "POST", uri, with(&body, key, value)).await;
            assert_names(uri, status, &text, key);
        }
    }
    // Fields a route has in its own API but not here (another route's).
    for (uri, key, value) in [
        ("/v1/chat/completions", "echo", json!(true)),
        ("/v1/chat/completions", "suffix", json!("x")),
        ("/v1/completions", "messages", json!([])),
        ("/completion", "logprobs", json!(2)),
        ("/completion", "n", json!(2)),
        ("/infill", "n", json!(2)),
        ("/api/generate", "logit_bias", json!({})),
        ("/tokenize", "stream", json!(true)),
    ] {
        let body = routes().into_iter().find(|(u, _)| *u == uri).unwrap().1;
        let (status, text) = call(&app, "POST", uri, with(&body, key, value)).await;
        assert_names(uri, status, &text, key);
    }
    // Non-text response formats and required tool calls are 400s on a runtime that
    // cannot follow a grammar (tests/tool_calls.rs has them on the CPU runtime).
    let chat = json!({ "messages": [{ "role": "user", "content": "Hi" }], "max_tokens": 1 });
    let tool = json!([{ "type": "function", "function": { "name": "f" } }]);
    for (key, value) in [
        ("response_format", json!({ "type": "json_object" })),
        ("response_format", json!({ "type": "json_schema", "json_schema": { "name": "x", "schema": {} } })),
        ("tool_choice", json!("required")),
    ] {
        let body = with(&with(&chat, "tools", tool.clone()), key, value);
        let (status, text) = call(&app, "POST", "/v1/chat/completions", body).await;
        assert_names("/v1/chat/completions", status, &text, key);
    }
    let bad_tools = [
        ("tools", json!([{ "type": "function", "function": { "name": "bad name" } }]), "tools[0].function.name"),
        ("tool_choice", json!("maybe"), "tool_choice"),
    ];
    for (key, value, param) in bad_tools {
        let (status, text) = call(&app, "POST", "/v1/chat/completions", with(&chat, key, value)).await;
        assert_names("/v1/chat/completions", status, &text, param);
    }
    // Nested objects are held to their fields too.
    let (status, text) = call(&app, "POST", "/v1/completions", json!({ "prompt": "Hi", "stream_options": { "include_usag": true } })).await;
    assert_names("/v1/completions", status, &text, "stream_options");
    let bad_message = json!({ "messages": [{ "role": "user", "content": "Hi", "nmae": "x" }], "max_tokens": 1 });
    let (status, text) = call(&app, "POST", "/v1/chat/completions", bad_message).await;
    assert_names("/v1/chat/completions", status, &text, "messages[0].nmae");
}

#[tokio::test]
async fn label_and_speculative_fields_are_accepted() {
    let app = test_app();
    let chat = json!({ "messages": [{ "role": "user", "content": "Hi" }], "max_tokens": 1 });
    for (uri, body) in [
        ("/v1/completions", json!({ "prompt": "Hi", "max_tokens": 1 })),
        ("/v1/chat/completions", chat.clone()),
        ("/completion", json!({ "prompt": "Hi", "n_predict": 1 })),
    ] {
        let labelled = with(&with(&body, "user", json!("someone")), "metadata", json!({ "run": "7" }));
        call_json(&app, uri, labelled).await;
        // The speculative fields are known on every generating route: off is accepted
        // anywhere; lookup on this runtime (one token per step) is refused by name, not
        // as an unknown field.
        let with_fields = |spec: Value| {
            let mut b = body.clone();
            b.as_object_mut().unwrap().extend(spec.as_object().unwrap().clone());
            b
        };
        call_json(&app, uri, with_fields(json!({ "speculative": "off", "speculative.n_max": 0 }))).await;
        let (status, text) = call(&app, "POST", uri, with_fields(json!({ "speculative": "lookup" }))).await;
        assert_names(uri, status, &text, "speculative");
    }
    let generate = json!({ "prompt": "Hi", "max_tokens": 1, "speculative": "off", "speculative.n_max": 0 });
    let (status, text) = call(&app, "POST", "/api/generate", generate).await;
    assert_eq!(status, 200, "{text}");
    let (status, text) = call(&app, "POST", "/api/generate", json!({ "prompt": "Hi", "max_tokens": 1, "speculative": "lookup" })).await;
    assert_names("/api/generate", status, &text, "speculative");
    // A text response format, no tools and a null unimplemented field change nothing.
    let plain = with(&with(&with(&chat, "response_format", json!({ "type": "text" })), "tools", json!([])), "grammar", Value::Null);
    call_json(&app, "/v1/chat/completions", plain).await;
    // llama.cpp's logit_bias pairs, `false` banning the token.
    let v = call_json(&app, "/completion", json!({ "prompt": "Hi", "n_predict": 1, "logit_bias": [[19556, false], [1, -2.5]] })).await;
    assert_eq!(v["stop"], true);
}

#[tokio::test]
async fn llama_server_routes_not_served_here_answer_501_in_json_not_the_page() {
    let app = test_app();
    for (method, uri) in [("GET", "/slots"), ("GET", "/slots/0"), ("POST", "/embedding"), ("POST", "/reranking"), ("GET", "/lora-adapters")] {
        let (status, text) = call(&app, method, uri, Value::Null).await;
        assert_eq!(status, 501, "{uri}: {text}");
        let body: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{uri}: not JSON ({e}): {text}"));
        assert_eq!(body["error"]["type"], "not_supported_error", "{uri}: {body}");
        assert!(body["error"]["message"].as_str().unwrap_or_default().contains(uri), "{uri}: {body}");
    }
}
