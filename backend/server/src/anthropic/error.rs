//! Anthropic's error shape `{"type": "error", "error": {"type", "message"}}` for the
//! server's one error type (statuses come from `Error::status`; the message names the
//! field at fault, as Anthropic's messages do, since the shape has no `param`).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::error::Error;

/// A server error rendered the Anthropic way.
#[derive(Debug)]
pub struct AnthropicError(pub Error);

impl From<Error> for AnthropicError {
    fn from(e: Error) -> Self {
        AnthropicError(e)
    }
}

impl From<crate::openai::error::OpenAiError> for AnthropicError {
    fn from(e: crate::openai::error::OpenAiError) -> Self {
        AnthropicError(e.0)
    }
}

/// Anthropic's error `type` for a status.
fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 => "overloaded_error",
        s if s >= 500 => "api_error",
        _ => "invalid_request_error",
    }
}

/// The JSON body (also the `error` event of a stream that fails).
pub fn error_body(e: &Error) -> Value {
    let message = match e.param() {
        Some(p) if !e.to_string().contains(p) => format!("{p}: {e}"),
        _ => e.to_string(),
    };
    json!({ "type": "error", "error": { "type": error_type(e.status()), "message": message } })
}

impl IntoResponse for AnthropicError {
    fn into_response(self) -> Response {
        if self.0.status().is_server_error() {
            tracing::warn!(code = self.0.code(), "{}", self.0);
        }
        let response = (self.0.status(), Json(error_body(&self.0))).into_response();
        self.0.with_retry_after(response)
    }
}
