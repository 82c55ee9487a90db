//! Speculative decoding by prompt lookup is exact: over the committed workload
//! (backend/bench/workloads/speculative.json) greedy and seeded runs emit the same
//! tokens with drafts as without, on the reference and the fast CPU runtime (the tiny
//! transformers fixture, and the default model on the fast runtime); a rejected draft
//! leaves the cache as it was (the next step's logits, bit for bit); a stop from the
//! token callback inside an accepted run ends the run at that token; stop strings
//! inside and across accepted runs end requests where they do without drafts; batched
//! requests with drafts give what they give alone; a client cannot ask a step to
//! verify more rows than the runtime declares.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::llamacpp::default_model;
use peregrine_api::FinishReason;
use peregrine_engine::cpu::act_quant::ActPrecision;
use peregrine_engine::cpu::fast_runtime::{FastOptions, FastRuntime};
use peregrine_engine::cpu::isa::Isa;
use peregrine_engine::cpu::reference::{KvCache, ReferenceModel};
use peregrine_engine::cpu::reference_runtime::ReferenceRuntime;
use peregrine_engine::generator::TextModel;
use peregrine_engine::handle::{EngineHandle, EngineLimits, Submission};
use peregrine_engine::hf::load_hf_dir;
use peregrine_engine::lab::runs::{collect_drafting, ids};
use peregrine_engine::lab::workload;
use peregrine_engine::request::{Event, Prompt, Request};
use peregrine_engine::runtime::{Cancel, DecodeJob, Flow, RunEnd, Runtime, SlotTokens};
use peregrine_engine::sampling::{Sampled, SamplingParams};
use peregrine_engine::speculative::{DraftCounts, DraftPlan, Sizing, SpeculativeMode, SpeculativeRequest};
use peregrine_engine::{build_generator, load_model, CpuRuntimeKind, EngineOptions};

/// Threads of the runtimes under test (this machine's CI has two cores).
const THREADS: usize = 2;
/// The fixture's context is 128 positions: its prompts are the workload's last ids.
const FIXTURE_PROMPT: usize = 64;
const FIXTURE_TOKENS: usize = 48;
/// Tokens per workload prompt on the default model.
const MODEL_TOKENS: usize = 32;

/// Drafts on every match, up to `max`: the most verification work, so exactness is
/// checked on as many accepted and rejected rows as the prompts allow.
fn fixed(max: usize) -> DraftPlan {
    DraftPlan { max, sizing: Sizing::Fixed, row_cost: 0.0 }
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf/llama-gqa-untied")
}

fn fast_fixture() -> FastRuntime {
    let (config, weights) = load_hf_dir(&fixture()).unwrap();
    let options = FastOptions { threads: THREADS, isa: Isa::detect(None), prefill_batch: 64, act_precision: ActPrecision::Int16 };
    FastRuntime::new(&config, &weights, options).unwrap()
}

fn reference_fixture() -> ReferenceRuntime {
    let (config, weights) = load_hf_dir(&fixture()).unwrap();
    ReferenceRuntime::new(&config, &weights).unwrap()
}

/// The default model's runtime (`kind`) and text side.
fn default_parts(kind: CpuRuntimeKind) -> (Box<dyn Runtime>, TextModel) {
    let mut options = EngineOptions::cpu();
    options.cpu.threads = Some(THREADS);
    options.cpu.runtime = kind;
    build_generator(load_model(&default_model()).unwrap(), &options).unwrap().into_parts()
}

/// The workload's prompts as the default tokenizer reads them.
fn workload_ids(text: &TextModel) -> Vec<(String, Vec<u32>)> {
    let items = workload::load(&workload::default_path()).unwrap();
    assert!(items.len() >= 40, "the workload has {} prompts", items.len());
    items.iter().map(|i| (i.name.clone(), i.ids(text).unwrap())).collect()
}

/// The workload's prompts folded into the fixture's vocabulary and context: the same
/// repetitions, so lookup finds as much to draft.
fn fixture_prompts(vocab: usize) -> Vec<(String, Vec<u32>)> {
    let (_, text) = default_parts(CpuRuntimeKind::Reference);
    workload_ids(&text)
        .into_iter()
        .map(|(name, ids)| {
            let tail = &ids[ids.len().saturating_sub(FIXTURE_PROMPT)..];
            (name, tail.iter().map(|&t| t % vocab as u32).collect())
        })
        .collect()
}

/// Runs every prompt plain and with `plan`; asserts equal outputs; returns the counts.
fn same_with_drafts(rt: &mut dyn Runtime, prompts: &[(String, Vec<u32>)], n: usize, sampling: &SamplingParams, plan: DraftPlan) -> DraftCounts {
    let mut total = DraftCounts::default();
    for (name, prompt) in prompts {
        let (plain, plain_end, none) = collect_drafting(rt, prompt, n, sampling, DraftPlan::OFF).unwrap();
        assert_eq!(none, DraftCounts::default(), "{name}: a plan without drafts drafted");
        let (drafted, end, counts) = collect_drafting(rt, prompt, n, sampling, plan).unwrap();
        assert_eq!(ids(&drafted), ids(&plain), "{name}: tokens differ with drafts ({counts:?})");
        let flagged = drafted.iter().filter(|s| s.accepted_draft).count();
        assert_eq!(flagged, counts.accepted, "{name}: tokens marked as accepted drafts against the counts");
        let unmarked: Vec<Sampled> = drafted.into_iter().map(|s| Sampled { accepted_draft: false, ..s }).collect();
        assert_eq!(unmarked, plain, "{name}: log-probabilities differ with drafts");
        assert_eq!(end, plain_end, "{name}");
        total.drafted += counts.drafted;
        total.accepted += counts.accepted;
    }
    total
}

/// Both kinds of rows happened: accepted ones, and rejected ones that were rolled back.
fn assert_both_outcomes(what: &str, counts: DraftCounts) {
    eprintln!("{what}: {counts:?}");
    assert!(counts.accepted > 0, "{what}: no draft was accepted: {counts:?}");
    assert!(counts.drafted > counts.accepted, "{what}: no draft was rejected: {counts:?}");
}

#[test]
fn greedy_workload_is_identical_with_drafts_on_the_fixture() {
    let mut fast = fast_fixture();
    let prompts = fixture_prompts(fast.config().vocab_size);
    let greedy = SamplingParams::default();
    let fast_counts = same_with_drafts(&mut fast, &prompts, FIXTURE_TOKENS, &greedy, fixed(7));
    assert_both_outcomes("fast, fixture", fast_counts);
    let mut reference = reference_fixture();
    let ref_counts = same_with_drafts(&mut reference, &prompts, FIXTURE_TOKENS, &greedy, fixed(7));
    assert_both_outcomes("reference, fixture", ref_counts);
}

#[test]
fn greedy_workload_is_identical_with_drafts_on_the_default_model() {
    let (mut fast, text) = default_parts(CpuRuntimeKind::Fast);
    let prompts = workload_ids(&text);
    let counts = same_with_drafts(fast.as_mut(), &prompts, MODEL_TOKENS, &SamplingParams::default(), fixed(3));
    assert_both_outcomes("fast, default model", counts);
}

#[test]
fn seeded_sampling_with_drafts_emits_the_plain_runs_tokens() {
    // Penalties and a logit bias see the accepted tokens as they see emitted ones.
    let mut fast = fast_fixture();
    let mut reference = reference_fixture();
    let prompts = fixture_prompts(fast.config().vocab_size);
    let mut counts = DraftCounts::default();
    for seed in 0..6 {
        let sampling = SamplingParams {
            temperature: 0.7,
            seed,
            repetition_penalty: 1.05,
            presence_penalty: 0.2,
            frequency_penalty: 0.1,
            logit_bias: vec![(7, 1.5)],
            ..SamplingParams::default()
        };
        let some = &prompts[seed as usize * 5..seed as usize * 5 + 5];
        let c = same_with_drafts(&mut fast, some, FIXTURE_TOKENS, &sampling, fixed(4));
        let r = same_with_drafts(&mut reference, some, FIXTURE_TOKENS, &sampling, fixed(4));
        counts.drafted += c.drafted + r.drafted;
        counts.accepted += c.accepted + r.accepted;
    }
    assert_both_outcomes("sampled, fixture", counts);
}

#[test]
fn a_rejected_draft_leaves_the_cache_as_it_was() {
    let prompt: Vec<u32> = (0..40).map(|i| (i * 37 + 11) % 320).collect();
    let (t, u) = (5u32, 9u32);
    // Fast runtime: slot 0 runs a draft of three and drops it, slot 1 never sees it.
    let mut fast = fast_fixture();
    let rt = fast.batch().unwrap();
    for slot in 0..2 {
        rt.open(slot, 128, &prompt, false).unwrap();
        rt.step(&[SlotTokens { slot, tokens: &prompt, logit_rows: 1 }]).unwrap();
    }
    rt.step(&[SlotTokens { slot: 0, tokens: &[t, 100, 101, 102], logit_rows: 4 }, SlotTokens { slot: 1, tokens: &[t], logit_rows: 1 }])
        .unwrap();
    rt.rollback(0, 3);
    rt.step(&[SlotTokens { slot: 0, tokens: &[u], logit_rows: 1 }, SlotTokens { slot: 1, tokens: &[u], logit_rows: 1 }]).unwrap();
    assert_eq!(rt.logits(0), rt.logits(1), "fast: logits after a rolled-back draft");
    // Reference model: the same through its cache.
    let (config, weights) = load_hf_dir(&fixture()).unwrap();
    let model = ReferenceModel::new(&config, &weights).unwrap();
    let (mut a, mut b) = (KvCache::new(&config, 128), KvCache::new(&config, 128));
    model.forward(&mut a, &prompt, false).unwrap();
    model.forward(&mut b, &prompt, false).unwrap();
    model.forward(&mut a, &[t, 100, 101, 102], true).unwrap();
    a.truncate(a.filled() - 3);
    model.forward(&mut b, &[t], false).unwrap();
    assert_eq!(model.forward(&mut a, &[u], false).unwrap(), model.forward(&mut b, &[u], false).unwrap(), "reference");
}

#[test]
fn a_stop_from_the_callback_inside_an_accepted_run_ends_there() {
    let mut fast = fast_fixture();
    // A prompt that repeats: the fixture's greedy run continues it, drafts accepted.
    let prompt: Vec<u32> = [1u32, 2, 3, 4, 5, 6].iter().cycle().take(48).copied().collect();
    let sampling = SamplingParams::default();
    let (plain, _, _) = collect_drafting(&mut fast, &prompt, 24, &sampling, DraftPlan::OFF).unwrap();
    let (_, _, counts) = collect_drafting(&mut fast, &prompt, 24, &sampling, fixed(7)).unwrap();
    assert!(counts.accepted >= 8, "the run must accept long drafts: {counts:?}");
    for n in 1..=16 {
        let job = DecodeJob {
            prompt: &prompt,
            max_tokens: 24,
            sampling: &sampling,
            stop_tokens: &[],
            top_logprobs: 0,
            cancel: Cancel::NEVER,
            reuse_prefix: false,
            draft: fixed(7),
            constraint: None,
        };
        let mut seen = Vec::new();
        let end = fast
            .generate(&job, &mut |s| {
                seen.push(s.id);
                if seen.len() == n {
                    Flow::Stop
                } else {
                    Flow::Continue
                }
            })
            .unwrap();
        assert_eq!(end, RunEnd::Stopped);
        assert_eq!(seen, ids(&plain)[..n], "stopped at token {n}");
    }
}

fn engine(kind: CpuRuntimeKind, max_batch: usize, speculative: SpeculativeMode) -> EngineHandle {
    let mut options = EngineOptions::cpu();
    options.cpu.threads = Some(THREADS);
    options.cpu.runtime = kind;
    let limits = EngineLimits { max_queue: 8, max_batch: Some(max_batch), kv_budget: None, speculative };
    EngineHandle::start(move || build_generator(load_model(&default_model())?, &options), limits).unwrap()
}

/// Ids, text, finish reason and the timings' draft counts of a request, and how many
/// of its tokens said they were accepted drafts.
#[derive(Debug, Clone, PartialEq)]
struct Outcome {
    ids: Vec<u32>,
    text: String,
    finish: Option<FinishReason>,
    drafts: (u32, u32),
    flagged: u32,
}

async fn run_out(sub: &mut Submission) -> Outcome {
    run_cancelling(sub, usize::MAX).await
}

/// [`run_out`] that cancels the request at the `nth` token that is an accepted draft:
/// while the engine thread is still handing out that step's accepted run.
async fn run_cancelling(sub: &mut Submission, nth: usize) -> Outcome {
    let mut out = Outcome { ids: Vec::new(), text: String::new(), finish: None, drafts: (0, 0), flagged: 0 };
    loop {
        let event = tokio::time::timeout(Duration::from_secs(120), sub.events.recv()).await.expect("an event within 120 s");
        match event.expect("channel open") {
            Event::Token { id, text, sampled } => {
                out.ids.push(id);
                out.text += &text;
                out.flagged += u32::from(sampled.accepted_draft);
                if sampled.accepted_draft && out.flagged as usize == nth {
                    sub.cancel.cancel();
                }
            }
            Event::Text(t) => out.text += &t,
            Event::Done { finish_reason, timings, .. } => {
                out.finish = Some(finish_reason);
                out.drafts = (timings.draft_n, timings.draft_n_accepted);
                return out;
            }
            Event::Error { message, .. } => panic!("request failed: {message}"),
            _ => {}
        }
    }
}

fn completion(prompt: &str, max_tokens: usize) -> Request {
    Request { max_tokens, ..Request::new(Prompt::Text(prompt.into())) }
}

const TABLE: &str = "| Code | Status |\n| --- | --- |\n| 200 | OK |\n| 201 | Created |\n| 202 | Accepted |\n| 204 | No Content |\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_strings_inside_and_across_accepted_runs_end_where_they_do_without_drafts() {
    for batch in [1, 4] {
        let on = engine(CpuRuntimeKind::Fast, batch, SpeculativeMode::Lookup);
        let off = engine(CpuRuntimeKind::Fast, batch, SpeculativeMode::Off);
        let free = completion(TABLE, 40);
        let plain = run_out(&mut off.submit(free.clone()).unwrap()).await;
        let drafted = run_out(&mut on.submit(free.clone()).unwrap()).await;
        assert_eq!(drafted.ids, plain.ids);
        assert_eq!(drafted.text, plain.text);
        assert!(drafted.drafts.1 > 0, "the table's rows are drafted and accepted: {drafted:?}");
        assert_eq!(plain.drafts, (0, 0));
        // Stop strings ending at many places of the output, inside token runs that
        // drafts supplied and across the ends of steps.
        let chars: Vec<(usize, char)> = plain.text.char_indices().collect();
        let mut checked = 0;
        for w in (4..chars.len()).step_by(3) {
            let (start, end) = (chars[w - 4].0, chars[w].0);
            let stop = plain.text[start..end].to_string();
            if stop.trim().is_empty() {
                continue;
            }
            let r = Request { stop: vec![stop.clone()], ..free.clone() };
            let a = run_out(&mut off.submit(r.clone()).unwrap()).await;
            let b = run_out(&mut on.submit(r).unwrap()).await;
            assert_eq!((&b.ids, &b.text, b.finish), (&a.ids, &a.text, a.finish), "batch {batch}, stop {stop:?}");
            assert_eq!(a.finish, Some(FinishReason::Stop));
            checked += 1;
        }
        assert!(checked >= 10, "only {checked} stop strings");
        on.shutdown();
        off.shutdown();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_requests_with_drafts_give_what_they_give_alone() {
    let items = workload::load(&workload::default_path()).unwrap();
    let pick = |name: &str| items.iter().find(|i| i.name == name).unwrap().prompt().unwrap();
    let mut seeded = Request { max_tokens: 40, ..Request::new(pick("story")) };
    seeded.sampling = SamplingParams { temperature: 0.8, top_k: 40, seed: 11, ..SamplingParams::default() };
    let requests = vec![
        Request { max_tokens: 40, ..Request::new(pick("rust_test_cases")) },
        Request { max_tokens: 40, ..Request::new(pick("markdown_table")) },
        Request { max_tokens: 40, ..Request::new(pick("rename_variable")) },
        seeded,
    ];
    let off = engine(CpuRuntimeKind::Fast, 1, SpeculativeMode::Off);
    let mut alone = Vec::new();
    for r in &requests {
        alone.push(run_out(&mut off.submit(r.clone()).unwrap()).await);
    }
    off.shutdown();
    let on = engine(CpuRuntimeKind::Fast, 4, SpeculativeMode::Lookup);
    let mut subs: Vec<Submission> = requests.iter().map(|r| on.submit(r.clone()).unwrap()).collect();
    let mut accepted = 0;
    for (i, (sub, solo)) in subs.iter_mut().zip(&alone).enumerate() {
        let got = run_out(sub).await;
        assert_eq!((&got.ids, &got.text, got.finish), (&solo.ids, &solo.text, solo.finish), "request {i}");
        assert_eq!(got.flagged, got.drafts.1, "request {i}: tokens marked as accepted drafts against the timings");
        accepted += got.drafts.1;
    }
    assert!(accepted > 0, "the batch verified and accepted drafts");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_inside_an_accepted_run_ends_the_request_and_leaves_nothing_behind() {
    for batch in [1, 4] {
        let on = engine(CpuRuntimeKind::Fast, batch, SpeculativeMode::Lookup);
        let table = completion(TABLE, 40);
        let plain = run_out(&mut on.submit(Request { speculative: SpeculativeRequest { mode: Some(SpeculativeMode::Off), ..Default::default() }, ..table.clone() }).unwrap()).await;
        // A neighbour decoding beside it (batch 4) must not notice.
        let neighbour = completion("fn fibonacci(n: u64) -> u64 {", 32);
        let neighbour_alone = run_out(&mut on.submit(neighbour.clone()).unwrap()).await;
        for nth in [1, 2, 5] {
            let mut beside = on.submit(neighbour.clone()).unwrap();
            let cut = run_cancelling(&mut on.submit(table.clone()).unwrap(), nth).await;
            assert_eq!(cut.finish, Some(FinishReason::Cancelled), "batch {batch}, cancel at accepted draft {nth}: {cut:?}");
            assert!(plain.ids.starts_with(&cut.ids), "batch {batch}, nth {nth}: {cut:?} is not the start of {plain:?}");
            assert!(cut.ids.len() < plain.ids.len(), "batch {batch}, nth {nth}: the cancel did not stop the run");
            assert_eq!(run_out(&mut beside).await, neighbour_alone, "batch {batch}, nth {nth}: the neighbour changed");
            // The cancelled request's positions left the cache: the same request again is whole.
            let again = run_out(&mut on.submit(table.clone()).unwrap()).await;
            assert_eq!((&again.ids, &again.text), (&plain.ids, &plain.text), "batch {batch}, after a cancel at {nth}");
        }
        on.shutdown();
    }
}

#[test]
fn a_client_cannot_ask_for_more_rows_than_the_runtime_verifies() {
    let on = engine(CpuRuntimeKind::Fast, 1, SpeculativeMode::Lookup);
    let ask = |n_max| Request { speculative: SpeculativeRequest { n_max: Some(n_max), ..Default::default() }, ..completion("Hi", 4) };
    assert!(on.admit(&ask(7)).is_ok());
    let err = on.admit(&ask(8)).unwrap_err().to_string();
    assert!(err.contains("speculative.n_max"), "{err}");
    on.shutdown();
    // The runtime's own guard, whoever builds the work: a step refuses more verified
    // rows than it declares, and a job's plan is cut to the declaration.
    let mut fast = fast_fixture();
    let rows = fast.verify_capacity().rows;
    let tokens: Vec<u32> = (0..rows as u32 + 1).collect();
    let rt = fast.batch().unwrap();
    rt.open(0, 64, &tokens, false).unwrap();
    let err = rt.step(&[SlotTokens { slot: 0, tokens: &tokens, logit_rows: rows + 1 }]).unwrap_err();
    assert!(err.to_string().contains("logit rows"), "{err}");
    let prompt: Vec<u32> = [1u32, 2, 3, 4].iter().cycle().take(40).copied().collect();
    let (plain, _, _) = collect_drafting(&mut fast, &prompt, 40, &SamplingParams::default(), DraftPlan::OFF).unwrap();
    let (big, _, counts) = collect_drafting(&mut fast, &prompt, 40, &SamplingParams::default(), fixed(1000)).unwrap();
    assert_eq!(ids(&big), ids(&plain));
    assert!(counts.drafted > 0);
}
