//! `POST /tokenize {content, add_special, with_pieces}` → `{tokens}` and
//! `POST /detokenize {tokens}` → `{content}`, llama.cpp's server conventions.

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::app::AppState;
use crate::error::{Error, Result};
use crate::extract::JsonBody;

/// Body of `POST /tokenize`.
#[derive(Deserialize)]
pub struct TokenizeRequest {
    pub content: String,
    /// Add BOS/EOS as the model's tokenizer config asks (llama.cpp's default: false).
    #[serde(default)]
    pub add_special: bool,
    /// Answer `[{id, piece}]` instead of bare ids.
    #[serde(default)]
    pub with_pieces: bool,
}

/// Body of `POST /detokenize`.
#[derive(Deserialize)]
pub struct DetokenizeRequest {
    pub tokens: Vec<u32>,
}

/// Answer of `POST /detokenize`.
#[derive(Serialize)]
pub struct DetokenizeResponse {
    pub content: String,
}

/// Text → ids with the loaded model's tokenizer.
pub async fn tokenize(State(state): State<AppState>, body: Result<JsonBody<TokenizeRequest>>) -> Result<Json<Value>> {
    let JsonBody(req) = body?;
    let engine = state.engine.get()?;
    let text = engine.handle.text().clone();
    let answer = tokio::task::spawn_blocking(move || -> Result<Value> {
        let tok = text.tokenizer.as_ref().ok_or_else(|| Error::bad("content", "this model has no tokenizer"))?;
        let ids = tok.encode(&req.content, req.add_special)?;
        Ok(if req.with_pieces {
            json!({ "tokens": ids.iter().map(|&id| json!({ "id": id, "piece": text.token_str(id) })).collect::<Vec<_>>() })
        } else {
            json!({ "tokens": ids })
        })
    })
    .await
    .map_err(|e| Error::Internal(format!("tokenizer task failed: {e}")))??;
    Ok(Json(answer))
}

/// Ids → text; ids outside the vocabulary are a 400.
pub async fn detokenize(State(state): State<AppState>, body: Result<JsonBody<DetokenizeRequest>>) -> Result<Json<DetokenizeResponse>> {
    let JsonBody(req) = body?;
    let engine = state.engine.get()?;
    let text = engine.handle.text();
    let tok = text.tokenizer.as_ref().ok_or_else(|| Error::bad("tokens", "this model has no tokenizer"))?;
    text.check_ids(&req.tokens).map_err(|e| match e {
        peregrine_engine::Error::InvalidRequest(why) => Error::bad("tokens", why),
        other => other.into(),
    })?;
    Ok(Json(DetokenizeResponse { content: tok.decode(&req.tokens)? }))
}
