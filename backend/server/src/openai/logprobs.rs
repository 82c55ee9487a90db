//! Log-probabilities in OpenAI's two shapes: the legacy completions object
//! (`tokens`, `token_logprobs`, `top_logprobs`, `text_offset`) and chat's `content` list.

use serde_json::{json, Map, Value};

use super::steps::TokenLp;

/// Completions' `logprobs` for `tokens`, whose text starts at character `offset`.
pub fn legacy(tokens: &[TokenLp], offset: &mut usize) -> Value {
    let mut offsets = Vec::with_capacity(tokens.len());
    for t in tokens {
        offsets.push(*offset);
        *offset += t.token.chars().count();
    }
    let top: Vec<Value> = tokens
        .iter()
        .map(|t| match t.logprob {
            None => Value::Null,
            Some(_) => Value::Object(t.top.iter().map(|(s, lp)| (s.clone(), json!(lp))).collect::<Map<_, _>>()),
        })
        .collect();
    json!({
        "tokens": tokens.iter().map(|t| t.token.clone()).collect::<Vec<_>>(),
        "token_logprobs": tokens.iter().map(|t| t.logprob).collect::<Vec<_>>(),
        "top_logprobs": top,
        "text_offset": offsets,
    })
}

/// One entry of chat's `logprobs.content`.
pub fn chat_entry(t: &TokenLp) -> Value {
    json!({
        "token": t.token,
        "logprob": t.logprob.unwrap_or(0.0),
        "bytes": t.token.as_bytes(),
        "top_logprobs": t.top.iter().map(|(s, lp)| json!({ "token": s, "logprob": lp, "bytes": s.as_bytes() })).collect::<Vec<_>>(),
    })
}

/// Chat's `logprobs` object for `tokens`.
pub fn chat(tokens: &[TokenLp]) -> Value {
    json!({ "content": tokens.iter().map(chat_entry).collect::<Vec<_>>(), "refusal": null })
}
