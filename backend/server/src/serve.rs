//! `peregrine serve`: loads the model, binds the socket and runs the application
//! until Ctrl-C.

use crate::{
    app::{app, AppState},
    cli::ServeArgs,
    engine_start::start_engine,
    error::{Error, Result},
};

/// Runs the server with the given arguments.
pub async fn run(args: ServeArgs) -> Result<()> {
    // Load first: a bad model is reported before the port is taken.
    let engine = start_engine(&args.model, peregrine_engine::handle::DEFAULT_MAX_QUEUE).await?;
    let addr = format!("{}:{}", args.host, args.port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|source| Error::Bind { addr: addr.clone(), source })?;
    if !args.dist.join("index.html").exists() {
        eprintln!("warning: {} has no index.html; build the playground with `trunk build`", args.dist.display());
    }
    let local = listener.local_addr().map_err(|source| Error::Bind { addr: addr.clone(), source })?;
    eprintln!("peregrine listening on http://{local}");
    let state = AppState { dist: args.dist, engine: Some(engine.clone()) };
    let served = axum::serve(listener, app(state))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|source| Error::Bind { addr, source });
    engine.shutdown();
    served
}
