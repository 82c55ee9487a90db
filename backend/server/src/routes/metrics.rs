//! `GET /metrics`: Prometheus text format.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use crate::app::AppState;

/// Content type of the Prometheus text exposition format.
const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Histograms, counters and the engine's live gauges.
pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let (running, waiting) = match state.engine.ready_engine() {
        Some(e) => (e.handle.running(), e.handle.queue_len()),
        None => (0, 0),
    };
    ([(header::CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE)], state.metrics.render(running, waiting))
}
