//! `peregrine serve`'s share flags (store, rate, cap, lifetime), flattened into
//! `ServeArgs`, and the store and policy they make.

use std::path::Path;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::share_policy::{SharePolicy, DEFAULT_SHARE_MAX, DEFAULT_SHARE_RATE};
use crate::share_rate::{Rate, RateLimiter};
use crate::share_store::{default_data_dir, ShareStore, StoreSpec, SHARE_DB_FILE};

/// Share links: where they are stored and how many may be made.
#[derive(Debug, Clone, clap::Args)]
pub struct ShareArgs {
    /// Where share links are stored: sqlite:PATH, or postgres://USER[:PASSWORD]@HOST[:PORT]/DB
    /// for replicas sharing one database (no TLS: loopback or a private network).
    /// Default: sqlite:<data-dir>/shares.sqlite3.
    #[arg(long, env = "PEREGRINE_SHARE_STORE", hide_env_values = true, value_name = "STORE")]
    pub share_store: Option<StoreSpec>,
    /// Share links one client IP may create: N/second|minute|hour|day (N at once, then
    /// one every PERIOD/N; more get 429); 0 = no limit.
    #[arg(long, default_value = DEFAULT_SHARE_RATE, value_name = "N/PERIOD")]
    pub share_rate: Rate,
    /// Share links stored at most (0 = no cap); a new one beyond it is refused (507).
    #[arg(long, default_value_t = DEFAULT_SHARE_MAX, value_name = "N")]
    pub share_max: u64,
    /// How long a share link lives, e.g. 90s, 45m, 12h, 30d; an expired one is 404 and
    /// removed. Default: forever.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub share_ttl: Option<Duration>,
}

impl ShareArgs {
    /// Opens the store: `--share-store`, else the SQLite file in the data dir. A store
    /// that cannot be used stops start-up naming the flag that chose it.
    pub async fn open(&self, data_dir: Option<&Path>) -> Result<ShareStore> {
        let (spec, flag) = match &self.share_store {
            Some(spec) => (spec.clone(), "share-store"),
            None => {
                let dir = data_dir
                    .map(Path::to_path_buf)
                    .or_else(default_data_dir)
                    .ok_or_else(|| Error::bad("data-dir", "neither XDG_DATA_HOME nor HOME is set; pass --data-dir or --share-store"))?;
                (StoreSpec::Sqlite(dir.join(SHARE_DB_FILE)), "data-dir")
            }
        };
        ShareStore::connect(&spec).await.map_err(|e| match e {
            Error::Store(msg) => Error::bad(flag, msg),
            other => other,
        })
    }

    /// The creation limits these flags ask for.
    pub fn policy(&self) -> SharePolicy {
        SharePolicy { rate: RateLimiter::new(self.share_rate), max: self.share_max, ttl: self.share_ttl.filter(|t| !t.is_zero()) }
    }
}

/// `90s`, `45m`, `12h`, `30d` (a bare number is seconds).
pub fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    let s = s.trim();
    let bad = || format!("`{s}` is not a duration such as 90s, 45m, 12h or 30d");
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let n: u64 = s[..digits].parse().map_err(|_| bad())?;
    let unit = match &s[digits..] {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    n.checked_mul(unit).map(Duration::from_secs).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("12h"), Ok(Duration::from_secs(43_200)));
        assert_eq!(parse_duration("30d"), Ok(Duration::from_secs(2_592_000)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        for bad in ["", "d", "1w", "1.5h", "-3s", "99999999999999999999d"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
