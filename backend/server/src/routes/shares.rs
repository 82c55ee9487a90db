//! `POST /api/shares` → 201 `{id, url}` (sizes checked, then the client's rate, then
//! the store's cap) and `GET /api/shares/{id}` → the stored share.

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use peregrine_api::playground::{Share, ShareCreated, ShareRequest};

use crate::app::AppState;
use crate::config::{MAX_SHARE_LABEL_BYTES, MAX_SHARE_OUTPUT_BYTES};
use crate::error::{Error, Result};
use crate::extract::JsonBody;
use crate::ids::is_share_id;
use crate::request_context::Caller;
use crate::routes::generate::{check_stops, check_texts};
use crate::share_store::ShareStore;

fn store(state: &AppState) -> Result<&ShareStore> {
    state.shares.as_ref().ok_or_else(|| Error::Unavailable("share links are disabled on this server".into()))
}

impl crate::fields::Fields for ShareRequest {
    const ROUTE: &'static str = "/api/shares";
    const ACCEPTED: &'static [&'static [&'static str]] = &[&["prompt", "mode", "params", "run", "system", "history", "suffix"]];
}

/// Checks sizes (413) and settings (400) of a share.
fn validate(share: &ShareRequest) -> Result<()> {
    check_texts(&share.prompt, &share.around, share.mode)?;
    if let Some(t) = share.around.history.iter().find(|t| t.assistant.len() > MAX_SHARE_OUTPUT_BYTES) {
        return Err(Error::TooLarge(format!("an answer is {} bytes; the limit is {MAX_SHARE_OUTPUT_BYTES}", t.assistant.len())));
    }
    if share.prompt.trim().is_empty() && share.around.suffix.trim().is_empty() {
        return Err(Error::bad("prompt", "a share needs a prompt"));
    }
    share.params.validate().map_err(|m| Error::bad("params", m))?;
    check_stops(&share.params.stop)?;
    if let Some(run) = &share.run {
        if run.output.len() > MAX_SHARE_OUTPUT_BYTES {
            return Err(Error::TooLarge(format!("the output is {} bytes; the limit is {MAX_SHARE_OUTPUT_BYTES}", run.output.len())));
        }
        let t = &run.timings;
        let figures = [t.prompt_ms, t.prompt_per_second, t.predicted_ms, t.predicted_per_second, t.ttft_ms];
        if figures.iter().any(|v| !(v.is_finite() && *v >= 0.0)) {
            return Err(Error::bad("run.timings", "timings must be finite numbers ≥ 0"));
        }
        if run.backend.len() > MAX_SHARE_LABEL_BYTES || run.device.len() > MAX_SHARE_LABEL_BYTES {
            return Err(Error::bad("run", format!("backend and device must be at most {MAX_SHARE_LABEL_BYTES} bytes")));
        }
    }
    Ok(())
}

/// Stores a share.
pub async fn create(State(state): State<AppState>, caller: Caller, body: Result<JsonBody<ShareRequest>>) -> Result<Response> {
    let JsonBody(share) = body?;
    validate(&share)?;
    let store = store(&state)?;
    let policy = &state.share_policy;
    if let Err(e) = policy.admit(caller.client) {
        state.metrics.rejected("share_rate");
        return Err(e);
    }
    let stored = store.insert(share, policy.ttl, policy.max).await?;
    let url = format!("/s/{}", stored.id);
    let created = ShareCreated { id: stored.id, url: url.clone() };
    Ok((StatusCode::CREATED, [(header::LOCATION, url)], Json(created)).into_response())
}

/// Returns a stored share; unknown or malformed ids are 404.
pub async fn get(State(state): State<AppState>, Path(id): Path<String>) -> Result<Json<Share>> {
    let not_found = || Error::NotFound(format!("no share with id `{}`", id.chars().take(64).collect::<String>()));
    if !is_share_id(&id) {
        return Err(not_found());
    }
    store(&state)?.get(id.clone()).await?.map(Json).ok_or_else(not_found)
}
