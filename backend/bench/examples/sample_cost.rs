//! What choosing the next token costs on the engine thread, per sampling setting, over
//! the real logits of a code completion (the fast CPU runtime greedy-decodes a Python
//! prompt and keeps every step's logits; each setting then samples from all of them).
//!
//! usage: sample_cost MODEL.gguf [STEPS]   (STEPS: decoded positions, default 64)
use std::time::Instant;

use peregrine_engine::cpu::fast_runtime::{FastOptions, FastRuntime};
use peregrine_engine::runtime::{BatchDecode, SlotTokens};
use peregrine_engine::sampling::{sample, SamplingParams};
use peregrine_engine::tokenizer::Tokenizer;

const PROMPT: &str = "import json\nfrom dataclasses import dataclass\n\n@dataclass\nclass Item:\n    name: str\n    quantity: int\n\ndef load_items(path: str) -> list[Item]:\n    \"\"\"Read the items from a JSON file.\"\"\"\n";

/// Timed passes over the collected logits per setting (after one untimed pass).
const PASSES: usize = 5;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        eprintln!("usage: sample_cost MODEL.gguf [STEPS]");
        std::process::exit(2);
    };
    let steps: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(64);
    let (file, config, weights) = peregrine_engine::gguf::load_gguf(std::path::Path::new(path)).expect("the model loads");
    let tokenizer = Tokenizer::from_gguf(&file).expect("the tokenizer loads");
    let prompt = tokenizer.encode(PROMPT, false).expect("the prompt encodes");
    let mut rt = FastRuntime::new(&config, &weights, FastOptions::defaults()).expect("the runtime starts");
    rt.open(0, prompt.len() + steps + 1, &prompt, false).expect("open");
    rt.step(&[SlotTokens { slot: 0, tokens: &prompt, logit_rows: 1 }]).expect("prompt");
    let greedy = SamplingParams::default();
    let mut all_logits = Vec::with_capacity(steps);
    for _ in 0..steps {
        let logits = rt.logits(0).to_vec();
        let next = sample(&logits, &greedy, &[], 0, 0).id;
        all_logits.push(logits);
        rt.step(&[SlotTokens { slot: 0, tokens: &[next], logit_rows: 1 }]).expect("step");
    }
    let with = |temperature: f32, top_k: usize, top_p: f32, min_p: f32| SamplingParams {
        temperature,
        top_k,
        top_p,
        min_p,
        seed: 7,
        ..SamplingParams::default()
    };
    let settings = [
        ("greedy", greedy.clone()),
        ("T 1 (OpenAI default)", with(1.0, 0, 1.0, 0.0)),
        ("T 0.7, top-p 0.95", with(0.7, 0, 0.95, 0.0)),
        ("T 0.8, top-k 40, top-p 0.95", with(0.8, 40, 0.95, 0.0)),
        ("T 1, min-p 0.05", with(1.0, 0, 1.0, 0.05)),
        ("T 1.5", with(1.5, 0, 1.0, 0.0)),
    ];
    println!("{} logits of {} tokens; µs per sampled token (median of {PASSES} passes)", all_logits.len(), config.vocab_size);
    for (name, params) in settings {
        let mut times: Vec<f64> = (0..=PASSES)
            .map(|_| {
                let t = Instant::now();
                for (step, logits) in all_logits.iter().enumerate() {
                    std::hint::black_box(sample(logits, &params, &[], step as u64, 0));
                }
                t.elapsed().as_secs_f64() * 1e6 / all_logits.len() as f64
            })
            .skip(1)
            .collect();
        times.sort_by(f64::total_cmp);
        println!("{name:>28}: {:7.1} µs", times[PASSES / 2]);
    }
}
