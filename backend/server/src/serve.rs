//! `peregrine serve`: binds the socket and runs the application until Ctrl-C.

use crate::{
    app::{app, AppState},
    cli::ServeArgs,
    error::{Error, Result},
};

/// Runs the server with the given arguments.
pub async fn run(args: ServeArgs) -> Result<()> {
    let addr = format!("{}:{}", args.host, args.port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|source| Error::Bind { addr: addr.clone(), source })?;
    if !args.dist.join("index.html").exists() {
        eprintln!("warning: {} has no index.html; build the playground with `trunk build`", args.dist.display());
    }
    let local = listener.local_addr().map_err(|source| Error::Bind { addr: addr.clone(), source })?;
    eprintln!("peregrine listening on http://{local}");
    let state = AppState { dist: args.dist };
    axum::serve(listener, app(state))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|source| Error::Bind { addr, source })
}
