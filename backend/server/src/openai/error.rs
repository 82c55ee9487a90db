//! OpenAI's error shape `{"error": {"message", "type", "param", "code"}}` for the
//! server's one error type (statuses come from `Error::status`).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::error::Error;

/// A server error rendered the OpenAI way.
#[derive(Debug)]
pub struct OpenAiError(pub Error);

impl From<Error> for OpenAiError {
    fn from(e: Error) -> Self {
        OpenAiError(e)
    }
}

impl From<peregrine_engine::Error> for OpenAiError {
    fn from(e: peregrine_engine::Error) -> Self {
        OpenAiError(Error::Engine(e))
    }
}

/// OpenAI's `type` for a status.
fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        429 => "rate_limit_error",
        // llama-server's type for a route it has but does not serve.
        501 => "not_supported_error",
        s if s >= 500 => "server_error",
        _ => "invalid_request_error",
    }
}

/// The JSON body (also sent as a `data:` event when a stream fails).
pub fn error_body(e: &Error) -> Value {
    json!({ "error": { "message": e.to_string(), "type": error_type(e.status()), "param": e.param(), "code": e.code() } })
}

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        if self.0.status().is_server_error() {
            tracing::warn!(code = self.0.code(), "{}", self.0);
        }
        let response = (self.0.status(), Json(error_body(&self.0))).into_response();
        self.0.with_retry_after(response)
    }
}
