//! The machine's streaming read bandwidth, measured the way decode reads weights: every
//! thread of the team summing its share of a buffer far larger than the caches. The
//! CPU bench (backend/bench) puts its decode GB/s next to it; here, so it is built with
//! the engine's optimisation.

use std::time::Instant;

/// Bytes of the buffer (well past any L3).
pub const READ_BYTES: usize = 512 << 20;
/// Timed passes (the median is reported).
pub const READ_PASSES: usize = 5;

/// Bytes per second `threads` threads read from memory (median of READ_PASSES passes).
pub fn read_bandwidth(threads: usize) -> f64 {
    let threads = threads.max(1);
    let words = READ_BYTES / 8;
    // Written once, so every page is resident before the timed passes.
    let buf: Vec<u64> = (0..words as u64).collect();
    let chunk = words.div_ceil(threads);
    let mut secs = Vec::with_capacity(READ_PASSES);
    let mut checksum = 0u64;
    for _ in 0..=READ_PASSES {
        let t0 = Instant::now();
        let sum: u64 = std::thread::scope(|s| {
            let parts: Vec<_> = buf.chunks(chunk).map(|part| s.spawn(move || sum_words(part))).collect();
            parts.into_iter().map(|h| h.join().unwrap_or(0)).fold(0, u64::wrapping_add)
        });
        secs.push(t0.elapsed().as_secs_f64());
        checksum = checksum.wrapping_add(sum);
    }
    // The first pass warms the threads up; the checksum keeps the sums from being optimised away.
    secs.remove(0);
    std::hint::black_box(checksum);
    secs.sort_by(f64::total_cmp);
    READ_BYTES as f64 / secs[secs.len() / 2]
}

/// Wrapping sum with 8 independent chains (the compiler vectorises it).
fn sum_words(words: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    let mut it = words.chunks_exact(8);
    for c in &mut it {
        for (a, &w) in acc.iter_mut().zip(c) {
            *a = a.wrapping_add(w);
        }
    }
    it.remainder().iter().chain(acc.iter()).fold(0, |s, &w| s.wrapping_add(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_every_word() {
        let words: Vec<u64> = (1..=21).collect();
        assert_eq!(sum_words(&words), 231);
    }
}
