//! The server's error type: one enum, one status/code mapping (`status`, `code`), and
//! the playground's JSON rendering; the OpenAI routes render the same values in
//! OpenAI's shape (`openai::error`).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use peregrine_api::playground::ApiError;
use peregrine_engine::ErrorCode;

/// Errors the server reports to a user (start-up) or a client (requests).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Binding or serving the listening socket failed.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// The data directory or the share database cannot be used (at start-up), or the
    /// database failed a request (503: another replica or a retry may succeed).
    #[error("share store: {0}")]
    Store(String),
    /// `--share-max` live shares are stored already.
    #[error("the share store is full ({max} shares); no new share links until older ones expire or are removed")]
    StoreFull { max: u64 },
    /// This client created its allowed number of shares (`--share-rate`).
    #[error("too many share links from this client (limit {rate}); try again in {retry_after_secs} s")]
    ShareRate { rate: String, retry_after_secs: u64 },
    /// A request failed inside the engine (CLI).
    #[error("{0}")]
    Request(String),
    /// The engine reported an error.
    #[error(transparent)]
    Engine(#[from] peregrine_engine::Error),
    /// Malformed or out-of-range input; `param` names the field when known.
    #[error("{message}")]
    BadRequest { message: String, param: Option<String> },
    /// The prompt and max_tokens do not fit the model's context.
    #[error("{0}")]
    ContextOverflow(String),
    /// A body, prompt or output over its documented size.
    #[error("{0}")]
    TooLarge(String),
    /// A JSON route's body is not declared `application/json` (a cross-site form or
    /// `text/plain` post cannot be one without a CORS preflight).
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// The `Host` header names a host this server does not answer for (DNS rebinding).
    #[error("{0}")]
    MisdirectedHost(String),
    /// An API route called without a valid API key.
    #[error("{0}")]
    Unauthorized(String),
    /// No such share, route or resource.
    #[error("{0}")]
    NotFound(String),
    /// A route other servers of the same API have and this one does not (llama-server's
    /// `/slots`, `/embedding`, …): answered in JSON, never with the playground page.
    #[error("{0}")]
    NotImplemented(String),
    /// A `model` name this server does not serve.
    #[error("the model `{}` does not exist on this server (see GET /v1/models)", shorten(.0))]
    ModelNotFound(String),
    /// The engine queue is full.
    #[error("the server is busy: {waiting} requests are waiting; try again shortly")]
    QueueFull { waiting: usize, retry_after_secs: u64 },
    /// This client already has its allowed number of requests in flight.
    #[error("too many concurrent requests from this client (limit {limit})")]
    ClientLimit { limit: usize, retry_after_secs: u64 },
    /// No engine yet (loading), none configured, or shutting down.
    #[error("{0}")]
    Unavailable(String),
    /// The request's body did not arrive in time.
    #[error("{0}")]
    BodyTimeout(String),
    /// The request ran past the server's time limit.
    #[error("{0}")]
    Timeout(String),
    /// A fault on the server's side.
    #[error("internal error: {0}")]
    Internal(String),
}

/// Most characters of a client's text an error message repeats.
const MAX_ECHOED_CHARS: usize = 64;

/// `text` cut to [`MAX_ECHOED_CHARS`] (with an ellipsis), so an error never echoes a
/// client's megabyte back.
pub fn shorten(text: &str) -> String {
    match text.char_indices().nth(MAX_ECHOED_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// The server's result alias.
pub type Result<T> = std::result::Result<T, Error>;

/// `error: <e>` then one `caused by:` line per source, for a start-up failure on stderr.
/// The engine's messages already carry their cause's text (they are shown alone in
/// responses and logs), so a source whose text the line above says already is skipped.
pub fn report(e: &dyn std::error::Error) -> String {
    let mut out = format!("error: {e}");
    let mut said = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !said.contains(&text) {
            out.push_str(&format!("\n  caused by: {text}"));
        }
        said = text;
        cause = c.source();
    }
    out
}

impl Error {
    /// A 400 naming the offending field.
    pub fn bad(param: &str, message: impl Into<String>) -> Error {
        Error::BadRequest { message: message.into(), param: Some(param.to_string()) }
    }

    /// An engine `Error` event as a server error.
    pub fn from_event(code: ErrorCode, message: String) -> Error {
        match code {
            ErrorCode::InvalidRequest => Error::BadRequest { message, param: None },
            ErrorCode::ContextOverflow => Error::ContextOverflow(message),
            ErrorCode::Unavailable => Error::Unavailable(message),
            ErrorCode::Timeout => Error::Timeout(message),
            ErrorCode::Internal => Error::Internal(message),
        }
    }

    /// The HTTP status: client mistakes are 4xx, never 500.
    pub fn status(&self) -> StatusCode {
        use peregrine_engine::Error as E;
        match self {
            Error::BadRequest { .. } | Error::ContextOverflow(_) => StatusCode::BAD_REQUEST,
            Error::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Error::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Error::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            Error::MisdirectedHost(_) => StatusCode::MISDIRECTED_REQUEST,
            Error::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Error::NotFound(_) | Error::ModelNotFound(_) => StatusCode::NOT_FOUND,
            Error::NotImplemented(_) => StatusCode::NOT_IMPLEMENTED,
            Error::QueueFull { .. } | Error::ClientLimit { .. } | Error::ShareRate { .. } => StatusCode::TOO_MANY_REQUESTS,
            Error::Unavailable(_) | Error::Timeout(_) | Error::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
            Error::StoreFull { .. } => StatusCode::INSUFFICIENT_STORAGE,
            Error::Engine(e) => match e {
                E::InvalidRequest(_) | E::ContextOverflow { .. } | E::Template(_) | E::TokenOutOfRange { .. } => StatusCode::BAD_REQUEST,
                E::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            },
            Error::Bind { .. } | Error::Request(_) | Error::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Stable snake_case code for clients (`busy` is what the playground retries on).
    pub fn code(&self) -> &'static str {
        use peregrine_engine::Error as E;
        match self {
            Error::BadRequest { .. } => "invalid_request",
            Error::ContextOverflow(_) => "context_length_exceeded",
            Error::TooLarge(_) => "payload_too_large",
            Error::UnsupportedMediaType(_) => "unsupported_media_type",
            Error::BodyTimeout(_) => "request_timeout",
            Error::MisdirectedHost(_) => "misdirected_host",
            Error::Unauthorized(_) => "invalid_api_key",
            Error::NotFound(_) => "not_found",
            Error::NotImplemented(_) => "not_implemented",
            Error::ModelNotFound(_) => "model_not_found",
            Error::QueueFull { .. } => "busy",
            Error::ClientLimit { .. } => "client_limit",
            Error::ShareRate { .. } => "share_rate_limit",
            Error::StoreFull { .. } => "share_store_full",
            Error::Store(_) => "store_unavailable",
            Error::Unavailable(_) => "unavailable",
            Error::Timeout(_) => "timeout",
            Error::Engine(e) => match e {
                E::InvalidRequest(_) | E::Template(_) | E::TokenOutOfRange { .. } => "invalid_request",
                E::ContextOverflow { .. } => "context_length_exceeded",
                E::Unavailable(_) => "unavailable",
                _ => "internal_error",
            },
            Error::Bind { .. } | Error::Request(_) | Error::Internal(_) => "internal_error",
        }
    }

    /// The field at fault, when known.
    pub fn param(&self) -> Option<&str> {
        match self {
            Error::BadRequest { param, .. } => param.as_deref(),
            Error::ModelNotFound(_) => Some("model"),
            _ => None,
        }
    }

    /// Seconds a client should wait before retrying (429s).
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            Error::QueueFull { retry_after_secs, .. }
            | Error::ClientLimit { retry_after_secs, .. }
            | Error::ShareRate { retry_after_secs, .. } => Some(*retry_after_secs),
            _ => None,
        }
    }

    /// Adds `Retry-After` to a response built for this error.
    pub fn with_retry_after(&self, mut response: Response) -> Response {
        if let Some(secs) = self.retry_after_secs() {
            if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        response
    }

    /// The playground's JSON body for this error.
    pub fn api_error(&self) -> ApiError {
        ApiError { code: self.code().to_string(), message: self.to_string() }
    }
}

/// The playground error body: [`ApiError`] plus `retry_after_ms` on 429s.
#[derive(serde::Serialize)]
struct ErrorBody {
    #[serde(flatten)]
    error: ApiError,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after_ms: Option<u64>,
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        if self.status().is_server_error() {
            tracing::warn!(code = self.code(), "{self}");
        }
        let body = ErrorBody { error: self.api_error(), retry_after_ms: self.retry_after_secs().map(|s| s * 1000) };
        let response = (self.status(), Json(body)).into_response();
        self.with_retry_after(response)
    }
}

#[cfg(test)]
mod tests {
    use peregrine_engine::CudaError;

    use super::*;

    #[test]
    fn a_start_up_report_says_an_out_of_memory_load_once_with_its_numbers() {
        let oom = CudaError::OutOfMemory { what: "the KV cache (8192 positions)".into(), bytes: 2 << 30, free: 512 << 20, total: 80 << 30 };
        let e = Error::from(peregrine_engine::Error::from(oom));
        let text = report(&e);
        assert!(text.starts_with("error: cuda: out of GPU memory allocating the KV cache (8192 positions)"), "{text}");
        assert!(text.contains("2048.0 MiB") && text.contains("512.0 MiB free"), "{text}");
        assert!(!text.contains("caused by"), "the source repeats the message: {text}");
    }

    #[test]
    fn a_start_up_report_lists_causes_the_message_does_not_say() {
        let e = Error::from(peregrine_engine::Error::from(CudaError::context(
            "batched prefill",
            CudaError::Library("libcublas not found".into()),
        )));
        assert_eq!(report(&e), "error: cuda: batched prefill: libcublas not found");
        #[derive(Debug, thiserror::Error)]
        #[error("loading failed")]
        struct Outer(#[source] std::io::Error);
        let io = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "permission denied");
        assert_eq!(report(&Outer(io)), "error: loading failed\n  caused by: permission denied");
    }
}
