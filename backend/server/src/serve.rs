//! `peregrine serve`: checks the arguments, opens the share store, loads the model,
//! binds and serves until Ctrl-C or SIGTERM; then queued requests are refused and the
//! running one gets a grace period before it is cancelled. The model loads before the
//! port is taken, so a load that fails (a GPU out of memory, a corrupt file) ends the
//! process with its error and never leaves a listener that cannot serve.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use peregrine_engine::EngineLimits;
use tokio::net::TcpListener;

use crate::app::{app, AppState};
use crate::cli::ServeArgs;
use crate::config::{ConnectionLimits, Settings};
use crate::engine_slot::{EngineSlot, ServedNames};
use crate::engine_start::{choose_model, load_engine, model_id};
use crate::error::{Error, Result};
use crate::static_files::PlaygroundFiles;

/// Runs the server with the given arguments.
pub async fn run(args: ServeArgs) -> Result<()> {
    // Fail fast on a bad model path or data dir, before the port is taken.
    let choice = choose_model(&args.model)?;
    let names = if args.served_model_names.is_empty() {
        ServedNames::from(model_id(&choice.path))
    } else {
        ServedNames::new(args.served_model_names.clone())?
    };
    let api_keys = crate::auth::ApiKeys::from_args(&args.access)?;
    let trusted_proxies = crate::proxy::TrustedProxies::parse(&args.access.trusted_proxies)?;
    let shares = args.shares.open(args.data_dir.as_deref()).await?;
    let settings = Settings {
        max_per_client: args.max_per_client,
        request_timeout: (args.request_timeout > 0).then(|| Duration::from_secs(args.request_timeout)),
        shutdown_grace: Duration::from_secs(args.shutdown_grace),
        cors_origins: args.cors_origins.clone(),
        default_max_tokens: args.default_max_tokens.max(1),
        max_tokenize_bytes: args.max_tokenize_bytes,
        connections: ConnectionLimits {
            header_timeout: Duration::from_secs(args.header_timeout.max(1)),
            body_timeout: Duration::from_secs(args.body_timeout.max(1)),
            max_connections: args.max_connections.max(1),
        },
        api_keys,
        trusted_proxies,
        ..Settings::default()
    };
    let limits = EngineLimits { max_queue: args.max_queue, max_batch: args.max_batch, kv_budget: args.kv_budget, speculative: args.speculative };
    let handle = load_engine(&choice, limits).await?;
    let addr = format!("{}:{}", args.host, args.port);
    let listener = TcpListener::bind(&addr).await.map_err(|source| Error::Bind { addr: addr.clone(), source })?;
    let bound = listener.local_addr().map_err(|source| Error::Bind { addr: addr.clone(), source })?;
    let settings = Settings { allowed_hosts: allowed_hosts(&args.allowed_hosts, bound), ..settings };
    let playground = match &args.dist {
        Some(dir) => {
            if !dir.join("index.html").exists() {
                eprintln!("warning: {} has no index.html; build the playground with `trunk build`", dir.display());
            }
            PlaygroundFiles::Dir(dir.clone())
        }
        None => {
            if crate::embedded_playground::embedded().index_html().is_none() {
                eprintln!("warning: this binary carries no playground (frontend/bundle was empty); pass --dist DIR");
            }
            PlaygroundFiles::Embedded
        }
    };
    let local = listener.local_addr().map_err(|source| Error::Bind { addr: addr.clone(), source })?;
    eprintln!("peregrine listening on http://{local} (shares in {})", shares.describe());
    let policy = args.shares.policy();
    crate::share_store::spawn_sweeper(shares.clone(), crate::share_store::sweep_interval(policy.ttl));
    match &settings.api_keys {
        Some(keys) => eprintln!(
            "API keys: {} accepted (required on /v1, /api, /infill, /tokenize, /detokenize{})",
            keys.len(),
            if args.access.metrics_public { "" } else { ", /metrics" }
        ),
        None if !local.ip().is_loopback() => eprintln!("warning: no --api-key: anyone who reaches {local} can use the API"),
        None => {}
    }

    let state = AppState::serving(playground)
        .with_engine_slot(EngineSlot::ready(handle, names.clone()))
        .with_model_name(names.id())
        .with_shares(shares)
        .with_share_policy(policy)
        .with_settings(settings);
    let stop = async move {
        shutdown_signal().await;
        eprintln!("shutting down");
    };
    serve_on(listener, state, stop).await.map_err(|source| Error::Bind { addr, source })
}

/// Serves `state` on `listener` until `stop` resolves, then shuts down gracefully:
/// the engine refuses new work and fails queued requests, the running request has
/// `settings.shutdown_grace` to finish before it is cancelled, open streams end.
pub async fn serve_on(listener: TcpListener, state: AppState, stop: impl Future<Output = ()> + Send + 'static) -> std::io::Result<()> {
    let slot = state.engine.clone();
    let grace = state.settings.shutdown_grace;
    let limits = state.settings.connections;
    let stop = async move {
        stop.await;
        if let Some(engine) = slot.ready_engine() {
            engine.handle.shutdown();
            let handle = engine.handle.clone();
            tokio::spawn(async move {
                tokio::time::sleep(grace).await;
                handle.cancel_running();
            });
        }
    };
    crate::connections::serve(listener, app(state), limits, stop).await
}

/// The hosts to answer for: the ones given (lower case, ports dropped), else on a
/// loopback address the loopback names, else any (`None`).
pub fn allowed_hosts(given: &[String], bound: SocketAddr) -> Option<Vec<String>> {
    if !given.is_empty() {
        return Some(given.iter().map(|h| crate::security::host_of(h)).collect());
    }
    bound.ip().is_loopback().then(|| crate::security::LOOPBACK_HOSTS.iter().map(|h| h.to_string()).collect())
}

/// Ctrl-C, or SIGTERM on Unix.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
