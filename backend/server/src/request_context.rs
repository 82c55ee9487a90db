//! What the server knows of every request from its first byte: an id (the client's
//! `X-Request-Id` when it sent a usable one, else a fresh one; returned on the
//! response), its arrival time (TTFT and latency metrics count from it) and the
//! client's address (through trusted proxies). One access log line per request
//! (`info` for the APIs, `debug` for the page's files and `/health`).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{ConnectInfo, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;

use crate::proxy::TrustedProxies;

/// The request id header, read and written.
pub static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// Longest client-sent id kept (a longer one is replaced, not cut).
pub const MAX_REQUEST_ID_LEN: usize = 128;

/// A request as handlers and jobs see it.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The client's address; `None` for in-process requests without a peer.
    pub client: Option<IpAddr>,
    pub request_id: Arc<str>,
    /// When the request reached the server.
    pub arrived: Instant,
}

/// A client's id is kept when it is short printable ASCII (it goes into logs).
fn usable_id(value: &HeaderValue) -> Option<&str> {
    let s = value.to_str().ok()?;
    (!s.is_empty() && s.len() <= MAX_REQUEST_ID_LEN && s.bytes().all(|b| b.is_ascii_graphic())).then_some(s)
}

fn fresh_id() -> String {
    crate::ids::random_id(22).unwrap_or_else(|_| format!("{:016x}", crate::ids::random_seed()))
}

/// Tags the request (extension [`Caller`]), runs it, returns its id and logs it.
pub async fn track(proxies: Arc<TrustedProxies>, mut request: Request, next: Next) -> Response {
    let arrived = Instant::now();
    let request_id: Arc<str> = request.headers().get(&REQUEST_ID).and_then(usable_id).map(str::to_string).unwrap_or_else(fresh_id).into();
    let peer = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip());
    let client = peer.map(|p| proxies.client(p, request.headers()));
    request.extensions_mut().insert(Caller { client, request_id: request_id.clone(), arrived });
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let mut response = next.run(request).await;
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(REQUEST_ID.clone(), v);
    }
    let status = response.status().as_u16();
    let ms = (arrived.elapsed().as_secs_f64() * 1e4).round() / 10.0;
    let client = client.map(|c| c.to_string());
    // Probes and the page's static files would drown the API's lines.
    if !is_api_path(&path) {
        tracing::debug!(request_id = &*request_id, client, %method, path, status, ms, "http");
    } else {
        tracing::info!(request_id = &*request_id, client, %method, path, status, ms, "http");
    }
    response
}

/// The API routes: logged at `info`, and what API keys guard.
pub fn is_api_path(path: &str) -> bool {
    [
        "/v1",
        "/api",
        "/infill",
        "/tokenize",
        "/detokenize",
        "/metrics",
        "/completion",
        "/completions",
        "/props",
        "/apply-template",
        "/slots",
        "/embedding",
        "/embeddings",
        "/rerank",
        "/reranking",
        "/lora-adapters",
        "/chat/completions",
        "/models",
        "/responses",
    ]
    .iter()
    .any(|p| path == *p || path.strip_prefix(p).is_some_and(|rest| rest.starts_with('/')))
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = std::convert::Infallible;

    /// The tagged caller; an untracked request (a router without the layer) gets a
    /// fresh id, the peer address and the time now.
    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        if let Some(c) = parts.extensions.get::<Caller>() {
            return Ok(c.clone());
        }
        let client = parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip());
        Ok(Caller { client, request_id: fresh_id().into(), arrived: Instant::now() })
    }
}
