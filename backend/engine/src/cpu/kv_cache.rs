//! The fast runtime's KV cache, f16 (as llama.cpp's default: half the memory that
//! attention streams), one contiguous run per (layer, kv head):
//! values `[position][head_dim]` (attention adds whole rows), keys in tiles of
//! [`KEY_TILE`] positions `[position / 16][head_dim][16]`, so the scores of 16
//! positions are one vector of FMAs against broadcast query elements, with no
//! horizontal sums (the transposed-K trick of flash-attention CPU kernels).

use crate::config::ModelConfig;
use crate::cpu::kv_half::narrow;
use crate::cpu::shared::SharedSlice;

/// Positions added at a time when the cache grows (amortises the copy; a whole
/// number of key tiles).
const GROW_STEP: usize = 256;
/// Positions per key tile (one 512-bit register of scores).
pub const KEY_TILE: usize = 16;

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
    /// f16 bits.
    k: Vec<u16>,
    v: Vec<u16>,
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
    #[cfg(feature = "lab")]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forgets every position (the memory stays for the next sequence).
    #[cfg(feature = "lab")]
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Forgets every position from `n` on (keeping the first `n` for a sequence that
    /// shares them); a no-op when fewer are cached.
    pub fn truncate(&mut self, n: usize) {
        self.len = self.len.min(n);
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
        let new_cap = positions.next_multiple_of(GROW_STEP).min(self.max_positions.max(positions).next_multiple_of(KEY_TILE));
        let runs = self.layers * self.kv_heads;
        let grow = |old: &Vec<u16>| {
            let mut new = vec![0u16; runs * new_cap * self.head_dim];
            for r in 0..runs {
                // Whole key tiles: the last one may hold positions past len·head_dim.
                let n = self.len.next_multiple_of(KEY_TILE) * self.head_dim;
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

    /// Elements between the starts of two heads' runs.
    pub fn head_stride(&self) -> usize {
        self.capacity * self.head_dim
    }

    /// Index of `(layer, kv_head, position 0)` in [`Self::keys_values_mut`]'s buffers.
    /// Within a run, value `i` of position `p` is at `p·head_dim + i` and key `i` of
    /// position `p` at [`key_offset`]`(p, i, head_dim)`.
    #[cfg(feature = "lab")]
    pub fn run_start(&self, layer: usize, kv_head: usize) -> usize {
        (layer * self.kv_heads + kv_head) * self.head_stride()
    }

    /// Both buffers, for a forward pass to share among its threads.
    pub fn keys_values_mut(&mut self) -> (&mut [u16], &mut [u16]) {
        (&mut self.k, &mut self.v)
    }
}

/// Offset of key element `i` of position `p` inside a head's run.
pub const fn key_offset(p: usize, i: usize, head_dim: usize) -> usize {
    (p / KEY_TILE) * head_dim * KEY_TILE + i * KEY_TILE + p % KEY_TILE
}

/// Writes position `pos`'s key `k` into the (layer, KV head) run of keys starting at
/// `run`. Key tiles interleave positions, which other members may be writing (other
/// tokens): element-wise writes, never a slice over a tile.
///
/// # Safety
/// The caller owns position `pos` of this run in this phase.
pub(crate) unsafe fn store_key(keys: SharedSlice<'_, u16>, run: usize, pos: usize, k: &[f32]) {
    let hd = k.len();
    let mut h = [0u16; KEY_TILE];
    for (c, part) in k.chunks(KEY_TILE).enumerate() {
        narrow(part, &mut h);
        for (j, &x) in h[..part.len()].iter().enumerate() {
            // SAFETY: in the run (its capacity covers `pos`), owned by the caller.
            unsafe { *keys.ptr_at(run + key_offset(pos, c * KEY_TILE + j, hd)) = x };
        }
    }
}

/// Writes position `pos`'s value `v` into the run of values starting at `run`.
///
/// # Safety
/// As [`store_key`].
pub(crate) unsafe fn store_value(values: SharedSlice<'_, u16>, run: usize, pos: usize, v: &[f32]) {
    let hd = v.len();
    // SAFETY: the row is in the run and the caller's alone.
    narrow(v, unsafe { values.part_mut(run + pos * hd..run + (pos + 1) * hd) });
}

/// f16 elements per cache line.
const LINE_HALVES: usize = 32;

/// Asks for the lines position `pos`'s key will be written to in the (layer, KV head)
/// run of keys starting at `run`: one per two elements, since tiles interleave
/// positions (16 halves of a tile row, two rows a line).
pub(crate) fn prefetch_key_write(run: *const u16, pos: usize, head_dim: usize) {
    for i in (0..head_dim).step_by(LINE_HALVES / KEY_TILE) {
        prefetch_for_write(run.wrapping_add(key_offset(pos, i, head_dim)));
    }
}

/// Asks for the lines position `pos`'s value will be written to in the run at `run`.
pub(crate) fn prefetch_value_write(run: *const u16, pos: usize, head_dim: usize) {
    for i in (0..head_dim).step_by(LINE_HALVES) {
        prefetch_for_write(run.wrapping_add(pos * head_dim + i));
    }
}

/// A hint that `p`'s cache line will be written soon (no effect on other targets).
fn prefetch_for_write(p: *const u16) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and reads nothing the program sees.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_ET0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growing_keeps_partial_key_tiles_and_values() {
        let mut config = crate::lab::synthetic::preset("smollm2-135m").expect("preset");
        config.num_layers = 2;
        config.max_context = 1000;
        let mut cache = KvCache::new(&config);
        cache.reserve(20);
        let hd = config.head_dim;
        let mark = |l: usize, h: usize, p: usize, i: usize| (l * 10_000 + h * 3_000 + p * 100 + i) as u16;
        for l in 0..2 {
            for h in 0..config.num_kv_heads {
                let run = cache.run_start(l, h);
                let (k, v) = cache.keys_values_mut();
                for p in 0..20 {
                    for i in 0..hd {
                        k[run + key_offset(p, i, hd)] = mark(l, h, p, i);
                        v[run + p * hd + i] = !mark(l, h, p, i);
                    }
                }
            }
        }
        cache.advance(20);
        cache.reserve(700);
        assert_eq!(cache.capacity() % KEY_TILE, 0);
        assert!(cache.capacity() >= 700 && cache.capacity() <= 1008);
        for l in 0..2 {
            for h in 0..config.num_kv_heads {
                let run = cache.run_start(l, h);
                let (k, v) = cache.keys_values_mut();
                for p in 0..20 {
                    for i in 0..hd {
                        assert_eq!(k[run + key_offset(p, i, hd)], mark(l, h, p, i));
                        assert_eq!(v[run + p * hd + i], !mark(l, h, p, i));
                    }
                }
            }
        }
    }
}
