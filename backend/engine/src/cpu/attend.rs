//! One query's attention over one KV head of the f16 cache: scores of 16 positions at
//! a time from key tiles, softmax, Σ p·V. Written once over 16-float lanes and
//! compiled for AVX-512, for AVX2 (both widening f16 by F16C) and plain, chosen by
//! [`Isa`] at run time.

use crate::cpu::isa::Isa;
use crate::cpu::kv_cache::KEY_TILE;
use crate::cpu::kv_half::{F16c, Soft, Widen};
use crate::cpu::vecops::{exp_fast, max_generic, sum_lanes, LANES};

/// Query heads attended in one pass over their KV head's keys and values.
pub const HEADS_PER_PASS: usize = 4;

/// One query against cached positions `first..n` of one head (`first` > 0: a sliding
/// window): softmax(q·K·scale)·V into `out`. `values` holds `n` rows of `q.len()`
/// halves; `keys` the key tiles covering them (`kv_cache::key_offset` layout, `n`
/// rounded up to 16 positions); `scores` has room for the rounded-up count.
#[allow(clippy::too_many_arguments)]
pub fn attend(isa: Isa, q: &[f32], keys: &[u16], values: &[u16], first: usize, scale: f32, scores: &mut [f32], out: &mut [f32]) {
    attend_heads(isa, q.len(), q, keys, values, first, scale, scores, out);
}

/// [`attend`] for several query heads of `head_dim` that share one KV head, their
/// queries and outputs consecutive in `q` and `out`: each key and value is read and
/// widened once for up to [`HEADS_PER_PASS`] of them. Every head's arithmetic is the
/// same as alone, so how heads are grouped changes no bit. `scores` has room for
/// `HEADS_PER_PASS` (or fewer heads) rows of the rounded-up count.
#[allow(clippy::too_many_arguments)]
pub fn attend_heads(
    isa: Isa,
    head_dim: usize,
    q: &[f32],
    keys: &[u16],
    values: &[u16],
    first: usize,
    scale: f32,
    scores: &mut [f32],
    out: &mut [f32],
) {
    let row = (values.len() / head_dim).next_multiple_of(KEY_TILE) - first / KEY_TILE * KEY_TILE;
    let pass = HEADS_PER_PASS * head_dim;
    for (q, out) in q.chunks(pass).zip(out.chunks_mut(pass)) {
        let a = Attend { head_dim, keys, values, first, scale, row };
        let scores = &mut scores[..q.len() / head_dim * row];
        match q.len() / head_dim {
            1 => a.run::<1>(isa, q, scores, out),
            2 => a.run::<2>(isa, q, scores, out),
            3 => a.run::<3>(isa, q, scores, out),
            _ => a.run::<4>(isa, q, scores, out),
        }
    }
}

/// What every head of one pass shares.
struct Attend<'a> {
    head_dim: usize,
    keys: &'a [u16],
    values: &'a [u16],
    first: usize,
    scale: f32,
    /// Scores per head (the tiles from `first`'s).
    row: usize,
}

impl Attend<'_> {
    /// `G` heads: queries `q`, outputs `out`, one scores row each.
    fn run<const G: usize>(&self, isa: Isa, q: &[f32], scores: &mut [f32], out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        {
            #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
            fn wide<const G: usize>(a: &Attend<'_>, q: &[f32], scores: &mut [f32], out: &mut [f32]) {
                // SAFETY: this function only runs on CPUs with F16C.
                unsafe { a.heads::<F16c, G>(q, scores, out) }
            }
            #[target_feature(enable = "avx2,fma,f16c")]
            fn narrow<const G: usize>(a: &Attend<'_>, q: &[f32], scores: &mut [f32], out: &mut [f32]) {
                // SAFETY: as above.
                unsafe { a.heads::<F16c, G>(q, scores, out) }
            }
            match isa {
                // SAFETY: callers take `isa` from `Isa::detect`, which only returns supported sets.
                Isa::Avx512Vnni => return unsafe { wide::<G>(self, q, scores, out) },
                // SAFETY: as above.
                Isa::Avx2 => return unsafe { narrow::<G>(self, q, scores, out) },
                Isa::Portable => {}
            }
        }
        let _ = isa;
        // SAFETY: `Soft` needs nothing of the CPU.
        unsafe { self.heads::<Soft, G>(q, scores, out) }
    }

    /// # Safety
    /// The CPU has what `W` needs.
    // Head and lane indices address several arrays at once.
    #[allow(clippy::needless_range_loop)]
    #[inline(always)]
    unsafe fn heads<W: Widen, const G: usize>(&self, q: &[f32], scores: &mut [f32], out: &mut [f32]) {
        let (hd, first, row) = (self.head_dim, self.first, self.row);
        let n = self.values.len() / hd;
        assert!(q.len() == G * hd && out.len() == G * hd && scores.len() >= G * row && n > first);
        // SAFETY (for every `at` and `widen` below): indices stay below the lengths
        // asserted above and the tile and row sizes they come from; the CPU has what
        // `W` needs (caller).
        let widen = |x: &[u16], i: usize| unsafe {
            debug_assert!(i + LANES <= x.len());
            W::widen(x.get_unchecked(i..i + LANES))
        };
        // Scores start at `first`'s tile; positions before `first` in it are left out below.
        let keys = &self.keys[first / KEY_TILE * KEY_TILE * hd..];
        let skip = first % KEY_TILE;
        // Scores of 16 positions at a time (lane l of tile t is position 16t + l), four
        // chains per head over the head dimension.
        for (t, tile) in keys.chunks_exact(hd * KEY_TILE).enumerate().take(row / KEY_TILE) {
            let mut acc = [[[0.0f32; LANES]; 4]; G];
            let mut i = 0;
            while i + 4 <= hd {
                for c in 0..4 {
                    let k = widen(tile, (i + c) * KEY_TILE);
                    for g in 0..G {
                        lanes_fma(&mut acc[g][c], unsafe { at(q, g * hd + i + c) }, &k);
                    }
                }
                i += 4;
            }
            for i in i..hd {
                let k = widen(tile, i * KEY_TILE);
                for g in 0..G {
                    lanes_fma(&mut acc[g][0], q[g * hd + i], &k);
                }
            }
            for g in 0..G {
                let s = &mut scores[g * row + t * KEY_TILE..g * row + (t + 1) * KEY_TILE];
                let a = &acc[g];
                for l in 0..LANES {
                    s[l] = ((a[0][l] + a[1][l]) + (a[2][l] + a[3][l])) * self.scale;
                }
            }
        }
        // Lanes past `n` in the last tile are stale: the softmax covers first..n only.
        let mut inv = [0.0f32; G];
        for (g, inv) in inv.iter_mut().enumerate() {
            *inv = softmax_in_place(&mut scores[g * row + skip..g * row + n - first + skip]);
        }
        let values = &self.values[first * hd..n * hd];
        let positions = n - first;
        // Σ p·V, a block of value columns at a time so accumulators stay in registers.
        let mut c = 0;
        while c + VALUE_CHUNKS * LANES <= hd {
            let mut acc = [[[0.0f32; LANES]; VALUE_CHUNKS]; G];
            for pos in 0..positions {
                for k in 0..VALUE_CHUNKS {
                    let v = widen(values, pos * hd + c + k * LANES);
                    for g in 0..G {
                        lanes_fma(&mut acc[g][k], unsafe { at(scores, g * row + skip + pos) }, &v);
                    }
                }
            }
            for g in 0..G {
                for k in 0..VALUE_CHUNKS {
                    for l in 0..LANES {
                        out[g * hd + c + k * LANES + l] = acc[g][k][l] * inv[g];
                    }
                }
            }
            c += VALUE_CHUNKS * LANES;
        }
        for c in c..hd {
            for g in 0..G {
                let p = |pos: usize| scores[g * row + skip + pos];
                let acc: f32 = values.chunks_exact(hd).enumerate().map(|(pos, v)| p(pos) * half::f16::from_bits(v[c]).to_f32()).sum();
                out[g * hd + c] = acc * inv[g];
            }
        }
    }
}

/// `x[i]` without a bounds check.
///
/// # Safety
/// `i < x.len()`.
#[inline(always)]
unsafe fn at(x: &[f32], i: usize) -> f32 {
    debug_assert!(i < x.len());
    // SAFETY: caller.
    unsafe { *x.get_unchecked(i) }
}

/// Replaces scores by e^(s − max); returns 1 / their sum.
#[inline(always)]
fn softmax_in_place(scores: &mut [f32]) -> f32 {
    let max = max_generic(scores);
    let mut sums = [0.0f32; LANES];
    let mut chunks = scores.chunks_exact_mut(LANES);
    for c in &mut chunks {
        for l in 0..LANES {
            c[l] = exp_fast(c[l] - max);
            sums[l] += c[l];
        }
    }
    let mut sum = sum_lanes(sums);
    for s in chunks.into_remainder() {
        *s = exp_fast(*s - max);
        sum += *s;
    }
    1.0 / sum
}

/// Value columns (of 16) accumulated together in attention's weighted sum: four
/// independent FMA chains, one 64-wide head per pass.
const VALUE_CHUNKS: usize = 4;

/// `acc += s · x` over 16 lanes, fused (one rounding): an FMA instruction where the
/// code is compiled for AVX2 or AVX-512, libm's exact `fmaf` in the portable build, so
/// every instruction set gets the same bits.
#[inline(always)]
fn lanes_fma(acc: &mut [f32; LANES], s: f32, x: &[f32; LANES]) {
    for l in 0..LANES {
        acc[l] = s.mul_add(x[l], acc[l]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::kv_half::narrow;

    fn halves(x: &[f32]) -> Vec<u16> {
        let mut h = vec![0u16; x.len()];
        narrow(x, &mut h);
        h
    }

    #[test]
    fn every_isa_averages_and_windows_alike() {
        let x: Vec<f32> = (0..16).map(|i| ((i * 37 % 17) as f32 - 8.0) * 0.3).collect();
        for isa in Isa::available() {
            // Equal values: any convex combination of them is that value.
            let (mut s, mut o) = (vec![0.0; 16], vec![0.0; 16]);
            let keys = halves(&(0..16 * 16).map(|i| (i % 7) as f32 * 0.1).collect::<Vec<_>>());
            attend(isa, &x, &keys, &halves(&[2.0; 96]), 0, 0.25, &mut s, &mut o);
            assert!(o.iter().all(|v| (v - 2.0).abs() < 1e-5), "{isa:?}: {o:?}");
            // A window that starts inside a tile sees only its own positions' values.
            let values: Vec<f32> = (0..40).flat_map(|p| [if p >= 19 { 5.0 } else { -3.0 }; 16]).collect();
            let (mut s, mut o) = (vec![0.0; 48], vec![0.0; 16]);
            let keys = halves(&(0..48 * 16).map(|i| (i % 11) as f32 * 0.1).collect::<Vec<_>>());
            attend(isa, &x, &keys, &halves(&values), 19, 0.25, &mut s, &mut o);
            assert!(o.iter().all(|v| (v - 5.0).abs() < 1e-5), "{isa:?}: {o:?}");
        }
    }

    #[test]
    fn heads_in_one_pass_give_the_bits_of_heads_alone() {
        // 6 heads of 80 (a chunk of 64 value columns and a tail) over 37 positions (a
        // partial last tile), windows from 0 and 21: one pass of 4 and one of 2 against
        // six single-head calls.
        let hd = 80;
        let q: Vec<f32> = (0..6 * hd).map(|i| ((i * 13 % 29) as f32 - 14.0) * 0.05).collect();
        let keys = halves(&(0..48 * hd).map(|i| ((i * 7 % 23) as f32 - 11.0) * 0.07).collect::<Vec<_>>());
        let values = halves(&(0..37 * hd).map(|i| ((i * 11 % 31) as f32 - 15.0) * 0.1).collect::<Vec<_>>());
        for isa in Isa::available() {
            for first in [0, 21] {
                let mut scores = vec![0.0; HEADS_PER_PASS * 48];
                let mut together = vec![0.0; 6 * hd];
                attend_heads(isa, hd, &q, &keys, &values, first, 0.17, &mut scores, &mut together);
                for h in 0..6 {
                    let mut alone = vec![0.0; hd];
                    attend(isa, &q[h * hd..(h + 1) * hd], &keys, &values, first, 0.17, &mut scores, &mut alone);
                    assert_eq!(alone, together[h * hd..(h + 1) * hd], "{isa:?}, first {first}, head {h}");
                }
            }
        }
    }

    #[test]
    fn every_isa_gives_the_bits_of_plain_code() {
        // 64-wide heads, 37 positions (a partial last tile), window from 0 and from 5.
        let hd = 64;
        let q: Vec<f32> = (0..hd).map(|i| ((i * 13 % 29) as f32 - 14.0) * 0.05).collect();
        let keys = halves(&(0..48 * hd).map(|i| ((i * 7 % 23) as f32 - 11.0) * 0.07).collect::<Vec<_>>());
        let values = halves(&(0..37 * hd).map(|i| ((i * 11 % 31) as f32 - 15.0) * 0.1).collect::<Vec<_>>());
        for first in [0, 5] {
            let run = |isa| {
                let (mut s, mut o) = (vec![0.0; 48], vec![0.0; hd]);
                attend(isa, &q, &keys, &values, first, 0.125, &mut s, &mut o);
                o
            };
            let base = run(Isa::Portable);
            for isa in Isa::available() {
                assert_eq!(run(isa), base, "{isa:?}, first {first}");
            }
        }
    }
}
