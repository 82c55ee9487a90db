//! Prompt reuse (llama.cpp's `cache_prompt`) through the real engine thread on the
//! default model, one request at a time and batched: a conversation's second turn
//! reuses the keys and values of the first turn's prompt and answer (reported as
//! `cache_n` and `cached_tokens`) and gives the same tokens as without reuse.

mod common;

use std::time::Duration;

use common::llamacpp::default_model;
use peregrine_engine::handle::{EngineHandle, EngineLimits};
use peregrine_engine::request::{Event, Prompt, Request};
use peregrine_engine::{build_generator, load_model, EngineOptions};

fn engine(max_batch: usize) -> EngineHandle {
    let mut options = EngineOptions::cpu();
    options.cpu.threads = Some(2);
    let limits = EngineLimits { max_queue: 4, max_batch: Some(max_batch), kv_budget: None, speculative: Default::default() };
    EngineHandle::start(move || build_generator(load_model(&default_model())?, &options), limits).expect("engine starts")
}

/// A run's token ids, text, and the prompt tokens it reused (timings and usage).
#[derive(Debug, PartialEq)]
struct Turn {
    ids: Vec<u32>,
    text: String,
    cache_n: u32,
    cached_tokens: u32,
    prompt_tokens: u32,
}

async fn run(engine: &EngineHandle, prompt: &str, cache_prompt: bool) -> Turn {
    let request = Request { max_tokens: 24, ignore_eos: true, cache_prompt, ..Request::new(Prompt::Text(prompt.into())) };
    let mut sub = engine.submit(request).expect("queued");
    let (mut ids, mut text) = (Vec::new(), String::new());
    loop {
        let e = tokio::time::timeout(Duration::from_secs(120), sub.events.recv()).await.expect("an event").expect("open");
        match e {
            Event::Token { id, text: t, .. } => {
                ids.push(id);
                text += &t;
            }
            Event::Text(t) => text += &t,
            Event::Done { usage, timings, .. } => {
                assert_eq!(timings.prompt_n + timings.cache_n, usage.prompt_tokens, "read + reused = the prompt");
                return Turn {
                    ids,
                    text,
                    cache_n: timings.cache_n,
                    cached_tokens: usage.prompt_tokens_details.cached_tokens,
                    prompt_tokens: usage.prompt_tokens,
                };
            }
            Event::Error { message, .. } => panic!("{message}"),
            _ => {}
        }
    }
}

async fn second_turn_reuses_the_first(engine: &EngineHandle) {
    let first_prompt = "The capital of France is";
    let first = run(engine, first_prompt, true).await;
    let second_prompt = format!("{first_prompt}{} Now, the capital of Italy is", first.text);
    let reused = run(engine, &second_prompt, true).await;
    let fresh = run(engine, &second_prompt, false).await;
    assert_eq!(reused.ids, fresh.ids, "the same tokens with and without reuse");
    assert_eq!(reused.text, fresh.text);
    assert_eq!((fresh.cache_n, fresh.cached_tokens), (0, 0));
    assert_eq!(reused.cache_n, reused.cached_tokens);
    assert!(reused.cache_n >= first.prompt_tokens - 1, "the first turn's prompt at least: {reused:?} after {first:?}");
    assert!(reused.cache_n < reused.prompt_tokens, "{reused:?}");
    // The whole prompt again: everything but its last token is reused.
    let again = run(engine, &second_prompt, true).await;
    assert_eq!(again.ids, fresh.ids);
    assert_eq!(again.cache_n, again.prompt_tokens - 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_at_a_time_the_second_turn_reuses_the_first() {
    second_turn_reuses_the_first(&engine(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_the_second_turn_finds_its_slot_and_reuses_the_first() {
    let engine = engine(4);
    // Another sequence in another slot must not be the one the second turn picks.
    run(&engine, "Once upon a time", true).await;
    second_turn_reuses_the_first(&engine).await;
}
