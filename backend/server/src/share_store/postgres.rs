//! The PostgreSQL share store (`postgres://…`), which replicas share: two connections
//! (a share's insert holds one for its transaction while a read uses the other), each
//! re-opened on the next use after it breaks, and one retry of an operation whose
//! connection was lost (a database restart). No TLS: docs/deploy.md says where the
//! link may run. Creations take an advisory lock, so the cap holds across replicas.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::Mutex;
use tokio_postgres::{Client, Config, NoTls};

use super::{NewShare, ID_ATTEMPTS};
use crate::error::{Error, Result};
use crate::ids::{random_id, SHARE_ID_LEN};

/// Connections each replica keeps.
const CONNECTIONS: usize = 2;
/// Connect timeout when the URL sets none (`connect_timeout=` in the URL overrides it).
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest one store operation (connecting included) may take before the request is a 503.
const OPERATION_TIMEOUT: Duration = Duration::from_secs(10);
/// Advisory lock key that serialises schema migrations and capped creations across
/// replicas (an arbitrary constant: "peregrin" in ASCII).
const LOCK_KEY: i64 = 0x7065_7265_6772_696e;

/// The schema, one step per version (step i takes version i to i + 1).
const MIGRATIONS: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS shares (id TEXT PRIMARY KEY, created_at BIGINT NOT NULL, body TEXT NOT NULL);",
    "ALTER TABLE shares ADD COLUMN IF NOT EXISTS expires_at_ms BIGINT;
     CREATE INDEX IF NOT EXISTS shares_expiry ON shares (expires_at_ms) WHERE expires_at_ms IS NOT NULL;",
];

/// A connection slot: empty until first used, emptied when its connection breaks.
type Slot = Mutex<Option<Client>>;

/// The PostgreSQL database.
#[derive(Clone)]
pub struct PgStore {
    config: Arc<Config>,
    slots: Arc<[Slot; CONNECTIONS]>,
    next: Arc<AtomicUsize>,
    label: Arc<str>,
}

/// `postgres://user@host:port/db`: the URL without its password.
pub(super) fn describe(c: &Config) -> String {
    let hosts: Vec<String> = c
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let host = match h {
                tokio_postgres::config::Host::Tcp(name) => name.clone(),
                #[cfg(unix)]
                tokio_postgres::config::Host::Unix(dir) => dir.display().to_string(),
            };
            match c.get_ports().get(i).or(c.get_ports().first()) {
                Some(port) => format!("{host}:{port}"),
                None => host,
            }
        })
        .collect();
    let user = c.get_user().map(|u| format!("{u}@")).unwrap_or_default();
    format!("postgres://{user}{}/{}", hosts.join(","), c.get_dbname().unwrap_or(""))
}

/// The error of a failed query as the request's 503 (`Error::Store`).
fn store_err(e: &tokio_postgres::Error) -> Error {
    match e.as_db_error() {
        Some(db) => Error::Store(format!("PostgreSQL: {}", db.message())),
        None => Error::Store(format!("PostgreSQL: {e}")),
    }
}

impl PgStore {
    /// Connects once (so a wrong URL or a database that is down stops start-up) and
    /// migrates the schema.
    pub async fn connect(config: &Config) -> Result<PgStore> {
        let mut config = config.clone();
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(DEFAULT_CONNECT_TIMEOUT);
        }
        let label: Arc<str> = describe(&config).into();
        let store =
            PgStore { config: Arc::new(config), slots: Arc::new(std::array::from_fn(|_| Mutex::new(None))), next: Arc::default(), label };
        let mut first = store.slots[0].lock().await;
        let client = first.insert(store.open().await?);
        migrate(client).await.map_err(|e| Error::Store(format!("{}: migrating the schema: {}", store.label, store_err(&e))))?;
        drop(first);
        Ok(store)
    }

    pub fn describe(&self) -> String {
        self.label.to_string()
    }

    /// A new connection, its driver running on the runtime until it closes.
    async fn open(&self) -> Result<Client> {
        let (client, connection) =
            self.config.connect(NoTls).await.map_err(|e| Error::Store(format!("cannot reach {}: {e}", self.label)))?;
        let label = self.label.clone();
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!("share store {label}: connection lost: {e}");
            }
        });
        Ok(client)
    }

    /// Runs `op` on one of the connections (opening it if needed); a connection-level
    /// failure empties the slot and is tried once more on a fresh connection. Every
    /// failure is an `Error::Store` (503), and so is an operation past [`OPERATION_TIMEOUT`].
    async fn run<T>(&self, op: impl for<'c> Fn(&'c mut Client) -> BoxFuture<'c, std::result::Result<T, Error>>) -> Result<T> {
        let attempts = async {
            let slot = &self.slots[self.next.fetch_add(1, Ordering::Relaxed) % CONNECTIONS];
            let mut guard = slot.lock().await;
            for attempt in 0..2 {
                let client = match guard.take().filter(|c| !c.is_closed()) {
                    Some(c) => guard.insert(c),
                    None => guard.insert(self.open().await?),
                };
                match op(client).await {
                    Err(Error::Store(msg)) if attempt == 0 && client.is_closed() => {
                        tracing::warn!("share store {}: {msg}; reconnecting", self.label);
                        *guard = None;
                    }
                    other => return other,
                }
            }
            Err(Error::Store(format!("{} is unreachable", self.label)))
        };
        tokio::time::timeout(OPERATION_TIMEOUT, attempts)
            .await
            .map_err(|_| Error::Store(format!("{} did not answer within {} s", self.label, OPERATION_TIMEOUT.as_secs())))?
    }

    pub(crate) async fn insert(&self, row: NewShare) -> Result<String> {
        let row = Arc::new(row);
        self.run(|client| {
            let row = row.clone();
            Box::pin(async move {
                let tx = client.transaction().await.map_err(|e| store_err(&e))?;
                if row.max > 0 {
                    // The lock ends with the transaction: replicas count and insert in turn.
                    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK_KEY]).await.map_err(|e| store_err(&e))?;
                    let live: i64 = tx
                        .query_one("SELECT count(*) FROM shares WHERE expires_at_ms IS NULL OR expires_at_ms > $1", &[&row.now_ms])
                        .await
                        .and_then(|r| r.try_get(0))
                        .map_err(|e| store_err(&e))?;
                    if live as u64 >= row.max {
                        return Err(Error::StoreFull { max: row.max });
                    }
                }
                for _ in 0..ID_ATTEMPTS {
                    let id = random_id(SHARE_ID_LEN)?;
                    let inserted = tx
                        .execute(
                            "INSERT INTO shares (id, created_at, body, expires_at_ms) VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO NOTHING",
                            &[&id, &row.created_at, &row.body, &row.expires_at_ms],
                        )
                        .await
                        .map_err(|e| store_err(&e))?;
                    if inserted == 1 {
                        tx.commit().await.map_err(|e| store_err(&e))?;
                        return Ok(id);
                    }
                }
                Err(Error::Internal("could not find a free share id".into()))
            })
        })
        .await
    }

    /// `(created_at, body)` of the live share `id`.
    pub(crate) async fn get(&self, id: String, now_ms: i64) -> Result<Option<(i64, String)>> {
        self.run(|client| {
            let id = id.clone();
            Box::pin(async move {
                let row = client
                    .query_opt(
                        "SELECT created_at, body FROM shares WHERE id = $1 AND (expires_at_ms IS NULL OR expires_at_ms > $2)",
                        &[&id, &now_ms],
                    )
                    .await
                    .map_err(|e| store_err(&e))?;
                row.map(|r| Ok((r.try_get(0)?, r.try_get(1)?))).transpose().map_err(|e| store_err(&e))
            })
        })
        .await
    }

    pub(crate) async fn remove_expired(&self, now_ms: i64) -> Result<u64> {
        self.run(|client| {
            Box::pin(
                async move { client.execute("DELETE FROM shares WHERE expires_at_ms <= $1", &[&now_ms]).await.map_err(|e| store_err(&e)) },
            )
        })
        .await
    }
}

/// Applies the missing [`MIGRATIONS`] under the advisory lock (replicas starting
/// together migrate one after the other) and records the version.
async fn migrate(client: &mut Client) -> std::result::Result<(), tokio_postgres::Error> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK_KEY]).await?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);").await?;
    let version: i32 = tx.query_opt("SELECT version FROM schema_version", &[]).await?.map(|r| r.try_get(0)).transpose()?.unwrap_or(0);
    let known = MIGRATIONS.len() as i32;
    if version > known {
        // Leave a newer schema alone; the caller reports it.
        tx.batch_execute(&format!(
            "DO $$ BEGIN RAISE EXCEPTION 'schema version {version} is newer than this peregrine knows ({known}); run a newer peregrine'; END $$;"
        ))
        .await?;
    }
    for step in MIGRATIONS.iter().skip(version.max(0) as usize) {
        tx.batch_execute(step).await?;
    }
    tx.execute("DELETE FROM schema_version", &[]).await?;
    tx.execute("INSERT INTO schema_version (version) VALUES ($1)", &[&known]).await?;
    tx.commit().await
}
