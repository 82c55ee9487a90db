//! The float32 reference forward pass against Hugging Face transformers on tiny
//! random-weight models (fixtures from scripts/fixtures/make_hf_fixtures.py):
//! teacher-forced logits and greedy tokens.

use std::path::{Path, PathBuf};

use peregrine_engine::cpu::reference::{KvCache, ReferenceModel};
use peregrine_engine::hf::load_hf_dir;
use peregrine_engine::lab::logits::{argmax, rel_err};
use serde::Deserialize;

/// Largest allowed ‖Δ‖/‖ref‖ of the logits.
const MAX_REL_ERR: f64 = 1e-4;
/// Argmax must agree wherever the reference's top-2 gap exceeds this.
const MIN_DECISIVE_GAP: f32 = 1e-4;

#[derive(Deserialize)]
struct Reference {
    prompt_ids: Vec<u32>,
    logits_shape: Vec<usize>,
    argmax: Vec<u32>,
    top2_gap: Vec<f32>,
    greedy_prompt_len: usize,
    greedy_ids: Vec<u32>,
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf").join(name)
}

fn read_f32(path: &Path) -> Vec<f32> {
    std::fs::read(path).unwrap().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

fn check(name: &str) {
    let dir = fixture(name);
    let reference: Reference = serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap()).unwrap();
    let expected = read_f32(&dir.join("ref_logits.f32"));
    let (config, weights) = load_hf_dir(&dir).unwrap_or_else(|e| panic!("{name}: {e}"));
    let model = ReferenceModel::new(&config, &weights).unwrap();
    let vocab = reference.logits_shape[1];
    assert_eq!(config.vocab_size, vocab);

    let mut cache = KvCache::new(&config, config.max_context);
    let logits = model.forward(&mut cache, &reference.prompt_ids, true).unwrap();
    let got: Vec<f32> = logits.concat();
    assert_eq!(got.len(), expected.len());
    let rel = rel_err(&got, &expected);
    eprintln!("{name}: ‖Δ‖/‖ref‖ = {rel:.2e} over {} positions", logits.len());
    assert!(rel <= MAX_REL_ERR, "{name}: relative error {rel:.3e} > {MAX_REL_ERR:e}");
    for (pos, row) in logits.iter().enumerate() {
        if reference.top2_gap[pos] > MIN_DECISIVE_GAP {
            assert_eq!(argmax(row), reference.argmax[pos], "{name}: argmax differs at position {pos}");
        }
    }

    // Greedy continuation of the first tokens, one token at a time through the cache.
    let mut cache = KvCache::new(&config, config.max_context);
    let prompt = &reference.prompt_ids[..reference.greedy_prompt_len];
    let mut last = model.forward(&mut cache, prompt, false).unwrap().pop().unwrap();
    let mut greedy = Vec::new();
    for _ in 0..reference.greedy_ids.len() {
        let next = argmax(&last);
        greedy.push(next);
        last = model.forward(&mut cache, &[next], false).unwrap().pop().unwrap();
    }
    assert_eq!(greedy, reference.greedy_ids, "{name}: greedy tokens differ");
}

#[test]
fn llama_gqa_untied_sharded() {
    check("llama-gqa-untied");
}

#[test]
fn llama3_rope_scaling_tied_mqa() {
    check("llama3-scaled-tied");
}

#[test]
fn qwen2_with_biases_untied() {
    check("qwen2-bias-untied");
}

#[test]
fn qwen2_tied() {
    check("qwen2-tied");
}

#[test]
fn bisecting_by_layer_changes_the_output() {
    // The layer switch really stops early: fewer layers give different logits.
    let dir = fixture("qwen2-tied");
    let (config, weights) = load_hf_dir(&dir).unwrap();
    let mut model = ReferenceModel::new(&config, &weights).unwrap();
    let full = model.forward(&mut KvCache::new(&config, 8), &[5, 6, 7], false).unwrap();
    model.layer_limit = 1;
    let one = model.forward(&mut KvCache::new(&config, 8), &[5, 6, 7], false).unwrap();
    assert_ne!(full, one);
}
