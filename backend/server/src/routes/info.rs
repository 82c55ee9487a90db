//! `GET /api/info`: the loaded model, backend and limits.

use axum::{extract::State, http::StatusCode, Json};
use peregrine_api::Info;

use crate::app::AppState;

/// Describes the engine, or 503 when the server runs without one.
pub async fn info(State(state): State<AppState>) -> Result<Json<Info>, (StatusCode, String)> {
    let engine = state.engine.as_ref().ok_or((StatusCode::SERVICE_UNAVAILABLE, "no engine loaded".to_string()))?;
    let i = engine.info();
    Ok(Json(Info {
        model: i.model_name.clone(),
        architecture: i.architecture.clone(),
        parameters: i.parameters,
        context_length: i.context_length as u32,
        backend: i.backend.clone(),
        devices: i.devices.clone(),
        max_queue: i.max_queue as u32,
    }))
}
