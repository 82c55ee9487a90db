//! Time of one batched decode step of the fast CPU runtime, per number of sequences:
//! what continuous batching costs the engine alone (no server, no sampling).
//!
//! usage: batch_step MODEL.gguf [THREADS] [int8|int16] [SIZES] [PROMPT] [serve]
//! (`int8`: 8-bit activations; SIZES: comma-separated sequence counts, default
//! 1,2,3,4,6,8; PROMPT: tokens each sequence holds before the timed steps, default
//! 100). With `serve`, the first size only, driven over stdin for
//! `scripts/bench/interleave_ab.py`: prints `ready`, then for each line `N` runs N
//! steps and prints their mean ms per step; the sequences go back to the prompt every
//! [`STEPS`] steps, so every measurement sees the same context lengths. SIZES `prefill`
//! with `serve` times prompts instead: each line `N` runs N prefills of PROMPT tokens.
use std::io::BufRead;
use std::time::Instant;

use peregrine_engine::cpu::act_quant::ActPrecision;
use peregrine_engine::cpu::fast_runtime::{FastOptions, FastRuntime};
use peregrine_engine::runtime::{BatchDecode, SlotTokens};

/// Prompt tokens each sequence holds before the timed steps, unless told.
const PROMPT: usize = 100;
/// Timed steps per batch size (after 5 untimed ones).
const STEPS: usize = 60;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        eprintln!("usage: batch_step MODEL.gguf [THREADS] [int8|int16] [SIZES] [PROMPT]");
        std::process::exit(2);
    };
    let threads = args.get(2).and_then(|t| t.parse().ok()).unwrap_or(2);
    let (_, config, weights) = peregrine_engine::gguf::load_gguf(std::path::Path::new(path)).expect("the model loads");
    let mut options = FastOptions::defaults();
    options.threads = threads;
    if args.get(3).is_some_and(|a| a == "int8") {
        options.act_precision = ActPrecision::Int8;
    }
    let mut rt = FastRuntime::new(&config, &weights, options).expect("the runtime starts");
    let prompt_len: usize = args.get(5).map_or(PROMPT, |p| p.parse().expect("PROMPT: a token count"));
    let prompt: Vec<u32> = (0..prompt_len as u32).map(|i| 100 + i * 7 % 40_000).collect();
    println!("{threads} threads, {:?} activations, {prompt_len}-token prompts", options.act_precision);
    if args.get(4).is_some_and(|a| a == "prefill") && args.get(6).is_some_and(|a| a == "serve") {
        serve_prefill(&mut rt, &prompt);
        return;
    }
    let sizes: Vec<usize> = match args.get(4) {
        Some(list) => list.split(',').map(|b| b.parse().expect("SIZES: comma-separated counts")).collect(),
        None => vec![1, 2, 3, 4, 6, 8],
    };
    if args.get(6).is_some_and(|a| a == "serve") {
        serve(&mut rt, sizes[0], &prompt);
        return;
    }
    for b in sizes {
        let tokens = open_all(&mut rt, b, &prompt, false);
        let work: Vec<SlotTokens> = (0..b).map(|s| SlotTokens { slot: s, tokens: &tokens[s], logit_rows: 1 }).collect();
        for _ in 0..5 {
            rt.step(&work).expect("step");
        }
        let ms = run_steps(&mut rt, &work, STEPS);
        println!("batch {b}: {ms:.2} ms/step, {:.1} tok/s aggregate, {:.1} per stream", b as f64 * 1e3 / ms, 1e3 / ms);
        for s in 0..b {
            rt.close(s);
        }
    }
}

/// Opens `b` sequences holding `prompt` (with `reuse`, from what their slots hold) and
/// returns the token each decodes per step.
fn open_all(rt: &mut FastRuntime, b: usize, prompt: &[u32], reuse: bool) -> Vec<[u32; 1]> {
    for s in 0..b {
        let kept = rt.open(s, prompt.len() + 5 + STEPS, prompt, reuse).expect("open");
        for chunk in prompt[kept..].chunks(rt.step_tokens()) {
            rt.step(&[SlotTokens { slot: s, tokens: chunk, logit_rows: 1 }]).expect("prompt");
        }
    }
    (0..b as u32).map(|s| [500 + s]).collect()
}

/// Mean ms per step of `n` steps.
fn run_steps(rt: &mut FastRuntime, work: &[SlotTokens], n: usize) -> f64 {
    let t = Instant::now();
    for _ in 0..n {
        rt.step(work).expect("step");
    }
    t.elapsed().as_secs_f64() * 1e3 / n as f64
}

/// The `serve` protocol (see the file's doc).
fn serve(rt: &mut FastRuntime, b: usize, prompt: &[u32]) {
    let tokens = open_all(rt, b, prompt, false);
    let work: Vec<SlotTokens> = (0..b).map(|s| SlotTokens { slot: s, tokens: &tokens[s], logit_rows: 1 }).collect();
    let mut since_reset = 0;
    serve_lines("step", |n| {
        if since_reset + n > STEPS {
            open_all(rt, b, prompt, true);
            since_reset = 0;
        }
        since_reset += n;
        run_steps(rt, &work, n)
    });
}

/// The `serve` protocol over whole prompts: each line `N` runs N prefills of `prompt`
/// in a fresh sequence and prints their mean ms.
fn serve_prefill(rt: &mut FastRuntime, prompt: &[u32]) {
    serve_lines("prefill", |n| {
        let t = Instant::now();
        for _ in 0..n {
            open_all(rt, 1, prompt, false);
        }
        t.elapsed().as_secs_f64() * 1e3 / n as f64
    });
}

/// Prints `ready`, then for each stdin line `N` the mean ms `run(N)` measured.
fn serve_lines(what: &str, mut run: impl FnMut(usize) -> f64) {
    println!("ready");
    for line in std::io::stdin().lock().lines() {
        let Ok(n) = line.expect("stdin").trim().parse::<usize>() else {
            eprintln!("serve: expected a {what} count");
            std::process::exit(2);
        };
        println!("{:.4}", run(n));
    }
}
