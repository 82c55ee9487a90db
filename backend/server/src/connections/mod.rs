//! The accept loop: hyper serves each connection with a deadline for a request's
//! headers (which also ends idle keep-alive connections and slow-header clients) and a
//! cap on open connections. A new arrival at the cap takes the place of the
//! connection idle the longest (which closes), so idle sockets can neither exhaust the process's file
//! descriptors nor lock others out; when every connection is busy, a few spare ones
//! answer only `/health` (every other path gets a clear 503) and sockets beyond them
//! are closed.

mod idle;

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{header, HeaderValue, Request};
use axum::response::{IntoResponse, Response};
use axum::Router;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tower::ServiceExt;

use crate::config::ConnectionLimits;
use crate::error::Error;
use idle::{Registered, Registry};

/// Connections beyond `max_connections` that still answer `/health`.
pub const HEALTH_HEADROOM: usize = 16;

/// How long a request's body may take to arrive, as a request extension (JsonBody reads it).
#[derive(Debug, Clone, Copy)]
pub struct BodyDeadline(pub Duration);

/// Serves `router` on `listener` until `stop` resolves, then stops accepting and waits
/// for the open connections to finish (idle ones close at once).
pub async fn serve(listener: TcpListener, router: Router, limits: ConnectionLimits, stop: impl Future<Output = ()>) -> std::io::Result<()> {
    let normal = Arc::new(Semaphore::new(limits.max_connections));
    let spare = Arc::new(Semaphore::new(HEALTH_HEADROOM));
    let registry = Registry::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
    builder.http2().timer(TokioTimer::new()).keep_alive_interval(limits.header_timeout);
    tokio::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors and the like: wait for some to close rather than spin.
                    tracing::warn!("accept failed: {e}");
                    drop(registry.take_oldest_idle_place());
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        // At the cap: take the place of the longest-idle connection (which closes);
        // when all are busy, a spare place or none.
        let place = normal.clone().try_acquire_owned().ok().or_else(|| registry.take_oldest_idle_place());
        let spare = match place {
            Some(_) => None,
            None => match spare.clone().try_acquire_owned() {
                Ok(p) => Some(p),
                Err(_) => continue, // dropping the socket closes it
            },
        };
        let connection = registry.register(place);
        let (router, builder) = (router.clone(), builder.clone());
        tokio::spawn(async move {
            serve_connection(stream, peer, connection, router, builder, limits).await;
            drop(spare);
        });
    }
    drop(listener);
    // Shutdown: every connection closes once its responses are sent; wait for all.
    registry.close_all();
    let _ = normal.acquire_many(limits.max_connections as u32).await;
    let _ = spare.acquire_many(HEALTH_HEADROOM as u32).await;
    Ok(())
}

/// One connection from its first byte to its close; it stays registered (holding its
/// place, unless an arrival took it over) until then. One without a place is a spare.
async fn serve_connection(
    stream: TcpStream,
    peer: std::net::SocketAddr,
    registered: Registered,
    router: Router,
    builder: auto::Builder<TokioExecutor>,
    limits: ConnectionLimits,
) {
    let connection = registered.connection.clone();
    let health_only = !connection.has_place();
    // hyper's header deadline starts once it knows the protocol, that is at the first
    // bytes: a socket that sends none is closed at the same deadline here (or evicted).
    let mut byte = [0u8; 1];
    let first = tokio::select! {
        first = tokio::time::timeout(limits.header_timeout, stream.peek(&mut byte)) => first,
        () = connection.closing() => return,
    };
    if !matches!(first, Ok(Ok(n)) if n > 0) {
        return;
    }
    let body_deadline = BodyDeadline(limits.body_timeout);
    let max = limits.max_connections;
    let on_request = connection.clone();
    let service = tower::service_fn(move |mut req: Request<Incoming>| {
        let router = router.clone();
        let busy = on_request.request_started();
        async move {
            req.extensions_mut().insert(ConnectInfo(peer));
            req.extensions_mut().insert(body_deadline);
            if health_only && req.uri().path() != "/health" {
                return Ok::<Response, Infallible>(too_many(max));
            }
            let response = router.oneshot(req.map(Body::new)).await?;
            // Busy until the body is sent (or dropped): a streaming answer is not idle.
            Ok(response.map(|body| {
                Body::new(body.map_frame(move |frame| {
                    let _busy = &busy;
                    frame
                }))
            }))
        }
    });
    let conn = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
    tokio::pin!(conn);
    let mut closing = false;
    loop {
        tokio::select! {
            _ = conn.as_mut() => break,
            () = connection.closing(), if !closing => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
    drop(registered);
}

/// The answer on a spare connection: busy, and this connection closes.
fn too_many(max: usize) -> Response {
    let mut r = Error::Unavailable(format!("the server has its limit of {max} open connections; try again shortly")).into_response();
    r.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}
