//! Constrained decoding through the real engine thread on the default model (fast CPU
//! runtime, real tokenizer): a JSON schema, a GBNF grammar and a regex each shape the
//! output, greedy and sampled, one at a time and batched; drafting leaves a constrained
//! run's tokens unchanged; a complete grammar ends the run; bad grammars are
//! `Error::Grammar` with the library's reason; a runtime that does not mask (as the
//! CUDA runtime) refuses a constrained request, at admission and on its thread.

mod common;

use std::time::Duration;

use common::llamacpp::default_model;
use peregrine_api::FinishReason;
use peregrine_engine::config::ModelConfig;
use peregrine_engine::generator::Generator;
use peregrine_engine::handle::{EngineHandle, EngineLimits, Submission};
use peregrine_engine::runtime::{BackendInfo, DecodeJob, Flow, RunEnd, Runtime};
use peregrine_engine::tokenizer::Tokenizer;
use peregrine_engine::request::{Event, Prompt, Request};
use peregrine_engine::sampling::SamplingParams;
use peregrine_engine::speculative::{Sizing, SpeculativeMode, SpeculativeRequest};
use peregrine_engine::{build_generator, load_model, EngineOptions, Error, GrammarSource};
use serde_json::{json, Value};

fn engine(max_batch: usize) -> EngineHandle {
    let mut options = EngineOptions::cpu();
    options.cpu.threads = Some(2);
    let limits = EngineLimits { max_queue: 8, max_batch: Some(max_batch), kv_budget: None, speculative: Default::default() };
    EngineHandle::start(move || build_generator(load_model(&default_model())?, &options), limits).expect("engine starts")
}

/// What a request produced: its text, token ids and how it ended (or its error).
#[derive(Debug, PartialEq)]
struct Outcome {
    text: String,
    ids: Vec<u32>,
    finish: Result<FinishReason, String>,
}

async fn run(sub: &mut Submission) -> Outcome {
    let (mut text, mut ids) = (String::new(), Vec::new());
    loop {
        let event = tokio::time::timeout(Duration::from_secs(120), sub.events.recv()).await.expect("an event within 120 s");
        match event.expect("channel open") {
            Event::Token { id, text: t, .. } => {
                ids.push(id);
                text += &t;
            }
            Event::Text(t) => text += &t,
            Event::Done { finish_reason, .. } => return Outcome { text, ids, finish: Ok(finish_reason) },
            Event::Error { message, .. } => return Outcome { text, ids, finish: Err(message) },
            _ => {}
        }
    }
}

fn constrained(engine: &EngineHandle, prompt: &str, source: &GrammarSource, max_tokens: usize) -> Request {
    let messages = vec![peregrine_engine::ChatMessage::new("user", prompt)];
    Request {
        max_tokens,
        constraint: Some(engine.text().constraint(source).expect("the grammar compiles")),
        ..Request::new(Prompt::Chat(messages))
    }
}

fn person_schema() -> GrammarSource {
    GrammarSource::JsonSchema(json!({
        "type": "object",
        "properties": {
            "name": { "type": "string", "maxLength": 20 },
            "age": { "type": "integer", "minimum": 0, "maximum": 150 },
            "role": { "enum": ["admin", "user", "guest"] },
            "tags": { "type": "array", "items": { "type": "string", "maxLength": 10 }, "maxItems": 3 }
        },
        "required": ["name", "age", "role", "tags"],
        "additionalProperties": false
    }))
}

fn check_person(text: &str) {
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"));
    let o = v.as_object().expect("an object");
    assert_eq!(o.len(), 4, "{text}");
    assert!(o["name"].as_str().is_some_and(|n| n.chars().count() <= 20), "{text}");
    assert!(o["age"].as_u64().is_some_and(|a| a <= 150), "{text}");
    assert!(["admin", "user", "guest"].contains(&o["role"].as_str().unwrap()), "{text}");
    assert!(o["tags"].as_array().is_some_and(|t| t.len() <= 3 && t.iter().all(Value::is_string)), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grammars_shape_the_output_alone_and_batched() {
    let single = engine(1);
    let schema = person_schema();
    let greedy = constrained(&single, "Describe a user of a web site as JSON.", &schema, 120);
    let mut sampled = constrained(&single, "Invent a person.", &schema, 120);
    sampled.sampling = SamplingParams { temperature: 1.0, top_p: 0.95, seed: 11, ..SamplingParams::default() };
    let gbnf = GrammarSource::Gbnf("root ::= answer \".\"\nanswer ::= (\"yes\" | \"no\") \", because \" [a-z ]{3,40}\n".into());
    let reason = constrained(&single, "Is the sky blue?", &gbnf, 60);
    let regex = GrammarSource::Regex("[0-9]{4}-[0-9]{2}-[0-9]{2}".into());
    let date = constrained(&single, "When did the first man land on the moon?", &regex, 30);

    let mut solo = Vec::new();
    for r in [&greedy, &sampled, &reason, &date] {
        solo.push(run(&mut single.submit(r.clone()).unwrap()).await);
    }
    single.shutdown();
    for o in &solo {
        eprintln!("{:?} ({} tokens)", o.text, o.ids.len());
        assert_eq!(o.finish, Ok(FinishReason::Stop), "a complete grammar stops the run: {o:?}");
    }
    check_person(&solo[0].text);
    check_person(&solo[1].text);
    let (answer, why) = solo[2].text.split_once(", because ").unwrap_or_else(|| panic!("{:?}", solo[2].text));
    assert!(["yes", "no"].contains(&answer), "{:?}", solo[2].text);
    assert!(why.ends_with('.') && why[..why.len() - 1].chars().all(|c| c.is_ascii_lowercase() || c == ' '), "{:?}", solo[2].text);
    let day = &solo[3].text;
    assert!(day.len() == 10 && day.chars().enumerate().all(|(i, c)| if i == 4 || i == 7 { c == '-' } else { c.is_ascii_digit() }), "{day:?}");

    // The batched scheduler masks each slot with its own grammar: the same tokens.
    let batched = engine(4);
    let mut subs: Vec<Submission> = [&greedy, &sampled, &reason, &date].iter().map(|r| batched.submit((*r).clone()).unwrap()).collect();
    for (i, sub) in subs.iter_mut().enumerate() {
        assert_eq!(run(sub).await, solo[i], "request {i}: batched differs from alone");
    }
    batched.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drafting_keeps_a_constrained_run_exact() {
    let engine = engine(1);
    // A prompt that repeats, so lookup drafts often, some of them against the grammar.
    let prompt = "Copy this JSON exactly: {\"name\": \"Ada\", \"age\": 36, \"role\": \"admin\", \"tags\": [\"math\", \"code\"]}";
    let mut outs = Vec::new();
    for (mode, temperature) in [(SpeculativeMode::Off, 0.0), (SpeculativeMode::Lookup, 0.0), (SpeculativeMode::Off, 0.8), (SpeculativeMode::Lookup, 0.8)] {
        let mut r = constrained(&engine, prompt, &person_schema(), 80);
        r.speculative = SpeculativeRequest { mode: Some(mode), n_max: Some(3), sizing: Sizing::Fixed };
        r.sampling = SamplingParams { temperature, seed: 5, ..SamplingParams::default() };
        outs.push(run(&mut engine.submit(r).unwrap()).await);
    }
    engine.shutdown();
    assert_eq!(outs[0], outs[1], "greedy: drafting changed the output");
    assert_eq!(outs[2], outs[3], "sampled: drafting changed the output");
    check_person(&outs[0].text);
    check_person(&outs[2].text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_grammars_are_errors_with_the_reason_and_length_ends_an_unfinished_one() {
    let engine = engine(1);
    let text = engine.text();
    let bad = [
        GrammarSource::Gbnf("root ::= \"a\" missing".into()),
        GrammarSource::Lark("start: (".into()),
        GrammarSource::JsonSchema(json!({ "type": "object", "properties": { "a": { "type": "no-such-type" } } })),
        GrammarSource::JsonSchema(json!("not a schema")),
        GrammarSource::Regex("[a-".into()),
    ];
    for source in &bad {
        match text.constraint(source) {
            Err(Error::Grammar(reason)) => assert!(!reason.is_empty(), "{source:?}"),
            other => panic!("{source:?} gave {other:?}"),
        }
    }
    let reason = match text.constraint(&bad[0]) {
        Err(e) => e.to_string(),
        Ok(_) => unreachable!(),
    };
    assert!(reason.contains("`missing`"), "{reason}");
    // Too few tokens for the grammar: the run ends by length, its output a prefix.
    let r = constrained(&engine, "List numbers.", &GrammarSource::Regex("(one, ){20}done".into()), 5);
    let out = run(&mut engine.submit(r).unwrap()).await;
    assert_eq!(out.finish, Ok(FinishReason::Length), "{out:?}");
    assert!("one, ".repeat(20).starts_with(&out.text), "{out:?}");
    engine.shutdown();
}

/// A runtime that samples on its device and so applies no grammar (the CUDA runtime's
/// case): it would answer one token, were it asked.
struct DeviceSampler {
    config: ModelConfig,
}

impl Runtime for DeviceSampler {
    fn config(&self) -> &ModelConfig {
        &self.config
    }
    fn backend(&self) -> BackendInfo {
        BackendInfo { kind: "cuda".into(), devices: vec![] }
    }
    fn generate(&mut self, _job: &DecodeJob<'_>, on_token: &mut dyn FnMut(&peregrine_engine::Sampled) -> Flow) -> peregrine_engine::Result<RunEnd> {
        on_token(&peregrine_engine::Sampled { id: 1, logprob: 0.0, top: vec![], accepted_draft: false });
        Ok(RunEnd::Length)
    }
    fn score(&mut self, _tokens: &[u32]) -> peregrine_engine::Result<Vec<Vec<f32>>> {
        Ok(vec![])
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_that_does_not_mask_refuses_a_constrained_request() {
    let files = load_model(&default_model()).unwrap();
    let config = files.config().clone();
    let tokenizer = Tokenizer::from_gguf(&peregrine_engine::gguf::GgufFile::open(&default_model()).unwrap()).unwrap();
    let engine = EngineHandle::start(move || Ok(Generator::new(Box::new(DeviceSampler { config }), Some(tokenizer), None)), 4).unwrap();
    assert!(!engine.follows_grammars());
    let mut r = Request::new(Prompt::Tokens(vec![1, 2, 3]));
    r.constraint = Some(engine.text().constraint(&GrammarSource::JsonObject).unwrap());
    match engine.submit(r.clone()) {
        Err(Error::Grammar(m)) => assert!(m.contains("does not apply grammars"), "{m}"),
        other => panic!("admitted: {:?}", other.map(|_| ())),
    }
    // Queued without the admission check, the engine thread refuses it as well.
    let mut sub = engine.try_submit(r).unwrap();
    let out = run(&mut sub).await;
    assert!(out.ids.is_empty() && out.finish.as_ref().is_err_and(|m| m.contains("does not apply grammars")), "{out:?}");
    engine.shutdown();
}
