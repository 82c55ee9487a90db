//! Where one decode step of the fast CPU runtime spends its time, op by op: the whole
//! step, then each kind of work alone on the same thread team (every layer's matrices
//! of one kind as the forward pass splits them, activation quantisation, norms,
//! SiLU·up, attention, barriers), with the matrices' GB/s against a read loop.
//!
//! usage: cpu_ops MODEL.gguf [THREADS] [ISA]   (ISA: portable | avx2 | avx512)
use std::time::Instant;

use peregrine_engine::cpu::act_quant::{ActPrecision, QuantActs, QuantView, TokenActs};
use peregrine_engine::cpu::attend::attend;
use peregrine_engine::cpu::fast_model::{FastLayer, FastModel};
use peregrine_engine::cpu::forward::{forward, LogitsFor};
use peregrine_engine::cpu::isa::Isa;
use peregrine_engine::cpu::kernels::{matmul, MatmulIo};
use peregrine_engine::cpu::kv_cache::KvCache;
use peregrine_engine::cpu::packed::PackedMatrix;
use peregrine_engine::cpu::pool::{Pool, Team};
use peregrine_engine::cpu::vecops;
use peregrine_engine::cpu::workspace::Workspace;
use peregrine_engine::lab::read_bandwidth::read_bandwidth;

/// Tokens in the cache before the timed steps (the bench's short prompt).
const PROMPT: usize = 8;
/// Timed repetitions of each measurement (the median is printed).
const REPS: usize = 200;
/// Prompt length of the prefill measurement (the bench's).
const PREFILL: usize = 256;

/// Median wall time of `f` in microseconds, after a few untimed calls.
fn time_us(f: impl FnMut()) -> f64 {
    time_reps(REPS, f)
}

/// Wall times of `reps` calls of `f` in microseconds, sorted, after a few untimed calls.
fn sorted_times(reps: usize, mut f: impl FnMut()) -> Vec<f64> {
    for _ in 0..reps.min(10) {
        f();
    }
    let mut t: Vec<f64> = (0..reps)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t
}

/// The fastest of `reps` calls: a kernel's own speed, with the shared machine's
/// interruptions left out.
fn best_us(reps: usize, f: impl FnMut()) -> f64 {
    sorted_times(reps, f)[0]
}

/// [`time_us`] over `reps` timed calls.
fn time_reps(reps: usize, f: impl FnMut()) -> f64 {
    let t = sorted_times(reps, f);
    t[t.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        eprintln!("usage: cpu_ops MODEL.gguf [THREADS] [ISA]");
        std::process::exit(2);
    };
    let threads: usize = args.get(2).and_then(|t| t.parse().ok()).unwrap_or(2);
    let isa = Isa::detect(args.get(3).and_then(|n| Isa::from_name(n)));
    let (_, config, weights) = peregrine_engine::gguf::load_gguf(std::path::Path::new(path)).expect("the model loads");
    let model = FastModel::new(&config, &weights, isa, threads).expect("the model repacks");
    let pool = Pool::new(threads).expect("threads start");
    let precision = ActPrecision::Int16;
    let mut ws = Workspace::new(&model, PROMPT, threads, precision);
    let mut cache = KvCache::new(&config);
    let prompt: Vec<u32> = (0..PROMPT as u32).map(|i| 100 + i * 7).collect();
    forward(&model, &pool, &mut ws, &mut cache, &prompt, LogitsFor::Last).expect("prompt");
    let layers = model.layers.len();
    println!("{} threads, isa {}, {layers} layers, {PROMPT}-token prompt", threads, isa.name());

    let step = time_us(|| {
        forward(&model, &pool, &mut ws, &mut cache, &[500], LogitsFor::Last).expect("step");
        cache.truncate(PROMPT);
    });
    println!("decode step: {step:.0} µs ({:.1} tok/s)", 1e6 / step);

    // Matrices alone, one kind at a time over every layer, split as the pass splits them.
    let (d, ffn) = (config.hidden_size, config.intermediate_size);
    let act = |cols: usize| {
        let mut q = QuantActs::new(cols, 1, precision);
        let x: Vec<f32> = (0..cols).map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.02).collect();
        // SAFETY: single-threaded; nothing else touches the buffer.
        unsafe { q.view().quantize(isa, 0, 0, &x) };
        (q, x)
    };
    let (mut hq, hx) = act(d);
    let (mut aq, ax) = act(ffn);
    let (h_view, a_view) = (hq.view(), aq.view());
    let mut total_us = 0.0;
    let mut total_bytes = 0usize;
    type Pick = fn(&FastLayer) -> Vec<&PackedMatrix>;
    let kinds: [(&str, Pick, bool); 4] = [
        ("q+k+v", |l| vec![&l.q, &l.k, &l.v], false),
        ("o", |l| vec![&l.o], false),
        ("gate+up", |l| vec![&l.gate, &l.up], false),
        ("down", |l| vec![&l.down], true),
    ];
    // One scratch output row per member, room for the widest matrix (the LM head).
    let mut outs: Vec<Vec<f32>> = (0..threads).map(|_| vec![0.0; model.head.padded_rows()]).collect();
    let outs_ptr: Vec<usize> = outs.iter_mut().map(|o| o.as_mut_ptr() as usize).collect();
    let run_kind = |mats: &[&PackedMatrix], acts: &QuantView, team: &Team<'_>| {
        let acts = [acts.token(0)];
        for w in mats {
            let g = team.split(w.groups());
            if !g.is_empty() {
                let out = [outs_ptr[team.id] as *mut f32];
                let io = MatmulIo { quant: &acts, precision, float: &[std::ptr::null()], out: &out };
                // SAFETY: each member writes its own scratch row (room for any matrix).
                unsafe { matmul(isa, w, g, io) };
            }
        }
    };
    for (name, pick, wide) in kinds {
        let mats: Vec<&PackedMatrix> = model.layers.iter().flat_map(pick).collect();
        let bytes: usize = mats.iter().map(|m| m.size_bytes()).sum();
        let acts = if wide { &a_view } else { &h_view };
        let us = time_us(|| pool.run(&|team| run_kind(&mats, acts, team)));
        total_us += us;
        total_bytes += bytes;
        // Layer 0's matrices again and again: cache-resident, so the kernels' own ceiling.
        let first = pick(&model.layers[0]);
        let hot_bytes: usize = first.iter().map(|m| m.size_bytes()).sum();
        let hot = best_us(REPS, || pool.run(&|team| run_kind(&first, acts, team)));
        println!(
            "{name:>8}: {:6.0} µs/step  {:5.1} µs/layer  {:6.2} MB  {:5.1} GB/s   hot (best) {:5.1} GB/s",
            us,
            us / layers as f64,
            bytes as f64 / 1e6,
            bytes as f64 / us / 1e3,
            hot_bytes as f64 / hot / 1e3
        );
    }
    let head = [&model.head];
    let hb = model.head.size_bytes();
    let us = time_us(|| pool.run(&|team| run_kind(&head, &h_view, team)));
    total_us += us;
    total_bytes += hb;
    println!("{:>8}: {:6.0} µs/step  {:>15}  {:6.2} MB  {:5.1} GB/s", "head", us, "", hb as f64 / 1e6, hb as f64 / us / 1e3);
    println!("matrices: {total_us:.0} µs/step, {:.1} MB, {:.1} GB/s", total_bytes as f64 / 1e6, total_bytes as f64 / total_us / 1e3);

    // One member's share of the small ops of a step (every member normalises and
    // quantizes the whole hidden state itself; attention and SiLU are split).
    let mut h = vec![0.0f32; d];
    let norm = time_us(|| {
        for _ in 0..layers * 2 + 1 {
            vecops::rms_norm(isa, &hx, &model.final_norm, 1e-5, &mut h);
        }
    });
    let mut q = QuantActs::new(ffn, 1, precision);
    let view = q.view();
    let quant = time_us(|| {
        for _ in 0..layers {
            // SAFETY: single-threaded.
            unsafe {
                view.quantize(isa, 0, 0, &hx);
                view.quantize(isa, 0, 0, &hx);
                view.quantize(isa, 0, 0, &hx);
                view.quantize(isa, 0, 0, &ax[..ffn / threads]);
            }
        }
    });
    let mut act_out = vec![0.0f32; ffn];
    let silu = time_us(|| {
        for _ in 0..layers {
            vecops::silu_mul(isa, &ax[..ffn / threads], &ax[..ffn / threads], &mut act_out[..ffn / threads]);
        }
    });
    let hd = config.head_dim;
    let len = PROMPT + 1;
    // f16 bits of small values, as the cache holds them.
    let keys: Vec<u16> = (0..len.next_multiple_of(16) * hd).map(|i| 0x2000 + (i % 13) as u16).collect();
    let values: Vec<u16> = (0..len * hd).map(|i| 0x2000 + (i % 7) as u16).collect();
    let (mut scores, mut o) = (vec![0.0f32; 4096], vec![0.0f32; hd]);
    let heads = config.num_heads.div_ceil(threads);
    let attn = time_us(|| {
        for _ in 0..layers * heads {
            attend(isa, &hx[..hd], &keys, &values, 0, 0.125, &mut scores, &mut o);
        }
    });
    let barriers = time_us(|| {
        pool.run(&|team| {
            for _ in 0..layers * 5 {
                team.barrier();
            }
        })
    });
    println!("per member: norms {norm:.0} µs, act quant {quant:.0} µs, silu·up {silu:.0} µs, attention {attn:.0} µs ({len} positions)");
    println!("barriers: {barriers:.0} µs for {} (one pool job)", layers * 5);
    let sum = total_us + norm + quant + silu + attn + barriers;
    println!("sum of parts: {sum:.0} µs vs step {step:.0} µs");

    // Prefill: one forward call over a prompt of PREFILL tokens, and its layers'
    // matrices alone over the same batch (tiles of several tokens per weight load).
    let mut ws = Workspace::new(&model, PREFILL, threads, precision);
    let long: Vec<u32> = (0..PREFILL as u32).map(|i| 100 + i * 13 % 40000).collect();
    let prefill = time_reps(5, || {
        cache.truncate(0);
        forward(&model, &pool, &mut ws, &mut cache, &long, LogitsFor::Last).expect("prefill");
    });
    let mut big = QuantActs::new(ffn, PREFILL, precision);
    let bview = big.view();
    for t in 0..PREFILL {
        // SAFETY: single-threaded.
        unsafe { bview.quantize(isa, t, 0, &ax) };
    }
    let widest = model.layers[0].gate.padded_rows().max(model.layers[0].down.padded_rows());
    let mut out = vec![0.0f32; PREFILL * widest];
    let base = out.as_mut_ptr() as usize;
    let all: Vec<&PackedMatrix> = model.layers.iter().flat_map(|l| [&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down]).collect();
    let macs: usize = all.iter().map(|m| m.rows * m.cols).sum::<usize>() * PREFILL;
    let mm = best_us(5, || {
        pool.run(&|team| {
            let acts: Vec<TokenActs> = (0..PREFILL).map(|t| bview.token(t)).collect();
            let outs: Vec<*mut f32> = (0..PREFILL).map(|t| (base as *mut f32).wrapping_add(t * widest)).collect();
            for w in &all {
                let io = MatmulIo { quant: &acts, precision, float: &[], out: &outs };
                // SAFETY: members write disjoint row groups of every token's output row.
                unsafe { matmul(isa, w, team.split(w.groups()), io) };
            }
        })
    });
    println!(
        "prefill {PREFILL} tokens: {:.1} ms ({:.0} tok/s); layer matrices alone, best of 5: {:.1} ms ({:.1} GMAC/s, {:.0} tok/s)",
        prefill / 1e3,
        PREFILL as f64 * 1e6 / prefill,
        mm / 1e3,
        macs as f64 / mm / 1e3,
        PREFILL as f64 * 1e6 / mm
    );
    let bw = read_bandwidth(threads);
    println!("read loop: {:.1} GB/s; matrices at {:.0} % of it", bw / 1e9, 100.0 * total_bytes as f64 / total_us / 1e3 / (bw / 1e9));
}
