//! `POST /tokenize {content, add_special, with_pieces}` → `{tokens}` and
//! `POST /detokenize {tokens}` → `{content}`, llama.cpp's server conventions.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};

use crate::app::AppState;
use crate::error::{Error, Result};
use crate::extract::JsonBody;
use crate::request_context::Caller;

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

impl crate::fields::Fields for TokenizeRequest {
    const ROUTE: &'static str = "/tokenize";
    const ACCEPTED: &'static [&'static [&'static str]] = &[&["content", "add_special", "with_pieces"]];
}

/// Body of `POST /detokenize`.
#[derive(Deserialize)]
pub struct DetokenizeRequest {
    pub tokens: Vec<u32>,
}

impl crate::fields::Fields for DetokenizeRequest {
    const ROUTE: &'static str = "/detokenize";
    const ACCEPTED: &'static [&'static [&'static str]] = &[&["tokens"]];
}

/// Answer of `POST /detokenize`.
#[derive(Serialize)]
pub struct DetokenizeResponse {
    pub content: String,
}

/// The answer of `/tokenize`.
#[derive(Serialize)]
struct Tokens<T> {
    tokens: T,
}

/// One token of a `with_pieces` answer.
#[derive(Serialize)]
struct Piece {
    id: u32,
    piece: String,
}

/// Text → ids with the loaded model's tokenizer, on the bounded tokenizer pool, counted
/// against the client's in-flight limit like a generation.
pub async fn tokenize(State(state): State<AppState>, caller: Caller, body: Result<JsonBody<TokenizeRequest>>) -> Result<Response> {
    let JsonBody(req) = body?;
    let limit = state.settings.max_tokenize_bytes;
    if req.content.len() > limit {
        return Err(Error::TooLarge(format!(
            "content is {} bytes; /tokenize takes at most {limit} (--max-tokenize-bytes)",
            req.content.len()
        )));
    }
    let engine = state.engine.get()?;
    let _guard = crate::jobs::client_slot(&state, caller.client)?;
    let text = engine.handle.text().clone();
    crate::blocking::tokenizer_task(move || -> Result<Response> {
        let tok = text.tokenizer.as_ref().ok_or_else(|| Error::bad("content", "this model has no tokenizer"))?;
        let ids = tok.encode(&req.content, req.add_special)?;
        // Typed rows, not a JSON value per token: the answer costs about its own size.
        Ok(if req.with_pieces {
            let pieces: Vec<Piece> = ids.iter().map(|&id| Piece { id, piece: text.token_str(id) }).collect();
            Json(Tokens { tokens: pieces }).into_response()
        } else {
            Json(Tokens { tokens: ids }).into_response()
        })
    })
    .await?
}

/// Ids → text on the tokenizer pool, counted like `/tokenize`; ids outside the
/// vocabulary are a 400.
pub async fn detokenize(
    State(state): State<AppState>,
    caller: Caller,
    body: Result<JsonBody<DetokenizeRequest>>,
) -> Result<Json<DetokenizeResponse>> {
    let JsonBody(req) = body?;
    let engine = state.engine.get()?;
    let _guard = crate::jobs::client_slot(&state, caller.client)?;
    let text = engine.handle.text().clone();
    crate::blocking::tokenizer_task(move || -> Result<Json<DetokenizeResponse>> {
        let tok = text.tokenizer.as_ref().ok_or_else(|| Error::bad("tokens", "this model has no tokenizer"))?;
        text.check_ids(&req.tokens).map_err(|e| match e {
            peregrine_engine::Error::InvalidRequest(why) => Error::bad("tokens", why),
            other => other.into(),
        })?;
        Ok(Json(DetokenizeResponse { content: tok.decode(&req.tokens)? }))
    })
    .await?
}
