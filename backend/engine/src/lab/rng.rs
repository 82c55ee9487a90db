//! Vigna's SplitMix64: the one small seeded generator behind synthetic weights,
//! benchmark prompts and randomized tests (same seed ⇒ same numbers everywhere).

/// SplitMix64 state; the seed is the initial state.
#[derive(Debug, Clone)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1) from the top 24 bits (exact in f32).
    pub fn next_signed(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    /// `n` token ids spread over a vocabulary of `vocab_size`.
    pub fn tokens(&mut self, n: usize, vocab_size: usize) -> Vec<u32> {
        (0..n).map(|_| (self.next_u64() % vocab_size as u64) as u32).collect()
    }
}
