//! A Laneformer checkpoint (the engine's tiny random-weight fixture, eight lanes, a
//! `lane` head, windowed layers) served on a real port with the CPU engine: the
//! playground stream and the OpenAI completions and chat endpoints, streamed and not.

mod common;

use std::path::PathBuf;

use common::{dist_with_index, start, SseReader};
use peregrine_engine::EngineHandle;
use peregrine_server::app::AppState;
use serde_json::{json, Value};

const MODEL: &str = "lane-head-lane-norms-window";

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../engine/tests/fixtures/laneformer").join(MODEL)
}

fn engine() -> EngineHandle {
    let path = fixture();
    EngineHandle::start(
        move || {
            peregrine_engine::model::build_generator(peregrine_engine::model::load_model(&path)?, &peregrine_engine::EngineOptions::cpu())
        },
        2,
    )
    .expect("the Laneformer fixture loads")
}

#[tokio::test]
async fn a_laneformer_streams_in_the_playground_api_and_the_openai_api() {
    let server = start(AppState::new(dist_with_index()).with_engine(engine(), MODEL)).await;
    let client = reqwest::Client::new();
    let post = |path: &str, body: Value| client.post(server.url(path)).json(&body).send();

    let res =
        post("/api/generate", json!({ "prompt": "the cat sat on", "max_tokens": 12, "temperature": 0, "ignore_eos": true })).await.unwrap();
    assert_eq!(res.status(), 200);
    let events = SseReader::new(res).collect().await;
    let names: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert_eq!((names.first(), names.last()), (Some(&"started"), Some(&"done")), "{names:?}");
    let streamed: String = events.iter().filter(|e| e.event == "token").map(|e| e.json()["text"].as_str().unwrap().to_string()).collect();
    let done = events.last().unwrap().json();
    assert_eq!(done["usage"]["completion_tokens"].as_u64(), Some(12), "{done}");

    // The same greedy run through /v1/completions, whole and streamed.
    let body = json!({ "model": MODEL, "prompt": "the cat sat on", "max_tokens": 12, "temperature": 0, "ignore_eos": true });
    let full: Value = post("/v1/completions", body.clone()).await.unwrap().json().await.unwrap();
    assert_eq!(full["choices"][0]["text"].as_str(), Some(streamed.as_str()), "{full}");
    let mut chunked = body.clone();
    chunked["stream"] = true.into();
    let res = post("/v1/completions", chunked).await.unwrap();
    let text: String = SseReader::new(res)
        .collect()
        .await
        .iter()
        .filter(|e| e.data != "[DONE]")
        .map(|e| e.json()["choices"][0]["text"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(text, streamed);

    // Chat through the checkpoint's own template.
    let chat = json!({ "model": MODEL, "messages": [{ "role": "user", "content": "hi there" }], "max_tokens": 5, "temperature": 0 });
    let reply: Value = post("/v1/chat/completions", chat).await.unwrap().json().await.unwrap();
    assert_eq!(reply["object"], "chat.completion", "{reply}");
    assert!(reply["usage"]["prompt_tokens"].as_u64().unwrap() > 4, "{reply}");
}
