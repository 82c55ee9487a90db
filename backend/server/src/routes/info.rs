//! `GET /api/info`: the loaded model, backend and limits.

use axum::{extract::State, Json};
use peregrine_api::playground::{MAX_MAX_TOKENS, MAX_PROMPT_BYTES};
use peregrine_api::{Info, Limits};
use serde::Serialize;

use crate::app::AppState;
use crate::error::Result;

/// [`Info`] plus the server's other limits under `"limits"`.
#[derive(Serialize)]
pub struct InfoBody {
    #[serde(flatten)]
    pub info: Info,
    pub limits: Limits,
    /// The id `/v1/models` lists.
    pub model_id: String,
    /// GPUs the model is split over (tensor parallelism; one kernel per GPU), 1 on the CPU.
    pub tensor_parallel: u32,
}

/// Describes the engine, or 503 while there is none.
pub async fn info(State(state): State<AppState>) -> Result<Json<InfoBody>> {
    let engine = state.engine.get()?;
    let i = engine.handle.info();
    let s = &state.settings;
    Ok(Json(InfoBody {
        info: Info {
            model: i.model_name.clone(),
            architecture: i.architecture.clone(),
            parameters: i.parameters,
            context_length: i.context_length as u32,
            backend: i.backend.clone(),
            devices: i.devices.clone(),
            max_queue: i.max_queue as u32,
            infill: peregrine_engine::infill::supported(engine.handle.text()).is_ok(),
        },
        limits: Limits {
            max_per_client: s.max_per_client as u32,
            max_prompt_bytes: MAX_PROMPT_BYTES as u64,
            max_tokens: MAX_MAX_TOKENS,
            max_body_bytes: s.max_body_bytes as u64,
            request_timeout_s: s.request_timeout.map(|t| t.as_secs()).unwrap_or(0),
            max_batch: i.max_batch as u32,
        },
        model_id: engine.model_id().to_string(),
        tensor_parallel: if i.backend == "cuda" { i.devices.len().max(1) as u32 } else { 1 },
    }))
}
