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
