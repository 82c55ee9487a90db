//! Per-client share creation rate (`--share-rate N/PERIOD`): the generic cell rate
//! algorithm (GCRA, as nginx's `limit_req` with a burst): a client may create N shares
//! at once, then one every PERIOD/N. One instant per client IP instead of a log of N.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Clients tracked before the first sweep of those whose allowance is whole again.
const PRUNE_AT_LEAST: usize = 1024;

/// `N` creations per `period`; `N = 0` is no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub count: u32,
    pub period: Duration,
}

impl FromStr for Rate {
    type Err = String;

    fn from_str(s: &str) -> Result<Rate, String> {
        let s = s.trim();
        if s == "0" {
            return Ok(Rate { count: 0, period: Duration::from_secs(1) });
        }
        let bad = || format!("`{s}` is not N/PERIOD (e.g. 30/hour, 5/minute, 1/second; 0 = no limit)");
        let (n, unit) = s.split_once('/').ok_or_else(bad)?;
        let count: u32 = n.trim().parse().map_err(|_| bad())?;
        let secs = match unit.trim() {
            "s" | "sec" | "second" => 1,
            "m" | "min" | "minute" => 60,
            "h" | "hour" => 3600,
            "d" | "day" => 86_400,
            _ => return Err(bad()),
        };
        Ok(Rate { count, period: Duration::from_secs(secs) })
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = match self.period.as_secs() {
            1 => "second",
            60 => "minute",
            3600 => "hour",
            86_400 => "day",
            s => return write!(f, "{}/{s}s", self.count),
        };
        write!(f, "{}/{unit}", self.count)
    }
}

/// The per-IP state of one [`Rate`], shared by the handlers.
#[derive(Clone)]
pub struct RateLimiter {
    rate: Rate,
    /// Per client: the "theoretical arrival time" after which its allowance is whole.
    clients: Arc<Mutex<Clients>>,
}

struct Clients {
    tat: HashMap<IpAddr, Instant>,
    prune_at: usize,
}

impl RateLimiter {
    /// A limiter for `rate`; `None` when the rate is 0 (no limit).
    pub fn new(rate: Rate) -> Option<RateLimiter> {
        (rate.count > 0)
            .then(|| RateLimiter { rate, clients: Arc::new(Mutex::new(Clients { tat: HashMap::new(), prune_at: PRUNE_AT_LEAST })) })
    }

    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// Takes one creation for `ip` at `now`; `Err(wait)` says how long until the next
    /// one is allowed. A request without a known peer (in-process tests) is not limited.
    pub fn admit(&self, ip: Option<IpAddr>, now: Instant) -> Result<(), Duration> {
        let Some(ip) = ip else { return Ok(()) };
        let interval = self.rate.period / self.rate.count;
        let tolerance = self.rate.period - interval;
        // (A poisoned lock still holds consistent instants: each section writes one.)
        let mut c = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        let tat = c.tat.get(&ip).copied().filter(|t| *t > now).unwrap_or(now);
        let ahead = tat - now;
        if ahead > tolerance {
            return Err(ahead - tolerance);
        }
        c.tat.insert(ip, tat + interval);
        if c.tat.len() >= c.prune_at {
            // A client whose allowance is whole again needs no entry: the map holds only
            // those that created a share within the last period.
            c.tat.retain(|_, t| *t > now);
            c.prune_at = (c.tat.len() * 2).max(PRUNE_AT_LEAST);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_and_print() {
        assert_eq!("30/hour".parse::<Rate>().unwrap(), Rate { count: 30, period: Duration::from_secs(3600) });
        assert_eq!("5/minute".parse::<Rate>().unwrap().period, Duration::from_secs(60));
        assert_eq!("2/s".parse::<Rate>().unwrap().to_string(), "2/second");
        assert_eq!("0".parse::<Rate>().unwrap().count, 0);
        for bad in ["", "30", "30/fortnight", "x/hour", "-1/hour"] {
            assert!(bad.parse::<Rate>().is_err(), "{bad}");
        }
        assert!(RateLimiter::new("0/hour".parse().unwrap()).is_none());
    }

    #[test]
    fn a_burst_of_n_then_one_per_interval_per_client() {
        let l = RateLimiter::new("3/minute".parse().unwrap()).unwrap();
        let a = Some("10.0.0.1".parse().unwrap());
        let b = Some("10.0.0.2".parse().unwrap());
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(l.admit(a, t0), Ok(()));
        }
        assert_eq!(l.admit(a, t0), Err(Duration::from_secs(20)), "the next slot frees after 60/3 s");
        assert_eq!(l.admit(b, t0), Ok(()), "another client has its own allowance");
        assert_eq!(l.admit(a, t0 + Duration::from_secs(15)), Err(Duration::from_secs(5)));
        assert_eq!(l.admit(a, t0 + Duration::from_secs(20)), Ok(()));
        assert!(l.admit(a, t0 + Duration::from_secs(20)).is_err());
        assert_eq!(l.admit(None, t0), Ok(()));
    }
}
