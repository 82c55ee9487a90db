//! Compatibility: the official `openai` Python client (from PyPI, pinned, in a venv
//! this test creates under the cache dir on first run) against the real engine.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{dist_with_index, engine_lock, real_engine, start};
use peregrine_server::app::AppState;

/// The client version the test pins.
const OPENAI_PACKAGE: &str = "openai==3.57.0";
/// Model id the server reports.
const MODEL_ID: &str = "SmolLM2-135M-Instruct.Q4_1";

/// `${XDG_CACHE_HOME:-~/.cache}/peregrine/venv-openai` with the pinned client installed.
fn venv_python() -> PathBuf {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").expect("HOME")).join(".cache"));
    let venv = cache.join("peregrine/venv-openai");
    let python = venv.join("bin/python");
    let marker = venv.join(format!(".installed-{OPENAI_PACKAGE}"));
    if !marker.exists() {
        let ok = Command::new("python3").args(["-m", "venv"]).arg(&venv).status().map(|s| s.success()).unwrap_or(false);
        assert!(ok, "python3 -m venv failed: install python3 and python3-venv");
        let ok = Command::new(venv.join("bin/pip")).args(["install", "-q", OPENAI_PACKAGE]).status().map(|s| s.success()).unwrap_or(false);
        assert!(ok, "pip install {OPENAI_PACKAGE} failed (needs PyPI)");
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
