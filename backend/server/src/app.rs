//! The axum application: shared state, every route, and the layers around them
//! (body limit, CORS, compression, static playground files).

use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::http::{header, HeaderValue, Method};
use axum::routing::{any, get, post};
use axum::Router;
use peregrine_engine::EngineHandle;
use tower_http::compression::CompressionLayer;
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::client_limit::ClientLimiter;
use crate::config::Settings;
use crate::engine_slot::EngineSlot;
use crate::metrics::Metrics;
use crate::routes;
use crate::share_policy::SharePolicy;
use crate::share_store::ShareStore;
use crate::static_files::PlaygroundFiles;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    /// The built playground (`index.html` and hashed assets).
    pub playground: PlaygroundFiles,
    pub engine: EngineSlot,
    /// `None`: share links are disabled (503).
    pub shares: Option<ShareStore>,
    /// Creation limits of share links (rate, cap, lifetime).
    pub share_policy: SharePolicy,
    pub settings: Arc<Settings>,
    pub metrics: Arc<Metrics>,
    pub clients: ClientLimiter,
}

impl AppState {
    /// A server without engine or share store (static files from `dist` and /health only).
    pub fn new(dist: impl Into<PathBuf>) -> Self {
        Self::serving(PlaygroundFiles::Dir(dist.into()))
    }

    /// Like [`AppState::new`] with the playground this binary carries.
    pub fn embedded() -> Self {
        Self::serving(PlaygroundFiles::Embedded)
    }

    /// Like [`AppState::new`] with these playground files.
    pub fn serving(playground: PlaygroundFiles) -> Self {
        AppState {
            playground,
            engine: EngineSlot::absent(),
            shares: None,
            share_policy: SharePolicy::default(),
            settings: Arc::new(Settings::default()),
            metrics: Arc::new(Metrics::default()),
            clients: ClientLimiter::new(0),
        }
    }

    /// With a ready engine known by `names` (or one id).
    pub fn with_engine(mut self, engine: EngineHandle, names: impl Into<crate::engine_slot::ServedNames>) -> Self {
        let names = names.into();
        self = self.with_model_name(names.id());
        self.engine = EngineSlot::ready(engine, names);
        self
    }

    /// Labels the metrics with this model name (before serving: counts start afresh).
    pub fn with_model_name(mut self, name: &str) -> Self {
        self.metrics = Arc::new(Metrics::for_model(name));
        self
    }

    /// With an engine slot filled later (loading in the background).
    pub fn with_engine_slot(mut self, slot: EngineSlot) -> Self {
        self.engine = slot;
        self
    }

    /// With share links stored in `store`.
    pub fn with_shares(mut self, store: ShareStore) -> Self {
        self.shares = Some(store);
        self
    }

    /// With these share creation limits.
    pub fn with_share_policy(mut self, policy: SharePolicy) -> Self {
        self.share_policy = policy;
        self
    }

    /// With these limits.
    pub fn with_settings(mut self, settings: Settings) -> Self {
        self.clients = ClientLimiter::new(settings.max_per_client);
        self.settings = Arc::new(settings);
        self
    }
}

/// Builds the whole application; tests drive it in-process or on a real port.
pub fn app(state: AppState) -> Router {
    let mut router = Router::new()
        .route("/health", get(routes::health::health))
        .route("/metrics", get(routes::metrics::metrics))
        .route("/api/info", get(routes::info::info))
        .route("/api/generate", post(routes::generate::generate))
        .route("/api/shares", post(routes::shares::create))
        .route("/api/shares/{id}", get(routes::shares::get))
        // Unknown API paths are JSON 404s, not the playground page.
        .route("/api/{*rest}", any(routes::not_found))
        .route("/infill", post(routes::infill::infill))
        .route("/tokenize", post(routes::tokenize::tokenize))
        .route("/detokenize", post(routes::tokenize::detokenize))
        .route("/completion", post(routes::completion::completion))
        .route("/props", get(routes::llama_meta::props))
        .route("/apply-template", post(routes::llama_meta::apply_template))
        .nest("/v1", crate::openai::router())
        .merge(crate::openai::routes());
    for path in routes::NOT_SERVED {
        router = router.route(path, any(routes::not_served)).route(&format!("{path}/{{*rest}}"), any(routes::not_served));
    }
    let mut router = router
        .fallback_service(crate::static_files::service(&state.playground))
        .layer(DefaultBodyLimit::max(state.settings.max_body_bytes));
    if let Some(keys) = &state.settings.api_keys {
        // Inside CORS: a preflight carries no key, and a 401 needs CORS headers to be read.
        let keys = Arc::new(keys.clone());
        router = router.layer(axum::middleware::from_fn(move |req, next| crate::auth::require_key(keys.clone(), req, next)));
    }
    if let Some(cors) = cors_layer(&state.settings.cors_origins) {
        router = router.layer(cors);
    }
    let index = state.playground.index_html();
    let csp = crate::security::content_security_policy(index.as_deref());
    router = router.layer(axum::middleware::from_fn(move |req, next| crate::security::add_headers(csp.clone(), req, next)));
    if let Some(hosts) = &state.settings.allowed_hosts {
        let hosts = Arc::new(hosts.clone());
        // Around every route: a refused host reaches none (its refusal gets the headers too).
        router = router.layer(axum::middleware::from_fn(move |req, next| crate::security::check_host(hosts.clone(), req, next)));
    }
    // Outside the host check, so refused requests are logged with their id too.
    let proxies = Arc::new(state.settings.trusted_proxies.clone());
    router = router.layer(axum::middleware::from_fn(move |req, next| crate::request_context::track(proxies.clone(), req, next)));
    // The default predicate leaves text/event-stream uncompressed, so SSE is not buffered.
    router.layer(CompressionLayer::new()).with_state(state)
}

/// CORS for the configured origins; none configured = same origin only (no layer).
fn cors_layer(origins: &[String]) -> Option<CorsLayer> {
    if origins.is_empty() {
        return None;
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(origins.iter().filter_map(|o| HeaderValue::from_str(o).ok()))
    };
    Some(CorsLayer::new().allow_origin(allow).allow_methods([Method::GET, Method::POST]).allow_headers([
        header::CONTENT_TYPE,
        header::AUTHORIZATION,
        header::HeaderName::from_static("x-api-key"),
    ]))
}
