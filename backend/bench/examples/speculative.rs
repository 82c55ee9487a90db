//! Speculative decoding by prompt lookup on the committed workload
//! (backend/bench/workloads/speculative.json): every prompt decoded plain and with
//! lookup drafts on the fast CPU runtime, alternately and [`REPEATS`] times each, the
//! fastest run of each kept (on a shared machine the fastest is the one least
//! disturbed), and per prompt class the decode tok/s of each, the speed-up, the share
//! of drafted tokens accepted and the tokens per step. Greedy, and every run's tokens
//! are checked equal to the plain run's.
//!
//! usage: speculative MODEL.gguf [THREADS] [int8|int16] [MAX_TOKENS] [DRAFT_MAX] [fixed]
//! (`fixed`: draft up to DRAFT_MAX on every match instead of sizing drafts by the
//! request's acceptance and the row cost; DRAFT_MAX defaults to the engine's).

use std::collections::BTreeMap;

use peregrine_engine::lab::workload;
use peregrine_engine::runtime::{Cancel, DecodeJob, Runtime};
use peregrine_engine::sampling::SamplingParams;
use peregrine_engine::speculative::{DraftCounts, DraftPlan, Sizing, DEFAULT_DRAFT_MAX};
use peregrine_engine::{build_generator, load_model, ActPrecision, EngineOptions};

/// Tokens per prompt, unless told.
const MAX_TOKENS: usize = 128;
/// Runs of each prompt and mode.
const REPEATS: usize = 3;

/// One decode: tokens, seconds from the first token to the last, draft counts.
struct Run {
    ids: Vec<u32>,
    decode_s: f64,
    counts: DraftCounts,
}

fn decode(rt: &mut dyn Runtime, prompt: &[u32], max_tokens: usize, stops: &[u32], draft: DraftPlan) -> Run {
    let sampling = SamplingParams::default();
    let job = DecodeJob { prompt, max_tokens, sampling: &sampling, stop_tokens: stops, top_logprobs: 0, cancel: Cancel::NEVER, reuse_prefix: false, draft, constraint: None };
    let (ids, decode_s) = peregrine_engine::lab::runs::timed(rt, &job).expect("the run succeeds");
    Run { ids, decode_s, counts: rt.draft_counts() }
}

/// A class's totals: decode tokens (after each run's first) and seconds, plain and drafting.
#[derive(Default)]
struct Totals {
    prompts: usize,
    tokens: usize,
    plain_s: f64,
    lookup_s: f64,
    drafted: usize,
    accepted: usize,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        eprintln!("usage: speculative MODEL.gguf [THREADS] [int8|int16] [MAX_TOKENS] [DRAFT_MAX] [fixed]");
        std::process::exit(2);
    };
    let threads: usize = args.get(2).and_then(|t| t.parse().ok()).unwrap_or(2);
    let act = if args.get(3).is_some_and(|a| a == "int8") { ActPrecision::Int8 } else { ActPrecision::Int16 };
    let max_tokens: usize = args.get(4).and_then(|t| t.parse().ok()).unwrap_or(MAX_TOKENS);
    let draft_max: usize = args.get(5).and_then(|t| t.parse().ok()).unwrap_or(DEFAULT_DRAFT_MAX);
    let sizing = if args.get(6).is_some_and(|a| a == "fixed") { Sizing::Fixed } else { Sizing::Adaptive };
    let mut options = EngineOptions::cpu();
    options.cpu.threads = Some(threads);
    options.cpu.act_precision = act;
    let files = load_model(std::path::Path::new(path)).expect("the model loads");
    let (mut rt, text) = build_generator(files, &options).expect("the runtime starts").into_parts();
    let stops = text.tokenizer.as_ref().map(|t| t.eos_ids().to_vec()).unwrap_or_default();
    let capacity = rt.verify_capacity();
    let plan = DraftPlan { max: draft_max, sizing, row_cost: capacity.row_cost }.within(capacity);
    println!(
        "{} · {threads} threads · {act:?} activations · {max_tokens} tokens max · drafts ≤ {} ({sizing:?}, row cost {})",
        rt.backend().devices.join(", "),
        plan.max,
        capacity.row_cost
    );
    let items = workload::load(&workload::default_path()).expect("the workload reads");
    // One untimed run warms the caches and the thread team.
    let warm = items[0].ids(&text).expect("tokenizes");
    decode(rt.as_mut(), &warm, 16, &stops, plan);
    let mut totals: BTreeMap<&str, Totals> = BTreeMap::new();
    println!("\n| prompt | class | tokens | plain tok/s | lookup tok/s | speed-up | accepted | tokens/step |");
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for item in &items {
        let prompt = item.ids(&text).expect("tokenizes");
        let mut plain = decode(rt.as_mut(), &prompt, max_tokens, &stops, DraftPlan::OFF);
        let mut lookup = decode(rt.as_mut(), &prompt, max_tokens, &stops, plan);
        for _ in 1..REPEATS {
            let p = decode(rt.as_mut(), &prompt, max_tokens, &stops, DraftPlan::OFF);
            let l = decode(rt.as_mut(), &prompt, max_tokens, &stops, plan);
            assert_eq!((&p.ids, &l.ids), (&plain.ids, &plain.ids), "{}: runs differ", item.name);
            plain.decode_s = plain.decode_s.min(p.decode_s);
            lookup.decode_s = lookup.decode_s.min(l.decode_s);
        }
        assert_eq!(lookup.ids, plain.ids, "{}: drafting changed the output", item.name);
        let n = plain.ids.len();
        if n < 2 {
            continue;
        }
        let (c, d) = (lookup.counts, n - 1);
        let rate = |s: f64| d as f64 / s;
        let steps = n - c.accepted;
        println!(
            "| {} | {} | {n} | {:.1} | {:.1} | {:.2}× | {} | {:.2} |",
            item.name,
            item.class,
            rate(plain.decode_s),
            rate(lookup.decode_s),
            plain.decode_s / lookup.decode_s,
            if c.drafted > 0 { format!("{}/{}", c.accepted, c.drafted) } else { "–".into() },
            n as f64 / steps as f64
        );
        let t = totals.entry(workload::CLASSES.iter().find(|&&k| k == item.class).copied().unwrap_or("other")).or_default();
        t.prompts += 1;
        t.tokens += d;
        t.plain_s += plain.decode_s;
        t.lookup_s += lookup.decode_s;
        t.drafted += c.drafted;
        t.accepted += c.accepted;
    }
    println!("\n| class | prompts | plain tok/s | lookup tok/s | speed-up | acceptance | tokens/step |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for class in workload::CLASSES {
        let Some(t) = totals.get(class) else { continue };
        let acceptance = if t.drafted > 0 { format!("{:.0}%", 100.0 * t.accepted as f64 / t.drafted as f64) } else { "–".into() };
        println!(
            "| {class} | {} | {:.1} | {:.1} | {:.2}× | {acceptance} | {:.2} |",
            t.prompts,
            t.tokens as f64 / t.plain_s,
            t.tokens as f64 / t.lookup_s,
            t.plain_s / t.lookup_s,
            t.tokens as f64 / (t.tokens - t.accepted) as f64
        );
    }
}
