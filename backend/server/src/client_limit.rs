//! Per-client concurrency limit (`--max-per-client`): counts requests in flight
//! (queued, running or streaming) per IP; a guard gives the slot back when dropped.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Shared counter of requests in flight per client IP.
#[derive(Clone, Default)]
pub struct ClientLimiter {
    /// 0 = no limit.
    max: usize,
    counts: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// The client already has the limit's number of requests in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtLimit;

/// One request's slot; dropping it frees the slot.
pub struct ClientGuard {
    counts: Arc<Mutex<HashMap<IpAddr, usize>>>,
    ip: IpAddr,
}

impl ClientLimiter {
    /// A limiter allowing `max` concurrent requests per IP (0 = no limit).
    pub fn new(max: usize) -> Self {
        ClientLimiter { max, counts: Arc::default() }
    }

    /// The configured limit (0 = none).
    pub fn max(&self) -> usize {
        self.max
    }

    /// Takes a slot for `ip`; `Err(AtLimit)` when it already has `max` in flight.
    /// Requests without a known peer (in-process tests) are not limited.
    pub fn acquire(&self, ip: Option<IpAddr>) -> Result<Option<ClientGuard>, AtLimit> {
        let (Some(ip), true) = (ip, self.max > 0) else { return Ok(None) };
        // (A poisoned lock still holds consistent counts: every critical section is one
        // increment or decrement.)
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let n = counts.entry(ip).or_insert(0);
        if *n >= self.max {
            return Err(AtLimit);
        }
        *n += 1;
        Ok(Some(ClientGuard { counts: self.counts.clone(), ip }))
    }
}

impl Drop for ClientGuard {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = counts.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_counted_per_ip_and_freed_on_drop() {
        let l = ClientLimiter::new(1);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let g = l.acquire(Some(a)).unwrap();
        assert_eq!(l.acquire(Some(a)).err(), Some(AtLimit));
        assert!(l.acquire(Some(b)).unwrap().is_some());
        drop(g);
        assert!(l.acquire(Some(a)).unwrap().is_some());
        assert!(ClientLimiter::new(0).acquire(Some(a)).unwrap().is_none());
    }
}
