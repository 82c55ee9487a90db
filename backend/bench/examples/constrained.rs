//! Constrained decoding's cost: chat prompts that ask for JSON decoded greedy on the fast
//! CPU runtime, free and under a JSON schema (llguidance's mask before every token),
//! alternately and [`REPEATS`] times each, the fastest run of each kept; decode tok/s
//! of each (tokens after the first over the time from the first token to the last) and
//! their ratio, plus the one-time costs: the compiler over the vocabulary and the
//! schema's compilation. No drafting on either side, so the difference is the mask.
//!
//! usage: constrained MODEL.gguf [THREADS] [MAX_TOKENS]

use std::time::Instant;

use peregrine_engine::runtime::{Cancel, DecodeJob, Runtime};
use peregrine_engine::sampling::SamplingParams;
use peregrine_engine::speculative::DraftPlan;
use peregrine_engine::{build_generator, load_model, ChatMessage, Constraint, EngineOptions, GrammarSource, Prompt};
use serde_json::json;

/// Tokens per run, unless told.
const MAX_TOKENS: usize = 192;
/// Runs of each prompt and mode.
const REPEATS: usize = 3;

/// Prompts whose answers run long under the schema (lists of records).
const PROMPTS: &[&str] = &[
    "List twenty books with their title, author and year, as JSON.",
    "Give me a JSON list of fifteen cities with their country and population.",
    "Write a JSON inventory of a kitchen: every item with its name and count.",
    "Describe the planets of the solar system as JSON records.",
];

/// One decode: tokens after the first, and seconds from the first token to the last.
fn decode(rt: &mut dyn Runtime, prompt: &[u32], max_tokens: usize, stops: &[u32], constraint: Option<&Constraint>) -> (usize, f64, Vec<u32>) {
    let sampling = SamplingParams::default();
    let job = DecodeJob {
        prompt,
        max_tokens,
        sampling: &sampling,
        stop_tokens: stops,
        top_logprobs: 0,
        cancel: Cancel::NEVER,
        reuse_prefix: false,
        draft: DraftPlan::OFF,
        constraint,
    };
    let (ids, decode_s) = peregrine_engine::lab::runs::timed(rt, &job).expect("the run succeeds");
    (ids.len().saturating_sub(1), decode_s, ids)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        eprintln!("usage: constrained MODEL.gguf [THREADS] [MAX_TOKENS]");
        std::process::exit(2);
    };
    let threads: usize = args.get(2).and_then(|t| t.parse().ok()).unwrap_or(2);
    let max_tokens: usize = args.get(3).and_then(|t| t.parse().ok()).unwrap_or(MAX_TOKENS);
    let mut options = EngineOptions::cpu();
    options.cpu.threads = Some(threads);
    let files = load_model(std::path::Path::new(path)).expect("the model loads");
    let (mut rt, text) = build_generator(files, &options).expect("the runtime starts").into_parts();
    let stops = text.tokenizer.as_ref().map(|t| t.eos_ids().to_vec()).unwrap_or_default();
    let record = json!({
        "type": "object",
        "properties": { "name": { "type": "string" }, "detail": { "type": "string" }, "number": { "type": "integer" } },
        "required": ["name", "detail", "number"],
        "additionalProperties": false
    });
    let schema = GrammarSource::JsonSchema(json!({
        "type": "object",
        "properties": { "records": { "type": "array", "items": record } },
        "required": ["records"],
        "additionalProperties": false
    }));
    let t = Instant::now();
    text.constraint(&GrammarSource::JsonObject).expect("json_object compiles");
    let first_ms = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    let constraint = text.constraint(&schema).expect("the schema compiles");
    let compile_ms = t.elapsed().as_secs_f64() * 1e3;
    println!("{} · greedy, no drafts, {max_tokens} tokens at most", rt.backend().devices.join(", "));
    println!("one-time: compiler over the vocabulary + json_object {first_ms:.1} ms; this schema {compile_ms:.1} ms");
    println!("{:<72} {:>7} {:>9} {:>7} {:>9} {:>6}", "prompt", "free n", "free t/s", "json n", "json t/s", "ratio");
    let (mut free_n, mut free_s, mut json_n, mut json_s) = (0usize, 0.0f64, 0usize, 0.0f64);
    for prompt in PROMPTS {
        let ids = text.prompt_ids(&Prompt::Chat(vec![ChatMessage::new("user", *prompt)])).expect("the prompt renders");
        let (mut best_free, mut best_json) = ((0, f64::INFINITY), (0, f64::INFINITY));
        for _ in 0..REPEATS {
            let (n, s, _) = decode(rt.as_mut(), &ids, max_tokens, &stops, None);
            if s < best_free.1 {
                best_free = (n, s);
            }
            let (n, s, out) = decode(rt.as_mut(), &ids, max_tokens, &stops, Some(&constraint));
            if s < best_json.1 {
                best_json = (n, s);
            }
            if let Some(tokenizer) = &text.tokenizer {
                let answer = tokenizer.decode(&out).unwrap_or_default();
                assert!(answer.starts_with('{'), "the constrained answer is JSON: {answer:?}");
            }
        }
        let (rate_free, rate_json) = (best_free.0 as f64 / best_free.1, best_json.0 as f64 / best_json.1);
        println!("{prompt:<72} {:>7} {rate_free:>9.1} {:>7} {rate_json:>9.1} {:>5.2}×", best_free.0, best_json.0, rate_json / rate_free);
        (free_n, free_s, json_n, json_s) = (free_n + best_free.0, free_s + best_free.1, json_n + best_json.0, json_s + best_json.1);
    }
    let (rate_free, rate_json) = (free_n as f64 / free_s, json_n as f64 / json_s);
    println!("{:<72} {free_n:>7} {rate_free:>9.1} {json_n:>7} {rate_json:>9.1} {:>5.2}×", "all", rate_json / rate_free);
}
