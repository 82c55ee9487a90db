//! The accept loop: hyper serves each connection with a deadline for a request's
//! headers (which also ends idle keep-alive connections and slow-header clients), a
//! cap on open connections, and a few spare ones beyond the cap that answer only
//! `/health` (every other path gets a clear 503), so a flood of sockets can neither
//! exhaust the process's file descriptors nor hide that the server is alive.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{header, HeaderValue, Request};
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt;

use crate::config::ConnectionLimits;
use crate::error::Error;

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
    let graceful = GracefulShutdown::new();
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
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let (permit, over_cap) = match normal.clone().try_acquire_owned() {
            Ok(p) => (p, false),
            Err(_) => match spare.clone().try_acquire_owned() {
                Ok(p) => (p, true),
                Err(_) => continue, // dropping the socket closes it
            },
        };
        let router = router.clone();
        let body_deadline = BodyDeadline(limits.body_timeout);
        let max = limits.max_connections;
        let service = tower::service_fn(move |mut req: Request<Incoming>| {
            let router = router.clone();
            async move {
                req.extensions_mut().insert(ConnectInfo(peer));
                req.extensions_mut().insert(body_deadline);
                if over_cap && req.uri().path() != "/health" {
                    return Ok::<Response, Infallible>(too_many(max));
                }
                router.oneshot(req.map(Body::new)).await
            }
        });
        let builder = builder.clone();
        let watcher = graceful.watcher();
        let header_timeout = limits.header_timeout;
        tokio::spawn(async move {
            // hyper's header deadline starts once it knows the protocol, that is at the
            // first bytes: a socket that sends none is closed at the same deadline here.
            let first = tokio::time::timeout(header_timeout, stream.peek(&mut [0u8; 1])).await;
            if matches!(first, Ok(Ok(n)) if n > 0) {
                let conn = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
                let _ = watcher.watch(conn).await;
            }
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// The answer on a spare connection: busy, and this connection closes.
fn too_many(max: usize) -> Response {
    let mut r = Error::Unavailable(format!("the server has its limit of {max} open connections; try again shortly")).into_response();
    r.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}
