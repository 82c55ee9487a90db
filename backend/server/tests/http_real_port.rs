//! The application on a real TCP port, driven by a real HTTP client: health, static
//! files, and share links that survive a server restart (a real SQLite file).

mod common;

use common::{dist_with_index, start, temp_dir};
use peregrine_api::playground::{ChatTurn, GenerationParams, Mode, Share, ShareCreated, ShareRequest, SharedRun, Surroundings};
use peregrine_api::{FinishReason, Timings};
use peregrine_server::app::AppState;
use peregrine_server::share_store::ShareStore;
use serde_json::json;

#[tokio::test]
async fn health_answers_ok_json() {
    let server = start(AppState::new(dist_with_index())).await;
    let res = reqwest::get(server.url("/health")).await.unwrap();
    assert_eq!(res.status(), 200);
    let body: peregrine_api::Health = res.json().await.unwrap();
    assert_eq!(body.status, "ok");
}

#[tokio::test]
async fn static_files_and_spa_fallback() {
    let server = start(AppState::new(dist_with_index())).await;
    let asset = reqwest::get(server.url("/app-abc123.js")).await.unwrap();
    assert_eq!(asset.status(), 200);
    assert_eq!(asset.text().await.unwrap(), "console.log('asset')");
    let deep = reqwest::get(server.url("/s/unknown-share")).await.unwrap();
    assert_eq!(deep.status(), 200);
    assert!(deep.text().await.unwrap().contains("Peregrine test page"));
}

fn sample_share() -> ShareRequest {
    ShareRequest {
        prompt: "def fib(n):\n    \"\"\"Fibonacci, «unicode» ✓\"\"\"".into(),
        mode: Mode::Complete,
        params: GenerationParams {
            max_tokens: 64,
            temperature: 0.7,
            top_p: 0.9,
            top_k: 40,
            seed: Some(42),
            stop: vec!["\n\n".into()],
            ignore_eos: false,
        },
        run: Some(SharedRun {
            output: "\n    if n < 2:\n        return n".into(),
            finish_reason: FinishReason::Stop,
            timings: Timings {
                prompt_n: 12,
                prompt_ms: 30.5,
                prompt_per_second: 393.4,
                predicted_n: 14,
                predicted_ms: 70.25,
                predicted_per_second: 185.1,
                ttft_ms: 30.5,
                cache_n: 0,
                ..Timings::default()
            },
            backend: "cuda".into(),
            device: "1× H200 · SmolLM2-135M".into(),
        }),
        around: Surroundings::default(),
    }
}

/// A chat share carrying its conversation: the system prompt and two earlier turns.
fn conversation_share() -> ShareRequest {
    let turn = |user: &str, assistant: &str| ChatTurn { user: user.into(), assistant: assistant.into(), timings: None };
    ShareRequest {
        prompt: "And in Rust?".into(),
        mode: Mode::Chat,
        around: Surroundings {
            system: "You answer in one line.".into(),
            history: vec![turn("What is 2 + 2?", "4."), turn("Write it in Python.", "`print(2 + 2)`")],
            suffix: String::new(),
        },
        ..sample_share()
    }
}

#[tokio::test]
async fn shares_round_trip_and_survive_a_restart() {
    let data = temp_dir("shares");
    let client = reqwest::Client::new();
    let server = start(AppState::new(dist_with_index()).with_shares(ShareStore::open(&data).unwrap())).await;
    let res = client.post(server.url("/api/shares")).json(&sample_share()).send().await.unwrap();
    assert_eq!(res.status(), 201);
    let location = res.headers()["location"].to_str().unwrap().to_string();
    let created: ShareCreated = res.json().await.unwrap();
    assert_eq!(created.url, format!("/s/{}", created.id));
    assert_eq!(location, created.url);
    assert!(created.id.len() >= 11, "ids carry at least 60 random bits");
    // A share without a run, with defaults filled in.
    let res = client.post(server.url("/api/shares")).json(&json!({ "prompt": "hi", "mode": "chat" })).send().await.unwrap();
    assert_eq!(res.status(), 201);
    let minimal: ShareCreated = res.json().await.unwrap();
    assert_ne!(minimal.id, created.id);
    server.stop().await;

    // A new server process on the same data dir: a fresh store over the same file.
    let server = start(AppState::new(dist_with_index()).with_shares(ShareStore::open(&data).unwrap())).await;
    let res = client.get(server.url(&format!("/api/shares/{}", created.id))).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let share: Share = res.json().await.unwrap();
    assert_eq!(share.id, created.id);
    assert_eq!(share.share, sample_share());
    assert!(share.created_at > 1_600_000_000);
    let share: Share = client.get(server.url(&format!("/api/shares/{}", minimal.id))).send().await.unwrap().json().await.unwrap();
    assert_eq!(share.share.mode, Mode::Chat);
    assert_eq!(share.share.params, GenerationParams::default());
    assert!(share.share.run.is_none());

    // A conversation and an infill keep what surrounds their prompt.
    let mut fill = sample_share();
    fill.mode = Mode::Infill;
    fill.around.suffix = "\n    return a\n".into();
    for sent in [conversation_share(), fill] {
        let created: ShareCreated = client.post(server.url("/api/shares")).json(&sent).send().await.unwrap().json().await.unwrap();
        let back: Share = client.get(server.url(&format!("/api/shares/{}", created.id))).send().await.unwrap().json().await.unwrap();
        assert_eq!(back.share, sent);
    }

    for unknown in ["AAAAAAAAAAAA", "nope", "..%2F..%2Fetc%2Fpasswd"] {
        let res = client.get(server.url(&format!("/api/shares/{unknown}"))).send().await.unwrap();
        assert_eq!(res.status(), 404, "{unknown}");
        let err: peregrine_api::playground::ApiError = res.json().await.unwrap();
        assert_eq!(err.code, "not_found");
    }
    server.stop().await;
}

#[tokio::test]
async fn bad_shares_are_400_or_413() {
    let data = temp_dir("shares-bad");
    let client = reqwest::Client::new();
    let server = start(AppState::new(dist_with_index()).with_shares(ShareStore::open(&data).unwrap())).await;
    let post = |body: serde_json::Value| client.post(server.url("/api/shares")).json(&body).send();
    assert_eq!(post(json!({ "prompt": "x", "params": { "temperature": 7 } })).await.unwrap().status(), 400);
    assert_eq!(post(json!({ "prompt": 3 })).await.unwrap().status(), 400);
    assert_eq!(post(json!({ "prompt": "x", "run": { "output": "y" } })).await.unwrap().status(), 400);
    let mut big = sample_share();
    big.run.as_mut().unwrap().output = "z".repeat(peregrine_server::config::MAX_SHARE_OUTPUT_BYTES + 1);
    assert_eq!(client.post(server.url("/api/shares")).json(&big).send().await.unwrap().status(), 413);
    big.run = None;
    big.prompt = "p".repeat(peregrine_api::playground::MAX_PROMPT_BYTES + 1);
    assert_eq!(client.post(server.url("/api/shares")).json(&big).send().await.unwrap().status(), 413);
    // The conversation counts with the prompt; its fields belong to chat mode.
    let mut long = conversation_share();
    long.around.history[0].user = "u".repeat(peregrine_api::playground::MAX_PROMPT_BYTES);
    assert_eq!(client.post(server.url("/api/shares")).json(&long).send().await.unwrap().status(), 413);
    // An empty prompt, or figures no run can have, are refused naming the field.
    for (body, field) in [
        (json!({ "prompt": "  ", "mode": "chat" }), "prompt"),
        (
            json!({ "prompt": "x", "run": { "output": "y", "finish_reason": "stop", "backend": "cpu", "device": "",
            "timings": { "prompt_n": 1, "prompt_ms": -1.0, "prompt_per_second": 1.0, "predicted_n": 1,
                         "predicted_ms": 1.0, "predicted_per_second": 1.0, "ttft_ms": 1.0 } } }),
            "run.timings",
        ),
    ] {
        let res = post(body).await.unwrap();
        assert_eq!(res.status(), 400);
        let e: serde_json::Value = res.json().await.unwrap();
        assert!(e["message"].as_str().unwrap().contains(if field == "prompt" { "prompt" } else { "timings" }), "{e}");
    }
    let mut misplaced = conversation_share();
    misplaced.mode = Mode::Complete;
    assert_eq!(client.post(server.url("/api/shares")).json(&misplaced).send().await.unwrap().status(), 400);
    server.stop().await;
}
