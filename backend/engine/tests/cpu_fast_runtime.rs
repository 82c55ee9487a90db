//! The fast CPU runtime on the tiny transformers fixtures (float weights: Llama with
//! GQA, llama3 rope scaling, Qwen2 biases, tied and untied heads) against the
//! transformers logits, and its invariances: batch size, thread count and
//! instruction set change nothing, decode equals batched scoring bit for bit.

use std::path::{Path, PathBuf};

use peregrine_engine::cpu::act_quant::ActPrecision;
use peregrine_engine::cpu::fast_runtime::{FastOptions, FastRuntime};
use peregrine_engine::cpu::isa::Isa;
use peregrine_engine::hf::load_hf_dir;
use peregrine_engine::lab::runs::{collect, ids};
use peregrine_engine::runtime::Runtime;
use peregrine_engine::sampling::SamplingParams;
use serde::Deserialize;

/// Largest allowed ‖Δ‖/‖ref‖ against float32 (transformers, the reference runtime):
/// float weights, 15-bit activations, and keys and values stored as f16 (an 11-bit
/// significand), which alone puts these fixtures' logits 1.5–4·10⁻⁴ off.
const MAX_REL_ERR: f64 = 1e-3;
const FIXTURES: [&str; 4] = ["llama-gqa-untied", "llama3-scaled-tied", "qwen2-bias-untied", "qwen2-tied"];

#[derive(Deserialize)]
struct Reference {
    prompt_ids: Vec<u32>,
    greedy_prompt_len: usize,
    greedy_ids: Vec<u32>,
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf").join(name)
}

fn read_f32(path: &Path) -> Vec<f32> {
    std::fs::read(path).unwrap().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

fn runtime(name: &str, threads: usize, isa: Isa, prefill_batch: usize) -> FastRuntime {
    let (config, weights) = load_hf_dir(&fixture(name)).unwrap();
    FastRuntime::new(&config, &weights, FastOptions { threads, isa, prefill_batch, act_precision: ActPrecision::Int16 }).unwrap()
}

fn greedy(rt: &mut FastRuntime, prompt: &[u32], n: usize) -> Vec<u32> {
    ids(&collect(rt, prompt, n, &SamplingParams::default(), &[], 0).unwrap().0)
}

#[test]
fn float_models_match_transformers() {
    for name in FIXTURES {
        let reference: Reference = serde_json::from_str(&std::fs::read_to_string(fixture(name).join("reference.json")).unwrap()).unwrap();
        let expected = read_f32(&fixture(name).join("ref_logits.f32"));
        let mut rt = runtime(name, 2, Isa::detect(None), 5);
        let got: Vec<f32> = rt.score(&reference.prompt_ids).unwrap().concat();
        assert_eq!(got.len(), expected.len());
        let diff: f64 = got.iter().zip(&expected).map(|(a, b)| ((a - b) as f64).powi(2)).sum::<f64>().sqrt();
        let norm: f64 = expected.iter().map(|b| (*b as f64).powi(2)).sum::<f64>().sqrt();
        eprintln!("{name}: ‖Δ‖/‖ref‖ = {:.2e}", diff / norm);
        assert!(diff / norm <= MAX_REL_ERR, "{name}: relative error {:.3e}", diff / norm);
        let prompt = &reference.prompt_ids[..reference.greedy_prompt_len];
        assert_eq!(greedy(&mut rt, prompt, reference.greedy_ids.len()), reference.greedy_ids, "{name}: greedy tokens");
    }
}

#[test]
fn batch_size_threads_and_isa_change_nothing() {
    let name = "qwen2-bias-untied";
    let reference: Reference = serde_json::from_str(&std::fs::read_to_string(fixture(name).join("reference.json")).unwrap()).unwrap();
    let tokens = &reference.prompt_ids;
    let base = runtime(name, 1, Isa::Portable, 64).score(tokens).unwrap();
    for isa in Isa::available() {
        for (threads, batch) in [(1, 1), (2, 3), (3, 64)] {
            let got = runtime(name, threads, isa, batch).score(tokens).unwrap();
            assert!(got == base, "{isa:?}, {threads} threads, batches of {batch}: logits differ");
        }
    }
}

#[test]
fn decoding_token_by_token_equals_scoring_the_sequence() {
    let name = "llama-gqa-untied";
    let mut rt = runtime(name, 2, Isa::detect(None), 16);
    let prompt = [3u32, 17, 42, 9];
    let ids = greedy(&mut rt, &prompt, 12);
    let mut all = prompt.to_vec();
    all.extend(&ids[..ids.len() - 1]);
    let scored = rt.score(&all).unwrap();
    for (i, &id) in ids.iter().enumerate() {
        let row = &scored[prompt.len() - 1 + i];
        assert_eq!(peregrine_engine::lab::logits::argmax(row), id, "step {i}");
    }
}

#[test]
fn bad_tokens_and_overlong_prompts_are_errors() {
    let mut rt = runtime("qwen2-tied", 2, Isa::detect(None), 8);
    assert!(rt.score(&[5, 100_000]).is_err());
    assert!(rt.score(&[]).is_err());
    let long = vec![1u32; rt.config().max_context + 1];
    assert!(rt.score(&long).is_err());
    // Still usable afterwards.
    assert_eq!(rt.score(&[5, 6]).unwrap().len(), 2);
}

#[test]
fn heads_that_do_not_align_with_row_groups_match_the_reference() {
    use peregrine_engine::cpu::reference::{KvCache, ReferenceModel};
    use peregrine_engine::lab::synthetic::{preset, synthetic_weights};
    // 6 heads of 8 (a head is half a 16-row group), hidden 48 (not whole 32-blocks).
    let mut config = preset("smollm2-135m").unwrap();
    (config.vocab_size, config.hidden_size, config.intermediate_size, config.num_layers) = (100, 48, 80, 2);
    (config.num_heads, config.num_kv_heads, config.head_dim, config.max_context) = (6, 2, 8, 64);
    let weights = synthetic_weights(&config, 7);
    let tokens: Vec<u32> = (0..20).map(|i| (i * 37 % 100) as u32).collect();
    let reference = ReferenceModel::new(&config, &weights).unwrap().forward(&mut KvCache::new(&config, 64), &tokens, true).unwrap();
    for (threads, batch) in [(1, 20), (2, 3)] {
        let mut rt = FastRuntime::new(
            &config,
            &weights,
            FastOptions { threads, isa: Isa::detect(None), prefill_batch: batch, act_precision: ActPrecision::Int16 },
        )
        .unwrap();
        let got = rt.score(&tokens).unwrap();
        let d2: f64 = got.iter().flatten().zip(reference.iter().flatten()).map(|(a, b)| ((a - b) as f64).powi(2)).sum();
        let r2: f64 = reference.iter().flatten().map(|b| (*b as f64).powi(2)).sum();
        assert!((d2 / r2).sqrt() < MAX_REL_ERR, "{threads} threads, batch {batch}: relative error {:.2e}", (d2 / r2).sqrt());
    }
}
