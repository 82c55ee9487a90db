//! Compatibility: the official `openai` and `anthropic` Python clients (from PyPI,
//! pinned, in a venv this test creates under the cache dir on first run) against the
//! real engine in-process, and against the real binary behind an API key (Responses,
//! Messages, llama.cpp's `/completion`, the routes without `/v1`, structured output
//! validated by `jsonschema`).

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::served::Served;
use common::{dist_with_index, engine_lock, real_engine, start};
use peregrine_server::app::AppState;

/// The client versions the tests pin.
const PACKAGES: &[&str] = &["openai==3.57.0", "anthropic==2.10.0", "jsonschema==4.26.0"];
/// Model id the server reports.
const MODEL_ID: &str = "SmolLM2-135M-Instruct.Q4_1";

/// `${XDG_CACHE_HOME:-~/.cache}/peregrine/venv-openai` with the pinned clients installed.
fn venv_python() -> PathBuf {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").expect("HOME")).join(".cache"));
    let venv = cache.join("peregrine/venv-openai");
    let python = venv.join("bin/python");
    let marker = venv.join(format!(".installed-{}", PACKAGES.join("+")));
    if !marker.exists() {
        let ok = Command::new("python3").args(["-m", "venv"]).arg(&venv).status().map(|s| s.success()).unwrap_or(false);
        assert!(ok, "python3 -m venv failed: install python3 and python3-venv");
        let ok = Command::new(venv.join("bin/pip")).args(["install", "-q"]).args(PACKAGES).status().map(|s| s.success()).unwrap_or(false);
        assert!(ok, "pip install {PACKAGES:?} failed (needs PyPI)");
        std::fs::write(&marker, "").unwrap();
    }
    python
}

#[tokio::test]
async fn the_official_openai_client_works_against_v1() {
    let python = tokio::task::spawn_blocking(venv_python).await.unwrap();
    let _turn = engine_lock().await;
    let server = start(AppState::new(dist_with_index()).with_engine(real_engine(), MODEL_ID)).await;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/openai_client.py");
    let base = server.base.clone();
    let out = tokio::task::spawn_blocking(move || Command::new(python).arg(script).arg(base).arg(MODEL_ID).output())
        .await
        .unwrap()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the openai client checks failed:\n{stdout}\n{stderr}");
    eprintln!("{stdout}");
}

#[tokio::test]
async fn the_official_clients_speak_responses_messages_and_llama_routes_to_the_binary() {
    const KEY: &str = "agent-test-key";
    let python = tokio::task::spawn_blocking(venv_python).await.unwrap();
    let server = Served::start(1024, &["--api-key", KEY]).await;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/agent_clients.py");
    let base = server.base.clone();
    let out = tokio::task::spawn_blocking(move || Command::new(python).arg(script).arg(base).arg(MODEL_ID).arg(KEY).output())
        .await
        .unwrap()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the client checks failed:\n{stdout}\n{stderr}");
    eprintln!("{stdout}");
}
