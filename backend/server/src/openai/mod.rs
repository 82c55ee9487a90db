//! The OpenAI-compatible API under `/v1`: models, completions, chat completions,
//! streamed (`data: {chunk}` … `data: [DONE]`) or not, and responses (typed events),
//! with OpenAI's error shape; Anthropic's `/v1/messages` sits beside them.

pub(crate) mod chat;
mod choices;
pub(crate) mod completions;
pub mod error;
mod logprobs;
mod models;
pub(crate) mod params;
mod response_object;
mod response_tools;
mod responses;
pub(crate) mod steps;
pub(crate) mod stream;
pub(crate) mod tool_output;
pub mod tools;

use axum::routing::{get, post};
use axum::Router;

use crate::app::AppState;
use crate::error::Error;
use error::OpenAiError;

/// The `/v1` routes (nested by `app`).
pub fn router() -> Router<AppState> {
    routes()
        .route("/messages", post(crate::anthropic::messages::messages))
        .route("/messages/count_tokens", post(crate::anthropic::count_tokens::count_tokens))
        .fallback(unknown_route)
}

/// The OpenAI routes without their prefix: `app` serves them under `/v1` and at the
/// root too, since an OpenAI client given a base URL without `/v1` sends exactly these.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/models", get(models::list))
        .route("/models/{*id}", get(models::get))
        .route("/completions", post(completions::completions))
        .route("/chat/completions", post(chat::chat_completions))
        .route("/responses", post(responses::responses))
}

async fn unknown_route() -> OpenAiError {
    OpenAiError(Error::NotFound(
        "no such route under /v1 (served: /v1/models, /v1/completions, /v1/chat/completions, /v1/responses, /v1/messages, /v1/messages/count_tokens)".into(),
    ))
}
