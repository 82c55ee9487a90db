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

/// Checks that `prompt_len + max_tokens` fits the model's context.
pub fn check_fits(engine: &LoadedEngine, prompt_len: usize, max_tokens: usize) -> Result<()> {
    let context = engine.handle.info().context_length;
    if prompt_len + max_tokens > context {
        return Err(Error::ContextOverflow(format!(
            "this model's context is {context} tokens, but the prompt has {prompt_len} tokens and max_tokens is {max_tokens}; shorten the prompt or lower max_tokens"
        )));
    }
    Ok(())
}

/// Tokens left for generation after a prompt of `prompt_len` (OpenAI's default for chat).
pub fn room_left(engine: &LoadedEngine, prompt_len: usize) -> usize {
    engine.handle.info().context_length.saturating_sub(prompt_len)
}
