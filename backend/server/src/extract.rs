//! Request extractors: a JSON body whose every failure is a clear 400 (or 413, or
//! 415 when it is not declared JSON), its top-level fields held to the route's
//! allow-list (`fields.rs`).

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use std::time::Duration;

use crate::config::DEFAULT_BODY_TIMEOUT_SECS;
use crate::connections::BodyDeadline;
use crate::error::Error;
use crate::fields::Fields;

/// A JSON body declared as `application/json` (or a `+json` type): a web page of
/// another site can send a form or `text/plain` post without asking, but not that
/// (CSRF). Errors name the field at fault; a field outside `T`'s allow-list is one.
pub struct JsonBody<T>(pub T);

/// Whether a `Content-Type` value declares JSON.
pub fn is_json_type(value: &str) -> bool {
    let essence = value.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}

impl<S, T> FromRequest<S> for JsonBody<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Fields,
{
    type Rejection = Error;

    async fn from_request(req: Request, state: &S) -> Result<Self, Error> {
        let declared = req.headers().get(axum::http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
        if !is_json_type(declared) {
            let what = if declared.is_empty() {
                "no Content-Type".to_string()
            } else {
                format!("Content-Type `{}`", crate::error::shorten(declared))
            };
            return Err(Error::UnsupportedMediaType(format!(
                "the body must be JSON sent as `Content-Type: application/json` (got {what})"
            )));
        }
        let deadline = req.extensions().get::<BodyDeadline>().map_or(Duration::from_secs(DEFAULT_BODY_TIMEOUT_SECS), |d| d.0);
        let read = tokio::time::timeout(deadline, Bytes::from_request(req, state))
            .await
            .map_err(|_| Error::BodyTimeout(format!("the request body did not arrive within {} s", deadline.as_secs_f64())))?;
        let bytes = read.map_err(|r| {
            if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
                Error::TooLarge("the request body is larger than the server accepts".into())
            } else {
                Error::BadRequest { message: format!("cannot read the request body: {}", r.body_text()), param: None }
            }
        })?;
        parse_json(&bytes).map(JsonBody)
    }
}

/// Parses `bytes` as one JSON value of type `T`, its fields checked against `T`'s
/// allow-list first.
pub fn parse_json<T: DeserializeOwned + Fields>(bytes: &[u8]) -> Result<T, Error> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(Error::BadRequest { message: "the request body is empty; send a JSON object".into(), param: None });
    }
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| Error::BadRequest { message: format!("malformed JSON: {e}"), param: None })?;
    if let Some(object) = value.as_object() {
        crate::fields::check::<T>(object)?;
    }
    let value: T = serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let kind = if inner.is_syntax() || inner.is_eof() { "malformed JSON" } else { "invalid request" };
        if path == "." || path == "?" || kind == "malformed JSON" {
            Error::BadRequest { message: format!("{kind}: {inner}"), param: None }
        } else {
            Error::BadRequest { message: format!("{kind} at `{path}`: {inner}"), param: Some(path) }
        }
    })?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::is_json_type;

    #[test]
    fn json_types() {
        for t in ["application/json", "application/json; charset=utf-8", "Application/JSON", "application/merge-patch+json"] {
            assert!(is_json_type(t), "{t}");
        }
        for t in ["", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "text/json"] {
            assert!(!is_json_type(t), "{t}");
        }
    }
}
