//! Cost of the fast runtime's attention kernel alone, one thread: nanoseconds per
//! (query head, cached position) for G query heads sharing one KV head, with the
//! cache in L2 (one run read again and again) and from memory (runs of 30 layers × 3
//! KV heads, as a 64-dimension model's decode step reads them), and the bytes per
//! second the second case streams.
//!
//! usage: attend_cost [POSITIONS] [ISA]   (POSITIONS default 2000; ISA portable | avx2 | avx512)
use std::time::Instant;

use peregrine_engine::cpu::attend::attend_heads;
use peregrine_engine::cpu::isa::Isa;

const HEAD_DIM: usize = 64;
/// Runs a decode step reads for one token of a 30-layer, 3-KV-head model.
const RUNS: usize = 90;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).map_or(2000, |a| a.parse().expect("POSITIONS: a count"));
    let isa = Isa::detect(args.get(2).map(|name| Isa::from_name(name).expect("ISA: portable, avx2 or avx512")));
    let tiles = n.next_multiple_of(16);
    // f16 bits of small values, as a cache holds them; each run different.
    let runs: Vec<(Vec<u16>, Vec<u16>)> = (0..RUNS)
        .map(|r| {
            let keys = (0..tiles * HEAD_DIM).map(|i| 0x2c00 + ((i * 7 + r) % 251) as u16).collect();
            let values = (0..n * HEAD_DIM).map(|i| 0x2c00 + ((i * 5 + r) % 241) as u16).collect();
            (keys, values)
        })
        .collect();
    let q: Vec<f32> = (0..4 * HEAD_DIM).map(|i| ((i * 31 % 29) as f32 - 14.0) * 0.05).collect();
    let mut scores = vec![0.0f32; 4 * tiles];
    let mut out = vec![0.0f32; 4 * HEAD_DIM];
    let bytes = (tiles + n) * HEAD_DIM * 2;
    println!("isa {}, {n} positions, head dim {HEAD_DIM}", isa.name());
    for g in 1..=4 {
        let mut run = |r: usize| {
            let (k, v) = &runs[r];
            attend_heads(isa, HEAD_DIM, &q[..g * HEAD_DIM], k, v, 0, 0.125, &mut scores, &mut out[..g * HEAD_DIM]);
        };
        let hot = best_ns(50, || {
            for _ in 0..8 {
                run(0)
            }
        }) / 8.0;
        let cold = best_ns(20, || (0..RUNS).for_each(&mut run)) / RUNS as f64;
        println!(
            "G {g}: L2 {:.2} ns/(head·position), memory {:.2} ns/(head·position), {:.1} GB/s",
            hot / (g * n) as f64,
            cold / (g * n) as f64,
            bytes as f64 / cold
        );
    }
}

/// The fastest of `reps` calls of `f`, in nanoseconds.
fn best_ns(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    (0..reps)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_nanos() as f64
        })
        .fold(f64::INFINITY, f64::min)
}
