//! The SQLite share store (`sqlite:PATH`, default `<data-dir>/shares.sqlite3`): one
//! connection behind a mutex, used from blocking threads; WAL so reads do not wait on
//! a writer. Meant for one server process (replicas share PostgreSQL).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::{NewShare, ID_ATTEMPTS};
use crate::error::{Error, Result};
use crate::ids::{random_id, SHARE_ID_LEN};

/// The schema, one step per version: step i takes the database from version i to i + 1.
/// A file made before versioning (version 0) already has the first step's table.
const MIGRATIONS: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS shares (id TEXT PRIMARY KEY, created_at INTEGER NOT NULL, body TEXT NOT NULL) WITHOUT ROWID;",
    "ALTER TABLE shares ADD COLUMN expires_at_ms INTEGER;
     CREATE INDEX shares_expiry ON shares (expires_at_ms) WHERE expires_at_ms IS NOT NULL;",
];

/// The SQLite database.
#[derive(Clone)]
pub struct SqliteStore {
    conn: Arc<Mutex<Connection>>,
    path: PathBuf,
}

fn store_err(e: impl std::fmt::Display) -> Error {
    Error::Store(e.to_string())
}

impl SqliteStore {
    /// Opens (creating it and its folder if needed) the database at `path` and brings
    /// its schema up to date.
    pub fn open(path: &Path) -> Result<SqliteStore> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| Error::Store(format!("cannot create {}: {e}", dir.display())))?;
        }
        let mut conn = Connection::open(path).map_err(|e| Error::Store(format!("cannot open {}: {e}", path.display())))?;
        conn.pragma_update(None, "journal_mode", "WAL").map_err(|e| Error::Store(format!("cannot use {}: {e}", path.display())))?;
        conn.busy_timeout(std::time::Duration::from_secs(5)).map_err(store_err)?;
        migrate(&mut conn).map_err(|e| Error::Store(format!("{}: {e}", path.display())))?;
        Ok(SqliteStore { conn: Arc::new(Mutex::new(conn)), path: path.to_path_buf() })
    }

    /// Where the database lives.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` on the connection on a blocking thread.
    async fn with<T: Send + 'static>(&self, f: impl FnOnce(&mut Connection) -> Result<T> + Send + 'static) -> Result<T> {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = conn.lock().map_err(|_| Error::Store("database lock poisoned".into()))?;
            f(&mut conn)
        })
        .await
        .map_err(|e| Error::Internal(format!("share task failed: {e}")))?
    }

    pub(crate) async fn insert(&self, row: NewShare) -> Result<String> {
        self.with(move |conn| {
            // IMMEDIATE: the count and the insert see the same table, even with another
            // process on the same file.
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(store_err)?;
            if row.max > 0 {
                let live: i64 = tx
                    .query_row("SELECT count(*) FROM shares WHERE expires_at_ms IS NULL OR expires_at_ms > ?1", [row.now_ms], |r| r.get(0))
                    .map_err(store_err)?;
                if live as u64 >= row.max {
                    return Err(Error::StoreFull { max: row.max });
                }
            }
            for _ in 0..ID_ATTEMPTS {
                let id = random_id(SHARE_ID_LEN)?;
                let inserted = tx
                    .execute(
                        "INSERT OR IGNORE INTO shares (id, created_at, body, expires_at_ms) VALUES (?1, ?2, ?3, ?4)",
                        params![id, row.created_at, row.body, row.expires_at_ms],
                    )
                    .map_err(store_err)?;
                if inserted == 1 {
                    tx.commit().map_err(store_err)?;
                    return Ok(id);
                }
            }
            Err(Error::Internal("could not find a free share id".into()))
        })
        .await
    }

    /// `(created_at, body)` of the live share `id`.
    pub(crate) async fn get(&self, id: String, now_ms: i64) -> Result<Option<(i64, String)>> {
        self.with(move |conn| {
            conn.query_row(
                "SELECT created_at, body FROM shares WHERE id = ?1 AND (expires_at_ms IS NULL OR expires_at_ms > ?2)",
                params![id, now_ms],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(store_err)
        })
        .await
    }

    pub(crate) async fn remove_expired(&self, now_ms: i64) -> Result<u64> {
        self.with(move |conn| conn.execute("DELETE FROM shares WHERE expires_at_ms <= ?1", [now_ms]).map(|n| n as u64).map_err(store_err))
            .await
    }
}

/// Applies the missing [`MIGRATIONS`] in one transaction and records the version.
fn migrate(conn: &mut Connection) -> std::result::Result<(), String> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(|e| e.to_string())?;
    tx.execute_batch("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);").map_err(|e| e.to_string())?;
    let version: i64 =
        tx.query_row("SELECT version FROM schema_version", [], |r| r.get(0)).optional().map_err(|e| e.to_string())?.unwrap_or(0);
    let known = MIGRATIONS.len() as i64;
    if version > known {
        return Err(format!("schema version {version} is newer than this peregrine knows ({known}); run a newer peregrine"));
    }
    for (i, step) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        tx.execute_batch(step).map_err(|e| format!("migrating the schema to version {}: {e}", i + 1))?;
    }
    tx.execute("DELETE FROM schema_version", []).map_err(|e| e.to_string())?;
    tx.execute("INSERT INTO schema_version (version) VALUES (?1)", [known]).map_err(|e| e.to_string())?;
    tx.commit().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_from_before_versioning_is_migrated_and_keeps_its_shares() {
        let dir = std::env::temp_dir().join(format!("peregrine-sqlite-migrate-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("shares.sqlite3");
        let old = Connection::open(&path).unwrap();
        old.execute_batch(
            "CREATE TABLE shares (id TEXT PRIMARY KEY, created_at INTEGER NOT NULL, body TEXT NOT NULL) WITHOUT ROWID;
             INSERT INTO shares VALUES ('AAAAAAAAAAAA', 1700000000, '{\"prompt\":\"old\"}');",
        )
        .unwrap();
        drop(old);
        let store = SqliteStore::open(&path).unwrap();
        let conn = store.conn.lock().unwrap();
        let (version, expiry): (i64, Option<i64>) = conn
            .query_row("SELECT (SELECT version FROM schema_version), expires_at_ms FROM shares WHERE id = 'AAAAAAAAAAAA'", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .unwrap();
        assert_eq!((version, expiry), (MIGRATIONS.len() as i64, None));
        drop(conn);
        // Opening again is a no-op; a version from the future is refused.
        drop(SqliteStore::open(&path).unwrap());
        Connection::open(&path).unwrap().execute("UPDATE schema_version SET version = 99", []).unwrap();
        let Err(e) = SqliteStore::open(&path) else { panic!("a newer schema was accepted") };
        assert!(e.to_string().contains("newer"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
