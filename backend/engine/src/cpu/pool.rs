//! A fixed team of threads that lives as long as the runtime: the caller is
//! member 0, workers 1..n wait for the next job (spinning briefly, then parked on a
//! condvar), and inside a job members meet at a spin barrier, as ggml's graph
//! compute does between nodes. One job is one whole forward pass, so a token costs
//! one wake-up, not one per matrix.

use std::cell::UnsafeCell;
use std::ops::Range;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an idle worker spins for the next job before parking. Covers the gap
/// between two decode steps (sampling, detokenizing) so no step pays a futex wake.
pub const DEFAULT_IDLE_SPIN: Duration = Duration::from_millis(5);
/// Barrier spins before a waiting member starts yielding its core (the machine
/// may be shared, and a descheduled member makes spinning pointless).
const BARRIER_SPINS: u32 = 1 << 14;
/// Idle-spin iterations between two clock reads.
const CLOCK_EVERY: u32 = 256;

/// The job of one `run`: borrowed from the caller's stack for the duration of it.
type Job = *const (dyn Fn(&Team<'_>) + Sync);

struct Shared {
    threads: usize,
    /// Written by `run` before publishing an epoch, read by workers after seeing it.
    job: UnsafeCell<Option<Job>>,
    epoch: AtomicU64,
    done: AtomicUsize,
    sleepers: AtomicUsize,
    shutdown: AtomicBool,
    panicked: AtomicBool,
    park: Mutex<()>,
    wake: Condvar,
    barrier: SpinBarrier,
}

// SAFETY: `job` is only written by the owner thread between jobs (no worker reads it
// then: every worker has reported `done`), and only read by workers after an
// Acquire load of the epoch the owner published with SeqCst after writing it.
unsafe impl Sync for Shared {}
// SAFETY: as above; the raw job pointer is only dereferenced during its `run`.
unsafe impl Send for Shared {}

/// The thread team.
pub struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

/// What a member sees inside a job.
pub struct Team<'a> {
    /// This member's index (0 is the caller of `run`).
    pub id: usize,
    /// Members in the team.
    pub threads: usize,
    shared: &'a Shared,
}

impl Team<'_> {
    /// Waits until every member has arrived; writes before it are visible after it.
    pub fn barrier(&self) {
        if self.threads > 1 {
            self.shared.barrier.wait(&self.shared.panicked);
        }
    }

    /// This member's contiguous share of `n` items.
    pub fn split(&self, n: usize) -> Range<usize> {
        self.split_turned(n, 0)
    }

    /// [`Team::split`] with the shares turned by `turn` members, so splits of small
    /// counts with different turns leave their larger shares to different members.
    pub fn split_turned(&self, n: usize, turn: usize) -> Range<usize> {
        let id = (self.id + turn) % self.threads;
        n * id / self.threads..n * (id + 1) / self.threads
    }
}

impl Pool {
    /// A team of `threads` members (at least 1); spawns `threads - 1` workers.
    pub fn new(threads: usize) -> std::io::Result<Pool> {
        let threads = threads.max(1);
        let shared = Arc::new(Shared {
            threads,
            job: UnsafeCell::new(None),
            epoch: AtomicU64::new(0),
            done: AtomicUsize::new(0),
            sleepers: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            panicked: AtomicBool::new(false),
            park: Mutex::new(()),
            wake: Condvar::new(),
            barrier: SpinBarrier::new(threads),
        });
        let workers = (1..threads)
            .map(|id| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new().name(format!("peregrine-cpu-{id}")).spawn(move || worker(&shared, id))
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Pool { shared, workers })
    }

    /// Members in the team.
    pub fn threads(&self) -> usize {
        self.shared.threads
    }

    /// Runs `job` on every member and returns when all have finished. A panic in any
    /// member is re-raised here after the others have stopped using `job`.
    pub fn run(&self, job: &(dyn Fn(&Team<'_>) + Sync)) {
        let s = &*self.shared;
        let team = Team { id: 0, threads: s.threads, shared: s };
        if s.threads == 1 {
            return job(&team);
        }
        // SAFETY: erasing the borrow's lifetime is sound because this function does
        // not return (or unwind) before every worker has reported `done` for this
        // epoch, after which no worker touches the pointer again.
        let erased: Job = unsafe { std::mem::transmute::<*const (dyn Fn(&Team<'_>) + Sync + '_), Job>(job) };
        // SAFETY: no worker reads `job` between epochs (see `Shared`'s Sync note).
        unsafe { *s.job.get() = Some(erased) };
        s.done.store(0, Ordering::Relaxed);
        s.epoch.fetch_add(1, Ordering::SeqCst);
        if s.sleepers.load(Ordering::SeqCst) > 0 {
            let _guard = s.park.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        let result = catch_unwind(AssertUnwindSafe(|| job(&team)));
        if result.is_err() {
            s.panicked.store(true, Ordering::SeqCst);
        }
        let mut spins = 0u32;
        while s.done.load(Ordering::Acquire) < s.threads - 1 {
            backoff(&mut spins);
        }
        if s.panicked.swap(false, Ordering::SeqCst) {
            s.barrier.reset();
            match result {
                Err(payload) => resume_unwind(payload),
                Ok(()) => panic!("a CPU worker thread panicked"),
            }
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        self.shared.epoch.fetch_add(1, Ordering::SeqCst);
        {
            let _guard = self.shared.park.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

fn worker(s: &Shared, id: usize) {
    let mut seen = 0u64;
    loop {
        seen = wait_for_epoch(s, seen);
        if s.shutdown.load(Ordering::Acquire) {
            return;
        }
        // SAFETY: the owner wrote the job before publishing this epoch (Acquire above).
        let job = unsafe { *s.job.get() };
        if let Some(job) = job {
            let team = Team { id, threads: s.threads, shared: s };
            // SAFETY: the owner keeps the job alive until this member reports done.
            let result = catch_unwind(AssertUnwindSafe(|| unsafe { (*job)(&team) }));
            if result.is_err() {
                s.panicked.store(true, Ordering::SeqCst);
            }
        }
        s.done.fetch_add(1, Ordering::Release);
    }
}

/// Spins for [`DEFAULT_IDLE_SPIN`], then parks until the epoch moves past `seen`.
fn wait_for_epoch(s: &Shared, seen: u64) -> u64 {
    let start = Instant::now();
    let mut i = 0u32;
    loop {
        let e = s.epoch.load(Ordering::Acquire);
        if e != seen {
            return e;
        }
        i = i.wrapping_add(1);
        if i.is_multiple_of(CLOCK_EVERY) && start.elapsed() > DEFAULT_IDLE_SPIN {
            break;
        }
        std::hint::spin_loop();
    }
    s.sleepers.fetch_add(1, Ordering::SeqCst);
    let mut guard = s.park.lock().unwrap_or_else(|e| e.into_inner());
    while s.epoch.load(Ordering::SeqCst) == seen {
        guard = s.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
    }
    drop(guard);
    s.sleepers.fetch_sub(1, Ordering::SeqCst);
    s.epoch.load(Ordering::Acquire)
}

fn backoff(spins: &mut u32) {
    *spins = spins.saturating_add(1);
    if *spins < BARRIER_SPINS {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// A reusable counting barrier: the last arrival resets the count and bumps the
/// generation the others spin on.
struct SpinBarrier {
    threads: usize,
    count: AtomicUsize,
    generation: AtomicUsize,
}

impl SpinBarrier {
    fn new(threads: usize) -> SpinBarrier {
        SpinBarrier { threads, count: AtomicUsize::new(0), generation: AtomicUsize::new(0) }
    }

    fn wait(&self, panicked: &AtomicBool) {
        let generation = self.generation.load(Ordering::Acquire);
        if self.count.fetch_add(1, Ordering::AcqRel) + 1 == self.threads {
            self.count.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Release);
            return;
        }
        let mut spins = 0u32;
        while self.generation.load(Ordering::Acquire) == generation {
            if panicked.load(Ordering::Relaxed) {
                panic!("another CPU worker thread panicked");
            }
            backoff(&mut spins);
        }
    }

    /// Forgets members stranded by a panic.
    fn reset(&self) {
        self.count.store(0, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_member_runs_and_barriers_order_writes() {
        let pool = Pool::new(3).unwrap();
        let cells: Vec<AtomicUsize> = (0..3).map(|_| AtomicUsize::new(0)).collect();
        for round in 1..50 {
            pool.run(&|team| {
                cells[team.id].store(round, Ordering::Relaxed);
                team.barrier();
                for c in &cells {
                    assert_eq!(c.load(Ordering::Relaxed), round);
                }
                team.barrier();
            });
        }
        assert_eq!(pool.threads(), 3);
    }

    #[test]
    fn split_covers_everything_once() {
        let pool = Pool::new(2).unwrap();
        let hits: Vec<AtomicUsize> = (0..7).map(|_| AtomicUsize::new(0)).collect();
        pool.run(&|team| {
            for i in team.split(7) {
                hits[i].fetch_add(1, Ordering::Relaxed);
            }
        });
        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
    }

    #[test]
    fn a_worker_panic_reaches_the_caller_and_the_pool_survives() {
        let pool = Pool::new(2).unwrap();
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.run(&|team| {
                if team.id == 1 {
                    panic!("boom");
                }
                team.barrier();
            })
        }));
        assert!(r.is_err());
        let n = AtomicUsize::new(0);
        pool.run(&|team| {
            team.barrier();
            n.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(n.load(Ordering::Relaxed), 2);
    }
}
