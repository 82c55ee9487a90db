//! What share creation is held to besides its size checks (routes/shares.rs): a
//! per-client rate, a cap on the shares stored, and their lifetime.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::share_rate::RateLimiter;

/// Shares one client may create (`--share-rate`): a person sharing runs never meets it,
/// a script filling the store does.
pub const DEFAULT_SHARE_RATE: &str = "60/hour";
/// Live shares stored at most (`--share-max`): a share is at most a 1 MiB body, most
/// are a few KiB.
pub const DEFAULT_SHARE_MAX: u64 = 100_000;

/// The limits of share creation; the default (in-process tests) has none.
#[derive(Clone, Default)]
pub struct SharePolicy {
    /// `None`: no rate limit.
    pub rate: Option<RateLimiter>,
    /// Live shares allowed (0 = no cap): more is a 507.
    pub max: u64,
    /// A share's lifetime; `None` = forever.
    pub ttl: Option<Duration>,
}

impl SharePolicy {
    /// Takes one creation for `ip`, or a 429 saying when the next one is allowed.
    pub fn admit(&self, ip: Option<IpAddr>) -> Result<()> {
        let Some(limiter) = &self.rate else { return Ok(()) };
        limiter.admit(ip, Instant::now()).map_err(|wait| Error::ShareRate {
            rate: limiter.rate().to_string(),
            // Whole seconds, rounded up: retrying at Retry-After must succeed.
            retry_after_secs: wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
        })
    }
}
