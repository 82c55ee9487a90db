//! How far each way of running a GGUF model lands from the float32 reference on the
//! same dequantized weights: the fast CPU runtime with 16-bit and with 8-bit
//! activations and, given its logits (`scripts/bench/llamacpp_logits.py`), llama.cpp.
//! Over the teacher-forced positions of the forward-pass fixture's prompts it prints
//! ‖Δ‖/‖ref‖ over all positions, the worst position's, and top-1 agreement: the
//! metric and the bound (10⁻² at the worst position) of `cpu_fast_default_model.rs`.
//!
//! usage: fidelity MODEL.gguf [LLAMACPP_LOGITS.f32]
use std::path::Path;

use peregrine_engine::cpu::act_quant::ActPrecision;
use peregrine_engine::cpu::fast_runtime::{FastOptions, FastRuntime};
use peregrine_engine::cpu::reference::{KvCache, ReferenceModel};
use peregrine_engine::lab::logits::argmax;
use peregrine_engine::runtime::Runtime;
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    prompts: Vec<Prompt>,
}

#[derive(Deserialize)]
struct Prompt {
    tokens: Vec<u32>,
}

/// Distance of one way's logits from the reference's, accumulated over positions.
#[derive(Default)]
struct Distance {
    d2: f64,
    r2: f64,
    worst: f64,
    top1: usize,
    positions: usize,
}

impl Distance {
    fn add(&mut self, got: &[f32], reference: &[f32]) {
        let d2: f64 = got.iter().zip(reference).map(|(a, b)| f64::from(a - b).powi(2)).sum();
        let r2: f64 = reference.iter().map(|b| f64::from(*b).powi(2)).sum();
        self.d2 += d2;
        self.r2 += r2;
        self.worst = self.worst.max((d2 / r2).sqrt());
        self.top1 += usize::from(argmax(got) == argmax(reference));
        self.positions += 1;
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(model) = args.get(1) else {
        eprintln!("usage: fidelity MODEL.gguf [LLAMACPP_LOGITS.f32]");
        std::process::exit(2);
    };
    let fixture_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine/tests/fixtures/llamacpp/forward.json");
    let fixture: Fixture =
        serde_json::from_str(&std::fs::read_to_string(fixture_path).expect("the fixture reads")).expect("the fixture parses");
    let (_, config, weights) = peregrine_engine::gguf::load_gguf(Path::new(model)).expect("the model loads");
    let reference = ReferenceModel::new(&config, &weights).expect("the reference runtime starts");
    let fast = |act_precision| {
        FastRuntime::new(&config, &weights, FastOptions { act_precision, ..FastOptions::defaults() }).expect("the fast runtime starts")
    };
    let mut ways: Vec<(&str, Box<dyn FnMut(&[u32]) -> Vec<Vec<f32>>>)> = Vec::new();
    for (name, precision) in
        [("fast runtime, 16-bit activations", ActPrecision::Int16), ("fast runtime, 8-bit activations", ActPrecision::Int8)]
    {
        let mut rt = fast(precision);
        ways.push((name, Box::new(move |tokens: &[u32]| rt.score(tokens).expect("scoring"))));
    }
    if let Some(path) = args.get(2) {
        let bytes = std::fs::read(path).expect("llama.cpp's logits read");
        let rows: Vec<Vec<f32>> = bytes
            .chunks_exact(4 * config.vocab_size)
            .map(|row| row.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
            .collect();
        let mut rows = rows.into_iter();
        ways.push(("llama.cpp", Box::new(move |tokens: &[u32]| rows.by_ref().take(tokens.len()).collect())));
    }
    let mut distances: Vec<Distance> = ways.iter().map(|_| Distance::default()).collect();
    for prompt in &fixture.prompts {
        let refs = reference.forward(&mut KvCache::new(&config, 1024), &prompt.tokens, true).expect("the reference runs");
        for ((_, way), distance) in ways.iter_mut().zip(&mut distances) {
            let got = way(&prompt.tokens);
            assert_eq!(got.len(), refs.len(), "logit rows of a prompt");
            for (g, r) in got.iter().zip(&refs) {
                distance.add(g, r);
            }
        }
    }
    println!("| against float32 | all positions | worst position | top-1 vs reference |");
    println!("| --- | ---: | ---: | ---: |");
    for ((name, _), d) in ways.iter().zip(&distances) {
        println!("| {name} | {:.1e} | {:.1e} | {}/{} |", (d.d2 / d.r2).sqrt(), d.worst, d.top1, d.positions);
    }
}
