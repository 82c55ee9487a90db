//! Server settings (limits, timeouts, CORS, keys, proxies) with their documented defaults; the CLI
//! fills them, tests build them directly.

use std::time::Duration;

/// Concurrent requests one client IP may have in flight (0 = no limit): enough for a
/// batch and a queue of one's own, not for the whole queue.
pub const DEFAULT_MAX_PER_CLIENT: usize = 8;
/// Tokens a chat request that names no `max_tokens` may generate (at most the rest of
/// the context), so one request cannot hold the engine for the whole context.
pub const DEFAULT_CHAT_MAX_TOKENS: usize = 2048;
/// A request (queue wait included) is cancelled after this many seconds (0 = never).
pub const DEFAULT_REQUEST_TIMEOUT_SECS: u64 = 600;
/// Largest request body; bigger ones get 413 before any parsing.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;
/// Largest `content` of `/tokenize` (the tokenizer's working memory grows with it).
pub const DEFAULT_MAX_TOKENIZE_BYTES: usize = 256 * 1024;
/// SSE comment sent this often while nothing else is sent (keeps proxies from closing idle streams).
pub const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(5);
/// Live stats are sent at least this often on the playground stream (the engine's clock).
pub use peregrine_engine::STATS_INTERVAL;
/// After a shutdown signal, the running request may finish for this long before it is cancelled.
pub const DEFAULT_SHUTDOWN_GRACE_SECS: u64 = 10;
/// Most stop strings a request may carry.
pub const MAX_STOP_STRINGS: usize = 8;
/// Longest stop string, in bytes.
pub const MAX_STOP_BYTES: usize = 256;
/// Largest output text a share may carry (the prompt limit is `peregrine_api::playground::MAX_PROMPT_BYTES`).
pub const MAX_SHARE_OUTPUT_BYTES: usize = 256 * 1024;
/// Longest `backend` / `device` label a share may carry.
pub const MAX_SHARE_LABEL_BYTES: usize = 256;
/// Retry-After sent with a 429 when no request has finished yet to estimate from.
pub const DEFAULT_RETRY_AFTER_SECS: u64 = 1;
/// Upper bound on the Retry-After estimate.
pub const MAX_RETRY_AFTER_SECS: u64 = 60;

/// What the server enforces besides the engine's queue length.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Concurrent requests per client IP (0 = no limit).
    pub max_per_client: usize,
    /// Whole-request limit, queue wait included; `None` = no limit.
    pub request_timeout: Option<Duration>,
    pub max_body_bytes: usize,
    pub keep_alive: Duration,
    pub shutdown_grace: Duration,
    /// Origins allowed to call the API from other sites; empty = same origin only.
    pub cors_origins: Vec<String>,
    /// Hosts (`Host` header, without the port) the server answers for; `None` = any.
    pub allowed_hosts: Option<Vec<String>>,
    pub connections: ConnectionLimits,
    /// `max_tokens` of a chat request that gives none (capped by the context).
    pub default_max_tokens: usize,
    /// Largest `content` of `/tokenize` (413 beyond).
    pub max_tokenize_bytes: usize,
    /// Keys the API routes require; `None` = open.
    pub api_keys: Option<crate::auth::ApiKeys>,
    /// Proxies whose forwarding headers name the client.
    pub trusted_proxies: crate::proxy::TrustedProxies,
}

/// Default deadline for a request's headers, and for the next request on an idle connection.
pub const DEFAULT_HEADER_TIMEOUT_SECS: u64 = 15;
/// Default deadline for a request's body.
pub const DEFAULT_BODY_TIMEOUT_SECS: u64 = 30;
/// Default cap on open connections (below the usual 1024 descriptors per process).
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;

/// What one connection may hold (connections.rs).
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// A request's headers must arrive within this, and an idle keep-alive connection
    /// closes after it.
    pub header_timeout: Duration,
    /// A request's body must arrive within this (408 otherwise).
    pub body_timeout: Duration,
    /// Open connections served normally (a few more answer `/health` only).
    pub max_connections: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            header_timeout: Duration::from_secs(DEFAULT_HEADER_TIMEOUT_SECS),
            body_timeout: Duration::from_secs(DEFAULT_BODY_TIMEOUT_SECS),
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_per_client: DEFAULT_MAX_PER_CLIENT,
            request_timeout: Some(Duration::from_secs(DEFAULT_REQUEST_TIMEOUT_SECS)),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            keep_alive: DEFAULT_KEEP_ALIVE,
            shutdown_grace: Duration::from_secs(DEFAULT_SHUTDOWN_GRACE_SECS),
            cors_origins: Vec::new(),
            allowed_hosts: None,
            connections: ConnectionLimits::default(),
            default_max_tokens: DEFAULT_CHAT_MAX_TOKENS,
            max_tokenize_bytes: DEFAULT_MAX_TOKENIZE_BYTES,
            api_keys: None,
            trusted_proxies: crate::proxy::TrustedProxies::default(),
        }
    }
}
