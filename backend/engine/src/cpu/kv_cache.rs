//! The fast runtime's KV cache: f32, laid out `[layer][kv_head][position][head_dim]`
//! so one head's keys (and values) for all positions are one contiguous run that
//! attention streams through (llama.cpp keeps per-head rows contiguous likewise).

use crate::config::ModelConfig;

/// Positions added at a time when the cache grows (amortises the copy).
const GROW_STEP: usize = 256;

/// Keys and values of every past position of one sequence.
pub struct KvCache {
    layers: usize,
    kv_heads: usize,
    head_dim: usize,
    max_positions: usize,
    /// Positions each head's run has room for.
    capacity: usize,
    /// Positions filled.
    len: usize,
    k: Vec<f32>,
    v: Vec<f32>,
}

impl KvCache {
    /// An empty cache that can grow to the model's context.
    pub fn new(config: &ModelConfig) -> KvCache {
        KvCache {
            layers: config.num_layers,
            kv_heads: config.num_kv_heads,
            head_dim: config.head_dim,
            max_positions: config.max_context,
            capacity: 0,
            len: 0,
            k: Vec::new(),
            v: Vec::new(),
        }
    }

    /// Positions filled so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forgets every position (the memory stays for the next sequence).
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Marks `n` more positions as filled (after a forward pass wrote them).
    pub fn advance(&mut self, n: usize) {
        assert!(self.len + n <= self.capacity);
        self.len += n;
    }

    /// Makes room for `positions` in total, keeping what is cached.
    pub fn reserve(&mut self, positions: usize) {
        if positions <= self.capacity {
            return;
        }
        let new_cap = positions.next_multiple_of(GROW_STEP).min(self.max_positions.max(positions));
        let runs = self.layers * self.kv_heads;
        let grow = |old: &Vec<f32>| {
            let mut new = vec![0.0f32; runs * new_cap * self.head_dim];
            for r in 0..runs {
                let n = self.len * self.head_dim;
                let src = r * self.capacity * self.head_dim;
                new[r * new_cap * self.head_dim..][..n].copy_from_slice(&old[src..src + n]);
            }
            new
        };
        self.k = grow(&self.k);
        self.v = grow(&self.v);
        self.capacity = new_cap;
    }

    /// Positions each head's run has room for.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Floats between the starts of two heads' runs.
    pub fn head_stride(&self) -> usize {
        self.capacity * self.head_dim
    }

    /// Index of `(layer, kv_head, position 0)` in [`Self::keys_values_mut`]'s buffers.
    pub fn run_start(&self, layer: usize, kv_head: usize) -> usize {
        (layer * self.kv_heads + kv_head) * self.head_stride()
    }

    /// Both buffers, for a forward pass to share among its threads.
    pub fn keys_values_mut(&mut self) -> (&mut [f32], &mut [f32]) {
        (&mut self.k, &mut self.v)
    }
}
