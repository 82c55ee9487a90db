//! Prompts are tokenized (and chat-templated) by the handler, before queueing, so
//! an empty or over-long prompt is a 400 at once and never waits in the queue.

use peregrine_engine::Prompt;

use crate::engine_slot::LoadedEngine;
use crate::error::{Error, Result};

/// Token ids of `prompt`, computed on a blocking thread (long prompts take a while).
pub async fn tokenize(engine: &LoadedEngine, prompt: Prompt, param: &'static str) -> Result<Vec<u32>> {
    let text = engine.handle.text().clone();
    let ids = crate::blocking::tokenizer_task(move || text.prompt_ids(&prompt)).await?.map_err(|e| match e {
        peregrine_engine::Error::InvalidRequest(m) | peregrine_engine::Error::Template(m) => Error::bad(param, m),
        other => Error::Engine(other),
    })?;
    if ids.is_empty() {
        return Err(Error::bad(param, "the prompt is empty (it has no tokens)"));
    }
    Ok(ids)
}

/// Tokens left for generation after a prompt of `prompt_len` (OpenAI's default for chat).
pub fn room_left(engine: &LoadedEngine, prompt_len: usize) -> usize {
    engine.handle.info().context_length.saturating_sub(prompt_len)
}
