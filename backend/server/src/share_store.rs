//! Share links in SQLite (`<data-dir>/shares.sqlite3`): one row per share with its
//! JSON body; ids are 72 random bits. The connection sits behind a mutex and is used
//! from blocking threads.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use peregrine_api::playground::{Share, ShareRequest};
use rusqlite::{params, Connection, OptionalExtension};

use crate::error::{Error, Result};
use crate::ids::{random_id, unix_now, SHARE_ID_LEN};

/// File name of the database inside the data directory.
pub const SHARE_DB_FILE: &str = "shares.sqlite3";
/// Fresh ids tried before giving up (a collision among 2^72 ids is not expected at all).
const ID_ATTEMPTS: usize = 4;

/// The share database.
#[derive(Clone)]
pub struct ShareStore {
    conn: Arc<Mutex<Connection>>,
    path: PathBuf,
}

fn store_err(e: impl std::fmt::Display) -> Error {
    Error::Store(e.to_string())
}

impl ShareStore {
    /// Opens (creating if needed) the database in `data_dir`.
    pub fn open(data_dir: &Path) -> Result<ShareStore> {
        std::fs::create_dir_all(data_dir).map_err(|e| Error::Store(format!("cannot create {}: {e}", data_dir.display())))?;
        let path = data_dir.join(SHARE_DB_FILE);
        let conn = Connection::open(&path).map_err(|e| Error::Store(format!("cannot open {}: {e}", path.display())))?;
        conn.pragma_update(None, "journal_mode", "WAL").map_err(store_err)?;
        conn.busy_timeout(std::time::Duration::from_secs(5)).map_err(store_err)?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS shares (id TEXT PRIMARY KEY, created_at INTEGER NOT NULL, body TEXT NOT NULL) WITHOUT ROWID;",
        )
        .map_err(store_err)?;
        Ok(ShareStore { conn: Arc::new(Mutex::new(conn)), path })
    }

    /// Where the database lives.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stores `share` under a new id.
    pub async fn insert(&self, share: ShareRequest) -> Result<Share> {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || {
            let body = serde_json::to_string(&share).map_err(store_err)?;
            let created_at = unix_now();
            let conn = conn.lock().map_err(|_| Error::Store("database lock poisoned".into()))?;
            for _ in 0..ID_ATTEMPTS {
                let id = random_id(SHARE_ID_LEN)?;
                let inserted = conn
                    .execute(
                        "INSERT OR IGNORE INTO shares (id, created_at, body) VALUES (?1, ?2, ?3)",
                        params![id, created_at as i64, body],
                    )
                    .map_err(store_err)?;
                if inserted == 1 {
                    return Ok(Share { id, created_at, share });
                }
            }
            Err(Error::Store("could not find a free share id".into()))
        })
        .await
        .map_err(|e| Error::Internal(format!("share task failed: {e}")))?
    }

    /// The share with this id, if any.
    pub async fn get(&self, id: String) -> Result<Option<Share>> {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || {
            let conn = conn.lock().map_err(|_| Error::Store("database lock poisoned".into()))?;
            let row: Option<(i64, String)> = conn
                .query_row("SELECT created_at, body FROM shares WHERE id = ?1", params![id], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
                .map_err(store_err)?;
            match row {
                None => Ok(None),
                Some((created_at, body)) => {
                    let share: ShareRequest =
                        serde_json::from_str(&body).map_err(|e| Error::Store(format!("share {id} is unreadable: {e}")))?;
                    Ok(Some(Share { id, created_at: created_at.max(0) as u64, share }))
                }
            }
        })
        .await
        .map_err(|e| Error::Internal(format!("share task failed: {e}")))?
    }
}

/// `${XDG_DATA_HOME:-~/.local/share}/peregrine`.
pub fn default_data_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_DATA_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .map(|d| d.join("peregrine"))
}
