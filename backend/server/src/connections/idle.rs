//! The open connections and which of them are idle (no request in flight, or not a
//! byte sent yet), so that a new arrival at the connection cap can take the place of
//! the one idle the longest instead of being turned away: a flood of idle sockets
//! evicts itself.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::{watch, OwnedSemaphorePermit};

/// One connection's state, shared by its task, its requests and the registry.
pub struct Connection {
    /// Requests whose response has not been sent completely.
    busy: AtomicUsize,
    /// Milliseconds after the registry's start when it last became idle.
    idle_since: AtomicU64,
    /// Its place under the connection cap; taken by the arrival that evicts it.
    place: Mutex<Option<OwnedSemaphorePermit>>,
    /// Turns true when the connection's task should close it.
    close: watch::Sender<bool>,
    epoch: Instant,
}

impl Connection {
    /// Resolves once the connection has been asked to close.
    pub async fn closing(&self) {
        let _ = self.close.subscribe().wait_for(|close| *close).await;
    }

    /// Whether it holds a place under the cap (a spare does not, nor one evicted).
    pub fn has_place(&self) -> bool {
        self.place.lock().unwrap_or_else(|p| p.into_inner()).is_some()
    }

    /// A request began on this connection; dropping the guard (when its response
    /// body has been sent or dropped) makes the connection idle again.
    pub fn request_started(self: &Arc<Self>) -> BusyGuard {
        self.busy.fetch_add(1, Ordering::AcqRel);
        BusyGuard(self.clone())
    }
}

/// Held while one request of a connection is in flight.
pub struct BusyGuard(Arc<Connection>);

impl Drop for BusyGuard {
    fn drop(&mut self) {
        let c = &self.0;
        c.idle_since.store(c.epoch.elapsed().as_millis() as u64, Ordering::Release);
        c.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Every open connection, by id.
pub struct Registry {
    open: Mutex<HashMap<u64, Arc<Connection>>>,
    next: AtomicU64,
    /// Set by `close_all`: a connection registered later closes at once.
    closing: AtomicBool,
    epoch: Instant,
}

/// Removes a connection from the registry when its task ends.
pub struct Registered {
    registry: Arc<Registry>,
    id: u64,
    pub connection: Arc<Connection>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.registry.open.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.id);
        drop(self.connection.place.lock().unwrap_or_else(|p| p.into_inner()).take());
    }
}

impl Registry {
    pub fn new() -> Arc<Registry> {
        Arc::new(Registry {
            open: Mutex::new(HashMap::new()),
            next: AtomicU64::new(0),
            closing: AtomicBool::new(false),
            epoch: Instant::now(),
        })
    }

    /// Adds a new connection (idle from now) holding `place` under the cap; one without
    /// (a spare) is never evicted.
    pub fn register(self: &Arc<Self>, place: Option<OwnedSemaphorePermit>) -> Registered {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let connection = Arc::new(Connection {
            busy: AtomicUsize::new(0),
            idle_since: AtomicU64::new(self.epoch.elapsed().as_millis() as u64),
            place: Mutex::new(place),
            close: watch::Sender::new(false),
            epoch: self.epoch,
        });
        self.open.lock().unwrap_or_else(|p| p.into_inner()).insert(id, connection.clone());
        if self.closing.load(Ordering::Acquire) {
            connection.close.send_replace(true);
        }
        Registered { registry: self.clone(), id, connection }
    }

    /// Asks the connection idle the longest to close and hands over its place under
    /// the cap; None when every connection is busy.
    pub fn take_oldest_idle_place(&self) -> Option<OwnedSemaphorePermit> {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let oldest = open
            .values()
            .filter(|c| c.busy.load(Ordering::Acquire) == 0 && c.has_place())
            .min_by_key(|c| c.idle_since.load(Ordering::Acquire))?;
        let place = oldest.place.lock().unwrap_or_else(|p| p.into_inner()).take();
        oldest.close.send_replace(true);
        place
    }

    /// Asks every connection to close (server shutdown): idle ones close at once,
    /// busy ones after their responses.
    pub fn close_all(&self) {
        self.closing.store(true, Ordering::Release);
        for c in self.open.lock().unwrap_or_else(|p| p.into_inner()).values() {
            c.close.send_replace(true);
        }
    }
}
