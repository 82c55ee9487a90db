//! HTTP routes of the playground API and operations, one file per area.

pub mod completion;
pub mod generate;
pub mod health;
pub mod infill;
pub mod info;
pub mod llama_answer;
pub mod llama_meta;
pub mod metrics;
pub mod shares;
pub mod tokenize;

use crate::error::Error;

/// Unknown `/api/...` paths: a JSON 404 rather than the playground page.
pub async fn not_found() -> Error {
    Error::NotFound("no such API route".into())
}

/// llama-server's routes this server does not have: a JSON 501 in OpenAI's error shape
/// (as llama-server answers a disabled route) rather than the playground page.
pub const NOT_SERVED: &[&str] = &["/slots", "/embedding", "/embeddings", "/rerank", "/reranking", "/lora-adapters"];

/// The answer of a [`NOT_SERVED`] route.
pub async fn not_served(uri: axum::http::Uri) -> crate::openai::error::OpenAiError {
    crate::openai::error::OpenAiError(Error::NotImplemented(format!(
        "{} is not served here: no slots API, embeddings, reranking or LoRA adapters (see GET /props for what is)",
        uri.path()
    )))
}
