//! API keys: with `--api-key` given, the API routes want `Authorization: Bearer KEY`
//! (or Anthropic's `x-api-key: KEY`, which its clients send) and answer 401 (in the
//! route's own error shape, with `WWW-Authenticate`) without
//! it; `/health`, the playground's files and share pages stay public.

use std::path::Path;
use std::sync::Arc;

use axum::extract::Request;
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use crate::access_args::AccessArgs;
use crate::error::{Error, Result};
use crate::openai::error::OpenAiError;

/// The keys the server accepts, kept as digests so a comparison takes the same time
/// whatever the key's length or how much of it matches.
#[derive(Clone)]
pub struct ApiKeys {
    digests: Vec<[u8; 32]>,
    /// `/metrics` answers without a key.
    metrics_public: bool,
}

impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiKeys({} keys, metrics_public: {})", self.digests.len(), self.metrics_public)
    }
}

fn digest(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

/// Equal without an early exit.
fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A key must be one printable token (what a `Bearer` header can carry).
fn check_key(key: &str, origin: &str) -> Result<()> {
    if key.is_empty() {
        return Err(Error::bad(origin, "an API key cannot be empty"));
    }
    if !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Error::bad(origin, "an API key must be printable ASCII without spaces"));
    }
    Ok(())
}

/// The keys of a key file: one per line, blank lines and `#` comments skipped.
fn read_key_file(path: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::bad("api-key-file", format!("cannot read {}: {e}", path.display())))?;
    let keys: Vec<String> = text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).map(str::to_string).collect();
    if keys.is_empty() {
        return Err(Error::bad("api-key-file", format!("{} holds no key", path.display())));
    }
    Ok(keys)
}

impl ApiKeys {
    /// The keys of `--api-key`, `PEREGRINE_API_KEY` and `--api-key-file`; `None` when
    /// none is given (no key required).
    pub fn from_args(args: &AccessArgs) -> Result<Option<ApiKeys>> {
        let mut keys = Vec::new();
        for k in &args.api_keys {
            check_key(k, "api-key")?;
            keys.push(k.clone());
        }
        if let Some(path) = &args.api_key_file {
            for k in read_key_file(path)? {
                check_key(&k, "api-key-file")?;
                keys.push(k);
            }
        }
        Ok(Self::new(&keys, args.metrics_public))
    }

    /// Accepts these keys; `None` for an empty list.
    pub fn new(keys: &[String], metrics_public: bool) -> Option<ApiKeys> {
        (!keys.is_empty()).then(|| ApiKeys { digests: keys.iter().map(|k| digest(k)).collect(), metrics_public })
    }

    /// How many keys are accepted.
    pub fn len(&self) -> usize {
        self.digests.len()
    }

    /// Whether no key is accepted (never true for a built value).
    pub fn is_empty(&self) -> bool {
        self.digests.is_empty()
    }

    /// Whether `token` is one of the keys (every key is compared).
    pub fn accepts(&self, token: &str) -> bool {
        let d = digest(token);
        self.digests.iter().fold(false, |found, k| found | same(k, &d))
    }

    /// Whether `path` needs a key.
    pub fn guards(&self, path: &str) -> bool {
        let metrics = path == "/metrics" || path.starts_with("/metrics/");
        crate::request_context::is_api_path(path) && !(metrics && self.metrics_public)
    }
}

/// The token of an `Authorization: Bearer TOKEN` header (scheme case-insensitive).
fn bearer(request: &Request) -> Option<&str> {
    let value = request.headers().get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// The key of an `x-api-key` header (Anthropic's clients send the key this way).
fn x_api_key(request: &Request) -> Option<&str> {
    request.headers().get("x-api-key")?.to_str().ok().map(str::trim)
}

/// Whether `path` answers errors in OpenAI's shape (the `/v1` routes, their aliases
/// without the prefix, llama.cpp's native routes).
fn openai_shaped(path: &str) -> bool {
    let under = |p: &str| path == p || path.strip_prefix(p).is_some_and(|rest| rest.starts_with('/'));
    ["/v1", "/completion", "/completions", "/chat/completions", "/models", "/responses", "/infill"].iter().any(|p| under(p))
}

/// Refuses a guarded route without a valid key (401 with `WWW-Authenticate`).
pub async fn require_key(keys: Arc<ApiKeys>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    if !keys.guards(path) {
        return next.run(request).await;
    }
    let (error, challenge) = match bearer(&request).or_else(|| x_api_key(&request)) {
        Some(token) if keys.accepts(token) => return next.run(request).await,
        Some(_) => {
            (Error::Unauthorized("the API key is not valid for this server".into()), "Bearer realm=\"peregrine\", error=\"invalid_token\"")
        }
        None => {
            (Error::Unauthorized("this server requires an API key: send `Authorization: Bearer KEY`".into()), "Bearer realm=\"peregrine\"")
        }
    };
    let mut response = if path == "/v1/messages" {
        crate::anthropic::error::AnthropicError(error).into_response()
    } else if openai_shaped(path) {
        OpenAiError(error).into_response()
    } else {
        error.into_response()
    };
    response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(challenge));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_matched_whole() {
        let keys = ApiKeys::new(&["alpha-key".into(), "beta-key".into()], false).unwrap();
        assert!(keys.accepts("alpha-key") && keys.accepts("beta-key"));
        assert!(!keys.accepts("alpha") && !keys.accepts("alpha-key ") && !keys.accepts(""));
        assert!(ApiKeys::new(&[], false).is_none());
    }

    #[test]
    fn api_routes_are_guarded_and_the_page_is_not() {
        let keys = ApiKeys::new(&["k".into()], false).unwrap();
        for p in [
            "/v1",
            "/v1/models",
            "/api/info",
            "/api/shares/abc",
            "/infill",
            "/tokenize",
            "/detokenize",
            "/metrics",
            "/completion",
            "/completions",
            "/props",
            "/apply-template",
            "/chat/completions",
            "/models",
            "/models/x",
        ] {
            assert!(keys.guards(p), "{p}");
        }
        for p in ["/", "/health", "/index.html", "/s/abc", "/v1x", "/apix.js", "/metricsx"] {
            assert!(!keys.guards(p), "{p}");
        }
        assert!(!ApiKeys::new(&["k".into()], true).unwrap().guards("/metrics"));
    }

    #[test]
    fn bad_keys_are_refused_with_the_flag() {
        assert!(check_key("", "api-key").is_err());
        assert!(check_key("has space", "api-key").is_err());
        assert!(check_key("ok-Key_123", "api-key").is_ok());
    }
}
