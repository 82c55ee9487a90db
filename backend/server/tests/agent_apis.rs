//! OpenAI's Responses API and Anthropic's Messages API driven in-process on the
//! scripted engine (it says " hello world" over and over, never stopping by itself):
//! their objects, their streamed events, their error shapes, their API keys. The
//! official clients drive the same routes on the real binary in `openai_python`.

mod common;

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use axum::body::Body;
use axum::extract::connect_info::MockConnectInfo;
use axum::http::Request;
use axum::Router;
use common::{scripted_engine, Pace, Scripted};
use http_body_util::BodyExt;
use peregrine_server::app::{app, AppState};
use peregrine_server::auth::ApiKeys;
use peregrine_server::config::Settings;
use serde_json::{json, Value};

const MODEL_ID: &str = "test-model";

fn scripted() -> &'static Scripted {
    static S: OnceLock<Scripted> = OnceLock::new();
    S.get_or_init(|| scripted_engine(Pace::Every(Duration::from_millis(1)), 16))
}

fn test_app(settings: Settings) -> Router {
    let state = AppState::new(common::dist_with_index()).with_engine(scripted().engine.clone(), MODEL_ID).with_settings(settings);
    app(state).layer(MockConnectInfo(SocketAddr::from(([127, 0, 0, 1], 4000))))
}

/// Status and body of a JSON POST with these extra headers.
async fn post(app: &Router, uri: &str, body: Value, headers: &[(&str, &str)]) -> (u16, String) {
    let mut req = Request::builder().method("POST").uri(uri).header("content-type", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let res = tower::ServiceExt::oneshot(app.clone(), req.body(Body::from(body.to_string())).unwrap()).await.unwrap();
    let status = res.status().as_u16();
    (status, String::from_utf8_lossy(&res.into_body().collect().await.unwrap().to_bytes()).into_owned())
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// The (event name, payload) pairs of an event stream (fields in any order within an
/// event, as SSE allows).
fn events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter_map(|block| {
            let field = |name: &str| block.lines().find_map(|l| l.strip_prefix(name)).map(str::to_string);
            Some((field("event: ").unwrap_or_default(), parse(&field("data: ")?)))
        })
        .collect()
}

/// An OpenAI-shaped 400 naming `param` in its param and its message.
fn openai_400(status: u16, text: &str, param: &str) {
    assert_eq!(status, 400, "{text}");
    let e = &parse(text)["error"];
    assert_eq!(e["param"], param, "{text}");
    assert!(e["message"].as_str().unwrap().contains(param), "{text}");
}

/// An Anthropic-shaped error of `kind` whose message names `field`.
fn anthropic_error(status: u16, text: &str, want: u16, kind: &str, field: &str) {
    assert_eq!(status, want, "{text}");
    let v = parse(text);
    assert_eq!(v["type"], "error", "{v}");
    assert_eq!(v["error"]["type"], kind, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains(field), "{v}");
}

#[tokio::test]
async fn responses_answer_and_stream_in_openai_shape() {
    let app = test_app(Settings::default());
    let body = json!({
        "model": MODEL_ID,
        "instructions": "Be brief.",
        "input": [
            { "role": "user", "content": "Hi" },
            { "type": "message", "role": "assistant", "content": [{ "type": "output_text", "text": "Hello" }] },
            { "role": "developer", "content": [{ "type": "input_text", "text": "Go on." }] },
        ],
        "max_output_tokens": 2,
        "metadata": { "run": "1" },
        "user": "u",
        "store": false,
    });
    let (status, text) = post(&app, "/v1/responses", body.clone(), &[]).await;
    assert_eq!(status, 200, "{text}");
    let r = parse(&text);
    assert_eq!((r["object"].clone(), r["status"].clone()), (json!("response"), json!("incomplete")));
    assert_eq!(r["incomplete_details"]["reason"], "max_output_tokens");
    assert_eq!(r["output"][0]["role"], "assistant");
    assert_eq!(r["output"][0]["content"][0], json!({ "type": "output_text", "text": " hello world", "annotations": [], "logprobs": [] }));
    assert_eq!(r["usage"]["output_tokens"], 2);
    let input = r["usage"]["input_tokens"].as_u64().unwrap();
    assert!(input > 3, "the instructions and three turns: {r}");
    assert_eq!(r["usage"]["total_tokens"], input + 2);
    assert_eq!(r["metadata"], json!({ "run": "1" }));
    assert!(r["id"].as_str().unwrap().starts_with("resp_"), "{r}");

    let mut streamed = body;
    streamed["stream"] = json!(true);
    let (status, text) = post(&app, "/v1/responses", streamed, &[]).await;
    assert_eq!(status, 200, "{text}");
    let evs = events(&text);
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.incomplete",
        ],
        "{text}"
    );
    for (i, (name, data)) in evs.iter().enumerate() {
        assert_eq!((data["type"].as_str(), data["sequence_number"].as_u64()), (Some(name.as_str()), Some(i as u64)), "{data}");
    }
    let deltas: String = evs.iter().filter_map(|(_, d)| d["delta"].as_str()).collect();
    assert_eq!(deltas, " hello world");
    assert_eq!(evs[6].1["text"], " hello world");
    assert_eq!(evs[9].1["response"]["usage"]["output_tokens"], 2);
    assert!(!text.contains("[DONE]"), "{text}");
}

#[tokio::test]
async fn responses_refuse_what_they_do_not_implement_by_name() {
    let app = test_app(Settings::default());
    for (extra, param) in [
        (json!({ "max_output_token": 3 }), "max_output_token"),
        (json!({ "previous_response_id": "resp_x" }), "previous_response_id"),
        (json!({ "store": true }), "store"),
        (json!({ "tools": [{ "type": "web_search" }] }), "tools[0].type"),
        (json!({ "tools": [{ "type": "function", "name": "f" }], "tool_choice": "required" }), "tool_choice"),
        (json!({ "text": { "format": { "type": "json_object" } } }), "text.format"),
        (json!({ "text": { "format": { "type": "xml" } } }), "text.format.type"),
        (json!({ "text": { "verbosity": "low" } }), "text.verbosity"),
        (json!({ "reasoning": { "effort": "low" } }), "reasoning"),
        (json!({ "input": [] }), "input"),
        (json!({ "input": 5 }), "input"),
        (json!({ "input": [{ "type": "reasoning", "summary": [] }] }), "input[0].type"),
        (json!({ "input": [{ "type": "function_call_output", "call_id": "c", "output": 3 }] }), "input[0].output"),
        (json!({ "input": [{ "role": "user", "content": [{ "type": "input_image", "image_url": "x" }] }] }), "input[0].content[0].type"),
        (json!({ "input": [{ "role": "tool", "content": "x" }] }), "input[0].role"),
        (json!({ "input": [{ "role": "user", "content": "x", "name": "n" }] }), "input[0].name"),
        (json!({ "temperature": 3 }), "temperature"),
    ] {
        let mut body = json!({ "input": "Hi", "max_output_tokens": 1 });
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let (status, text) = post(&app, "/v1/responses", body, &[]).await;
        openai_400(status, &text, param);
    }
}

#[tokio::test]
async fn messages_answer_and_stream_in_anthropic_shape() {
    let app = test_app(Settings::default());
    let body = json!({
        "model": MODEL_ID,
        "system": [{ "type": "text", "text": "Be brief.", "cache_control": { "type": "ephemeral" } }],
        "messages": [
            { "role": "user", "content": "Hi" },
            { "role": "assistant", "content": [{ "type": "text", "text": "Hello" }] },
            { "role": "user", "content": [{ "type": "text", "text": "More." }] },
        ],
        "max_tokens": 3,
        "temperature": 0.5,
        "metadata": { "user_id": "u" },
    });
    let (status, text) = post(&app, "/v1/messages", body.clone(), &[]).await;
    assert_eq!(status, 200, "{text}");
    let m = parse(&text);
    assert_eq!((m["type"].clone(), m["role"].clone()), (json!("message"), json!("assistant")));
    assert_eq!(m["content"], json!([{ "type": "text", "text": " hello world hello" }]));
    assert_eq!(m["stop_reason"], "max_tokens");
    assert_eq!(m["stop_sequence"], Value::Null);
    assert_eq!(m["usage"]["output_tokens"], 3);
    let computed = m["usage"]["input_tokens"].as_u64().unwrap() + m["usage"]["cache_read_input_tokens"].as_u64().unwrap();
    assert!(computed > 3, "the system prompt and three turns: {m}");

    let mut streamed = body;
    streamed["stream"] = json!(true);
    let (status, text) = post(&app, "/v1/messages", streamed, &[]).await;
    assert_eq!(status, 200, "{text}");
    let evs = events(&text);
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ],
        "{text}"
    );
    assert!(evs.iter().all(|(n, d)| d["type"] == n.as_str()), "{text}");
    assert_eq!(evs[0].1["message"]["content"], json!([]));
    assert_eq!(evs[0].1["message"]["usage"]["input_tokens"], computed);
    let deltas: String = evs.iter().filter_map(|(_, d)| d["delta"]["text"].as_str()).collect();
    assert_eq!(deltas, " hello world hello");
    assert_eq!(evs[7].1["delta"]["stop_reason"], "max_tokens");
    assert_eq!(evs[7].1["usage"]["output_tokens"], 3);
}

#[tokio::test]
async fn messages_refuse_what_they_do_not_implement_in_anthropic_shape() {
    let app = test_app(Settings::default());
    let user = json!([{ "role": "user", "content": "Hi" }]);
    for (body, field) in [
        (json!({ "messages": user }), "max_tokens"),
        (json!({ "messages": user, "max_tokens": 2, "max_token": 2 }), "max_token"),
        (json!({ "messages": user, "max_tokens": 2, "temperature": 1.5 }), "temperature"),
        (json!({ "messages": user, "max_tokens": 2, "tools": [{ "name": "t" }] }), "tools[0].input_schema"),
        (json!({ "messages": user, "max_tokens": 2, "tool_choice": { "type": "any" } }), "tool_choice"),
        // A forced call needs a runtime that applies grammars; this scripted one does not.
        (json!({ "messages": user, "max_tokens": 2, "tools": [{ "name": "t", "input_schema": {} }], "tool_choice": { "type": "any" } }), "tool_choice"),
        (json!({ "messages": user, "max_tokens": 2, "thinking": { "type": "enabled", "budget_tokens": 1024 } }), "thinking"),
        (json!({ "messages": user, "max_tokens": 2, "stop_sequences": [""] }), "stop_sequences"),
        (json!({ "messages": [], "max_tokens": 2 }), "messages"),
        (json!({ "messages": [{ "role": "system", "content": "x" }], "max_tokens": 2 }), "messages[0].role"),
        (json!({ "messages": [{ "role": "user", "content": "x", "name": "n" }], "max_tokens": 2 }), "messages[0].name"),
        (
            json!({ "messages": [{ "role": "user", "content": [{ "type": "tool_use", "id": "t", "name": "f", "input": {} }] }], "max_tokens": 2 }),
            "messages[0].content[0].type",
        ),
        (json!({ "messages": user, "max_tokens": 2, "system": 5 }), "system"),
    ] {
        let (status, text) = post(&app, "/v1/messages", body, &[]).await;
        anthropic_error(status, &text, 400, "invalid_request_error", field);
    }
    let (status, text) = post(&app, "/v1/messages", json!({ "model": "claude-x", "messages": user, "max_tokens": 2 }), &[]).await;
    anthropic_error(status, &text, 404, "not_found_error", "claude-x");
}

#[tokio::test]
async fn api_keys_come_as_bearer_or_x_api_key_and_refusals_keep_each_shape() {
    let keys = ApiKeys::new(&["sekret".to_string()], false);
    let app = test_app(Settings { api_keys: keys, ..Settings::default() });
    let message = json!({ "messages": [{ "role": "user", "content": "Hi" }], "max_tokens": 1 });
    let response = json!({ "input": "Hi", "max_output_tokens": 1 });
    assert_eq!(post(&app, "/v1/messages", message.clone(), &[("x-api-key", "sekret")]).await.0, 200);
    assert_eq!(post(&app, "/v1/messages", message.clone(), &[("authorization", "Bearer sekret")]).await.0, 200);
    assert_eq!(post(&app, "/v1/responses", response.clone(), &[("x-api-key", "sekret")]).await.0, 200);
    assert_eq!(post(&app, "/v1/responses", response.clone(), &[("authorization", "Bearer sekret")]).await.0, 200);
    let (status, text) = post(&app, "/v1/messages", message, &[("x-api-key", "wrong")]).await;
    anthropic_error(status, &text, 401, "authentication_error", "API key");
    let (status, text) = post(&app, "/v1/responses", response, &[]).await;
    assert_eq!(status, 401, "{text}");
    assert_eq!(parse(&text)["error"]["code"], "invalid_api_key");
    let (status, text) = post(&app, "/completion", json!({ "prompt": "Hi", "n_predict": 1 }), &[]).await;
    assert_eq!((status, parse(&text)["error"]["code"].clone()), (401, json!("invalid_api_key")), "{text}");
    assert_eq!(post(&app, "/completion", json!({ "prompt": "Hi", "n_predict": 1 }), &[("x-api-key", "sekret")]).await.0, 200);
}
