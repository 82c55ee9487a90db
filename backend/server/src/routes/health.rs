//! `GET /health`: 200 when requests can be served, 503 while the model loads.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use peregrine_api::Health;

use crate::app::AppState;
use crate::engine_slot::Readiness;

/// Readiness of the server.
pub async fn health(State(state): State<AppState>) -> (StatusCode, Json<Health>) {
    let (code, status) = match state.engine.readiness() {
        Readiness::Ready => (StatusCode::OK, "ok"),
        Readiness::Loading => (StatusCode::SERVICE_UNAVAILABLE, "loading"),
        Readiness::Failed => (StatusCode::SERVICE_UNAVAILABLE, "error"),
    };
    (code, Json(Health { status: status.into(), version: env!("CARGO_PKG_VERSION").into() }))
}
