//! The default model and the llama.cpp forward-pass fixtures
//! (tests/fixtures/llamacpp/forward.json), shared by the fidelity tests.
// Each test crate that includes `common` uses only part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The forward-pass fixture: code prompts scored by llama.cpp.
#[derive(Deserialize)]
pub struct ForwardFixture {
    pub prompts: Vec<PromptCase>,
}

/// One prompt: its ids, llama.cpp's teacher-forced argmax and greedy continuation.
#[derive(Deserialize)]
pub struct PromptCase {
    pub name: String,
    pub tokens: Vec<u32>,
    pub argmax: Vec<u32>,
    pub top2_gap: Vec<f32>,
    pub greedy: Vec<u32>,
    pub greedy_rescored_gap: Vec<f32>,
}

/// Reads the committed fixture.
pub fn forward_fixture() -> ForwardFixture {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llamacpp/forward.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `$PEREGRINE_DEFAULT_MODEL`, else the cached default model; fails with what to run when absent.
pub fn default_model() -> PathBuf {
    let path = std::env::var_os("PEREGRINE_DEFAULT_MODEL").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").expect("HOME"))
            .join(".cache/peregrine/models")
            .join(peregrine_engine::model::DEFAULT_MODEL_FILE)
    });
    assert!(path.exists(), "default model missing at {}: run scripts/fetch-model.sh", path.display());
    path
}
