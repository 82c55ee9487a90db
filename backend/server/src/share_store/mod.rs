//! The share store: one API over SQLite (one server, a file in the data dir) and
//! PostgreSQL (replicas sharing one database). Both keep one row per share (its JSON
//! body, `created_at`, an optional expiry in ms) and a `schema_version` table that
//! start-up migrates forward.

mod postgres;
mod sqlite;

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use peregrine_api::playground::{Share, ShareRequest};

use crate::error::{Error, Result};

pub use postgres::PgStore;
pub use sqlite::SqliteStore;

/// File name of the SQLite database inside the data directory.
pub const SHARE_DB_FILE: &str = "shares.sqlite3";
/// Fresh ids tried before giving up (a collision among 2^72 ids is not expected at all).
const ID_ATTEMPTS: usize = 4;
/// Longest a background sweep waits between two removals of expired shares.
pub const MAX_SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// Where shares live, as `--share-store` names it.
#[derive(Clone)]
pub enum StoreSpec {
    /// `sqlite:PATH`: a database file (created with its folder).
    Sqlite(PathBuf),
    /// `postgres://…`: libpq's URL form, without TLS.
    Postgres(Box<tokio_postgres::Config>),
}

impl FromStr for StoreSpec {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<StoreSpec, String> {
        if let Some(path) = s.strip_prefix("sqlite:") {
            if path.is_empty() {
                return Err("sqlite: needs a file path, e.g. sqlite:/var/lib/peregrine/shares.sqlite3".into());
            }
            return Ok(StoreSpec::Sqlite(PathBuf::from(path)));
        }
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            // (tokio-postgres's parse errors name the part at fault, never the password.)
            let config = tokio_postgres::Config::from_str(s).map_err(|e| format!("not a PostgreSQL URL: {e}"))?;
            return Ok(StoreSpec::Postgres(Box::new(config)));
        }
        Err("expected sqlite:PATH or postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE".into())
    }
}

/// The store without its password (start-up line, errors).
impl fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreSpec::Sqlite(path) => write!(f, "sqlite:{}", path.display()),
            StoreSpec::Postgres(c) => f.write_str(&postgres::describe(c)),
        }
    }
}

/// As `Display`: a derived `Debug` could print a password.
impl fmt::Debug for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The share database, on one backend or the other.
#[derive(Clone)]
pub enum ShareStore {
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

impl ShareStore {
    /// Opens (creating if needed) the SQLite database in `data_dir`.
    pub fn open(data_dir: &Path) -> Result<ShareStore> {
        SqliteStore::open(&data_dir.join(SHARE_DB_FILE)).map(ShareStore::Sqlite)
    }

    /// Opens or connects to `spec` and migrates its schema.
    pub async fn connect(spec: &StoreSpec) -> Result<ShareStore> {
        match spec {
            StoreSpec::Sqlite(path) => {
                let path = path.clone();
                tokio::task::spawn_blocking(move || SqliteStore::open(&path))
                    .await
                    .map_err(|e| Error::Internal(format!("share task failed: {e}")))?
                    .map(ShareStore::Sqlite)
            }
            StoreSpec::Postgres(config) => PgStore::connect(config).await.map(ShareStore::Postgres),
        }
    }

    /// Where the shares are, without a password.
    pub fn describe(&self) -> String {
        match self {
            ShareStore::Sqlite(s) => s.path().display().to_string(),
            ShareStore::Postgres(p) => p.describe(),
        }
    }

    /// Stores `share` under a new id, to expire after `ttl`; refused with
    /// [`Error::StoreFull`] when `max` (0 = no cap) live shares are stored already.
    pub async fn insert(&self, share: ShareRequest, ttl: Option<Duration>, max: u64) -> Result<Share> {
        let now_ms = unix_ms();
        let row = NewShare {
            body: serde_json::to_string(&share).map_err(|e| Error::Internal(format!("cannot encode a share: {e}")))?,
            created_at: now_ms / 1000,
            now_ms,
            expires_at_ms: ttl.map(|t| now_ms.saturating_add(t.as_millis().min(i64::MAX as u128) as i64)),
            max,
        };
        let id = match self {
            ShareStore::Sqlite(s) => s.insert(row).await?,
            ShareStore::Postgres(p) => p.insert(row).await?,
        };
        Ok(Share { id, created_at: (now_ms / 1000) as u64, share })
    }

    /// The live share with this id, if any (an expired one is gone at once).
    pub async fn get(&self, id: String) -> Result<Option<Share>> {
        let now_ms = unix_ms();
        let row = match self {
            ShareStore::Sqlite(s) => s.get(id.clone(), now_ms).await?,
            ShareStore::Postgres(p) => p.get(id.clone(), now_ms).await?,
        };
        let Some((created_at, body)) = row else { return Ok(None) };
        let share: ShareRequest = serde_json::from_str(&body).map_err(|e| Error::Internal(format!("share {id} is unreadable: {e}")))?;
        Ok(Some(Share { id, created_at: created_at.max(0) as u64, share }))
    }

    /// Deletes the shares that have expired; returns how many.
    pub async fn remove_expired(&self) -> Result<u64> {
        let now_ms = unix_ms();
        match self {
            ShareStore::Sqlite(s) => s.remove_expired(now_ms).await,
            ShareStore::Postgres(p) => p.remove_expired(now_ms).await,
        }
    }
}

/// A share on its way into a backend: what both backends store and check.
pub(crate) struct NewShare {
    pub body: String,
    /// Seconds since the epoch (what `Share::created_at` reports).
    pub created_at: i64,
    pub now_ms: i64,
    pub expires_at_ms: Option<i64>,
    /// Live shares allowed (0 = no cap).
    pub max: u64,
}

/// Milliseconds since the Unix epoch (expiry is kept to the millisecond, so a 2 s
/// share lives 2 s, not 1–2).
fn unix_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// How often the background sweep removes expired shares: a quarter of the lifetime,
/// between one second and [`MAX_SWEEP_INTERVAL`]. (Reads already skip expired shares;
/// the sweep only frees their space.)
pub fn sweep_interval(ttl: Option<Duration>) -> Duration {
    ttl.map_or(MAX_SWEEP_INTERVAL, |t| (t / 4).clamp(Duration::from_secs(1), MAX_SWEEP_INTERVAL))
}

/// Removes expired shares every `every` until the runtime stops; a failing store is
/// logged and tried again next time.
pub fn spawn_sweeper(store: ShareStore, every: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            match store.remove_expired().await {
                Ok(0) => {}
                Ok(n) => tracing::info!("removed {n} expired shares"),
                Err(e) => tracing::warn!("removing expired shares: {e}"),
            }
        }
    })
}

/// `${XDG_DATA_HOME:-~/.local/share}/peregrine`.
pub fn default_data_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_DATA_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .map(|d| d.join("peregrine"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_hide_the_password() {
        assert!(matches!("sqlite:/tmp/x.db".parse::<StoreSpec>(), Ok(StoreSpec::Sqlite(p)) if p == Path::new("/tmp/x.db")));
        let pg: StoreSpec = "postgres://app:s3cret@db.internal:5433/peregrine".parse().unwrap();
        let shown = format!("{pg} {pg:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("postgres://app@db.internal:5433/peregrine"), "{shown}");
        for bad in ["", "sqlite:", "mysql://x", "/var/lib/shares.sqlite3", "postgres://x:y@h:notaport/db"] {
            assert!(bad.parse::<StoreSpec>().is_err(), "{bad}");
        }
    }

    #[test]
    fn sweeps_follow_the_lifetime() {
        assert_eq!(sweep_interval(None), MAX_SWEEP_INTERVAL);
        assert_eq!(sweep_interval(Some(Duration::from_secs(2))), Duration::from_secs(1));
        assert_eq!(sweep_interval(Some(Duration::from_secs(40))), Duration::from_secs(10));
        assert_eq!(sweep_interval(Some(Duration::from_secs(86_400))), MAX_SWEEP_INTERVAL);
    }
}
