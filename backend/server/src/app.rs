//! The axum application: routes, static playground files with SPA fallback.

use std::path::PathBuf;

use axum::{routing::get, Json, Router};
use peregrine_api::Health;
use peregrine_engine::handle::EngineHandle;
use tower_http::{
    compression::CompressionLayer,
    services::{ServeDir, ServeFile},
};

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    /// Folder with the built playground (`index.html` and hashed assets).
    pub dist: PathBuf,
    /// The engine; `None` serves only static files and /health (front-end tests).
    pub engine: Option<EngineHandle>,
}

/// Builds the whole application; tests drive it in-process or on a real port.
pub fn app(state: AppState) -> Router {
    // Unknown paths that are not files fall back to index.html so client-side routes
    // such as /s/{share-id} load the playground.
    let index = state.dist.join("index.html");
    let static_files = ServeDir::new(&state.dist).fallback(ServeFile::new(index));
    Router::new()
        .route("/health", get(health))
        .route("/api/info", get(crate::routes::info::info))
        .fallback_service(static_files)
        .layer(CompressionLayer::new())
        .with_state(state)
}

async fn health() -> Json<Health> {
    Json(Health { status: "ok".into(), version: env!("CARGO_PKG_VERSION").into() })
}
