//! `GET /v1/models` and `GET /v1/models/{id}`: the one loaded model.

use axum::extract::{Path, State};
use axum::Json;
use serde_json::{json, Value};

use super::error::OpenAiError;
use crate::app::AppState;
use crate::engine_slot::LoadedEngine;
use crate::error::Error;

/// Owner reported for the loaded model.
const OWNED_BY: &str = "peregrine";

fn model_object(engine: &LoadedEngine) -> Value {
    let i = engine.handle.info();
    json!({
        "id": engine.model_id,
        "object": "model",
        "created": 0,
        "owned_by": OWNED_BY,
        "meta": { "name": i.model_name, "architecture": i.architecture, "parameters": i.parameters, "context_length": i.context_length, "backend": i.backend },
    })
}

/// The model list.
pub async fn list(State(state): State<AppState>) -> Result<Json<Value>, OpenAiError> {
    let engine = state.engine.get()?;
    Ok(Json(json!({ "object": "list", "data": [model_object(&engine)] })))
}

/// One model by id; 404 for any other.
pub async fn get(State(state): State<AppState>, Path(id): Path<String>) -> Result<Json<Value>, OpenAiError> {
    let engine = state.engine.get()?;
    if !engine.serves(&id) {
        return Err(Error::ModelNotFound(id).into());
    }
    Ok(Json(model_object(&engine)))
}
