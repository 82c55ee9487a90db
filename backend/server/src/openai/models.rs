//! `GET /v1/models` and `GET /v1/models/{id}`: the one loaded model, once under each of its
//! served names.

use axum::extract::{Path, State};
use axum::Json;
use serde_json::{json, Value};

use super::error::OpenAiError;
use crate::app::AppState;
use crate::engine_slot::LoadedEngine;
use crate::error::Error;

/// Owner reported for the loaded model.
const OWNED_BY: &str = "peregrine";

fn model_object(engine: &LoadedEngine, id: &str) -> Value {
    let i = engine.handle.info();
    json!({
        "id": id,
        "object": "model",
        "created": 0,
        "owned_by": OWNED_BY,
        "meta": { "name": i.model_name, "architecture": i.architecture, "parameters": i.parameters, "context_length": i.context_length, "backend": i.backend },
    })
}

/// The model list.
pub async fn list(State(state): State<AppState>) -> Result<Json<Value>, OpenAiError> {
    let engine = state.engine.get()?;
    let data: Vec<Value> = engine.names.all().iter().map(|name| model_object(&engine, name)).collect();
    Ok(Json(json!({ "object": "list", "data": data })))
}

/// One model by id; 404 for any other.
pub async fn get(State(state): State<AppState>, Path(id): Path<String>) -> Result<Json<Value>, OpenAiError> {
    let engine = state.engine.get()?;
    match engine.served_name(&id) {
        Some(name) => Ok(Json(model_object(&engine, name))),
        None => Err(Error::ModelNotFound(id).into()),
    }
}
