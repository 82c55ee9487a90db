//! Which top-level fields each route takes: an allow-list per request type, checked
//! before the body becomes its struct, so a misspelt field (`max_token`) or one this
//! route does not implement is a 400 naming it, as OpenAI answers an unrecognized
//! argument, instead of being silently ignored (serde alone drops unknown fields).

use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// A request body with an allow-list.
pub trait Fields {
    /// The route, for messages (`/v1/chat/completions`).
    const ROUTE: &'static str;
    /// Every top-level field the route reads, in groups (`&[SAMPLING, LABELS, …]`).
    const ACCEPTED: &'static [&'static [&'static str]];
}

/// Fields that only label a request: accepted and not used, as OpenAI's own `user` and
/// `metadata` change nothing in the answer.
pub const LABELS: &[&str] = &["user", "metadata"];

/// Speculative decoding's request fields (llama.cpp's names, the dotted one included as
/// a literal key): the engine reads them, they never change the tokens, only the speed.
pub const SPECULATIVE: &[&str] = &["speculative", "speculative.n_max"];

/// The sampling and control fields every generating route shares
/// (`openai::params::CommonParams`, llama.cpp's `/completion` and `/infill`).
pub const SAMPLING: &[&str] = &[
    "model",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "repeat_penalty",
    "seed",
    "stop",
    "ignore_eos",
    "cache_prompt",
    "stream",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
];

/// llama.cpp's structured-output fields (`structured.rs`), on the routes that generate
/// free text: the OpenAI completions and chat routes and `/completion`.
pub const STRUCTURED: &[&str] = &["grammar", "json_schema"];

/// The OpenAI routes' fields beyond [`SAMPLING`].
pub const OPENAI_EXTRA: &[&str] = &["n", "stream_options"];

/// Fields some API this server follows has and no route here implements yet, with why;
/// they would change the answer, so they are refused (a `null` value is as if absent).
const NOT_IMPLEMENTED: &[(&str, &str)] = &[
    ("grammar", "grammars are taken on /completion, /v1/completions and /v1/chat/completions"),
    ("json_schema", "JSON schemas are taken on /completion, /v1/completions and /v1/chat/completions"),
    ("tool_choice", "tool calls are taken on /v1/chat/completions, /v1/responses and /v1/messages"),
    ("parallel_tool_calls", "tool calls are taken on /v1/chat/completions, /v1/responses and /v1/messages"),
    ("functions", "function calls are not implemented"),
    ("function_call", "function calls are not implemented"),
    ("tools", "tool calls are taken on /v1/chat/completions, /v1/responses and /v1/messages"),
    ("response_format", "response_format is taken on /v1/chat/completions"),
    ("text", "text.format is taken on /v1/responses"),
    ("output_config", "structured output is not implemented on this API"),
    ("return_tokens", "token ids in the answer are not implemented"),
    ("post_sampling_probs", "post-sampling probabilities are not implemented"),
    ("timings_per_token", "per-token timings are not implemented"),
    ("samplers", "a custom sampler order is not implemented"),
    ("mirostat", "mirostat sampling is not implemented"),
    ("typical_p", "typical sampling is not implemented"),
    ("dry_multiplier", "DRY sampling is not implemented"),
    ("xtc_probability", "XTC sampling is not implemented"),
    ("n_keep", "context shifting is not implemented"),
    ("reasoning", "reasoning options are not implemented"),
    ("reasoning_effort", "reasoning options are not implemented"),
    ("thinking", "extended thinking is not implemented"),
    ("modalities", "only text output is implemented"),
    ("audio", "audio output is not implemented"),
    ("prediction", "predicted outputs are not implemented"),
    ("web_search_options", "web search is not implemented"),
];

/// Checks `body`'s top-level keys against `T`'s allow-list.
pub fn check<T: Fields>(body: &Map<String, Value>) -> Result<()> {
    check_keys(T::ROUTE, T::ACCEPTED, body)
}

/// The first key of `body` outside `accepted`, as a 400 naming it.
pub fn check_keys(route: &str, accepted: &[&[&str]], body: &Map<String, Value>) -> Result<()> {
    for (key, value) in body {
        if accepted.iter().any(|group| group.contains(&key.as_str())) {
            continue;
        }
        let shown = crate::error::shorten(key);
        if let Some((_, why)) = NOT_IMPLEMENTED.iter().find(|(name, _)| name == key) {
            if value.is_null() {
                continue;
            }
            return Err(Error::bad(key, format!("`{shown}` is not supported on {route}: {why}")));
        }
        return Err(Error::bad(key, format!("Unrecognized request argument supplied: {shown} ({route} does not take it)")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn keys(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn unknown_and_unimplemented_fields_are_named() {
        let accepted: &[&[&str]] = &[&["prompt", "max_tokens"], LABELS];
        assert!(check_keys("/r", accepted, &keys(json!({"prompt": "x", "user": "u", "metadata": {}}))).is_ok());
        let e = check_keys("/r", accepted, &keys(json!({"prompt": "x", "max_token": 3}))).unwrap_err();
        assert_eq!(e.param(), Some("max_token"));
        assert!(e.to_string().contains("Unrecognized request argument supplied: max_token"), "{e}");
        let e = check_keys("/r", accepted, &keys(json!({"grammar": "root ::= \"a\""}))).unwrap_err();
        assert_eq!(e.param(), Some("grammar"));
        assert!(e.to_string().contains("is not supported on /r: grammars are taken on"), "{e}");
        assert!(check_keys("/r", accepted, &keys(json!({"json_schema": null}))).is_ok());
    }
}
