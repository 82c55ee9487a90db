//! Who may use the server and how it learns who they are: API keys and trusted
//! proxies (`peregrine serve` flags, flattened into `ServeArgs`).

use std::path::PathBuf;

/// Access-control flags of `peregrine serve`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct AccessArgs {
    /// API key clients must send as `Authorization: Bearer KEY` on /v1, /api, /infill,
    /// /tokenize, /detokenize and /metrics (repeatable; any one is accepted). Default:
    /// no key required.
    #[arg(long = "api-key", value_name = "KEY", env = "PEREGRINE_API_KEY", hide_env_values = true)]
    pub api_keys: Vec<String>,
    /// File with one API key per line (blank lines and `#` comments ignored), in
    /// addition to any --api-key.
    #[arg(long, value_name = "PATH")]
    pub api_key_file: Option<PathBuf>,
    /// Serve /metrics without a key even when keys are required (a scraper on a
    /// private network).
    #[arg(long)]
    pub metrics_public: bool,
    /// Address or CIDR of a reverse proxy whose `Forwarded` / `X-Forwarded-For`
    /// header is believed (repeatable): the client is the rightmost address not in
    /// one of these. Default: no proxy is trusted; the client is the peer address.
    #[arg(long = "trusted-proxy", value_name = "CIDR")]
    pub trusted_proxies: Vec<String>,
}
