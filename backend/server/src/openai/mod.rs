//! The OpenAI-compatible API under `/v1`: models, completions, chat completions,
//! streamed (`data: {chunk}` … `data: [DONE]`) or not, with OpenAI's error shape.

mod chat;
mod choices;
mod completions;
pub mod error;
mod logprobs;
mod models;
pub(crate) mod params;
pub(crate) mod steps;
pub(crate) mod stream;

use axum::routing::{get, post};
use axum::Router;

use crate::app::AppState;
use crate::error::Error;
use error::OpenAiError;

/// The `/v1` routes (nested by `app`).
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/models", get(models::list))
        .route("/models/{*id}", get(models::get))
        .route("/completions", post(completions::completions))
        .route("/chat/completions", post(chat::chat_completions))
        .fallback(unknown_route)
}

async fn unknown_route() -> OpenAiError {
    OpenAiError(Error::NotFound("no such route under /v1 (served: /v1/models, /v1/completions, /v1/chat/completions)".into()))
}
