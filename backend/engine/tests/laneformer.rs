//! Kog's Laneformer checkpoints (tiny random-weight ones from
//! scripts/fixtures/make_laneformer_fixtures.py, in the published layout) against that
//! script's independent PyTorch reference: teacher-forced logits and 64 greedy tokens,
//! for the float32 lane reference and for the runtimes that serve them; and the
//! loader's errors for inconsistent checkpoints.

use std::path::{Path, PathBuf};

use peregrine_engine::config::LaneHead;
use peregrine_engine::cpu::act_quant::ActPrecision;
use peregrine_engine::cpu::fast_runtime::{FastOptions, FastRuntime};
use peregrine_engine::cpu::isa::Isa;
use peregrine_engine::cpu::reference_runtime::ReferenceRuntime;
use peregrine_engine::dtp::reference::{Execution, ShardedModel};
use peregrine_engine::dtp::DtpSchedule;
use peregrine_engine::hf::load_hf_dir;
use peregrine_engine::lab::logits::{argmax, rel_err};
use peregrine_engine::lab::runs::{collect, ids};
use peregrine_engine::runtime::Runtime;
use peregrine_engine::sampling::SamplingParams;
use serde::Deserialize;

/// Largest allowed ‖Δ‖/‖ref‖ of the logits (the required bound), for the float32 runtimes.
const MAX_REL_ERR: f64 = 1e-4;
/// The same for the fast CPU runtime, whose KV cache holds f16 (an 11-bit significand,
/// as llama.cpp's default): that alone puts these fixtures' logits ~2·10⁻⁴ off.
const MAX_REL_ERR_F16_KV: f64 = 1e-3;

/// Every fixture the script writes.
const FIXTURES: [&str; 5] = [
    "replicate-early-allreduce",
    "vocab-parallel-early-local",
    "lane-head-lane-norms-window",
    "pre-norm-agg-no-comm",
    "single-lane-window",
];

#[derive(Deserialize)]
struct Reference {
    prompt: Vec<u32>,
    greedy_prompt: Vec<u32>,
    greedy_tokens: Vec<u32>,
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/laneformer").join(name)
}

fn reference(name: &str) -> (Reference, Vec<f32>) {
    let dir = fixture(name);
    let r = serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap()).unwrap();
    let logits =
        std::fs::read(dir.join("ref_logits.f32")).unwrap().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    (r, logits)
}

#[test]
fn the_fixtures_cover_every_lane_count_head_and_mode() {
    let configs: Vec<_> = FIXTURES.iter().map(|n| load_hf_dir(&fixture(n)).unwrap_or_else(|e| panic!("{n}: {e}")).0).collect();
    let lanes: Vec<usize> = configs.iter().map(|c| c.lanes.count).collect();
    for l in [1, 2, 4, 8] {
        assert!(lanes.contains(&l), "no fixture with {l} lanes");
    }
    for head in [LaneHead::Replicate, LaneHead::Lane, LaneHead::VocabParallel] {
        assert!(configs.iter().any(|c| c.lanes.head == head), "no {head:?} head");
    }
    assert!(configs.iter().any(|c| c.lanes.early_comm && c.lanes.delay > 0 && c.lanes.count > 1));
    assert!(configs.iter().any(|c| !c.lanes.early_comm && c.lanes.count > 1));
    assert!(configs.iter().any(|c| c.lanes.lane_norms));
    assert!(configs.iter().any(|c| c.lanes.sum_before_norm));
    assert!(configs.iter().any(|c| !c.lanes.comm));
    // A window counted from the end, with an unclamped layer inside it.
    let lane_head = &configs[2];
    assert_eq!(lane_head.sliding_window.layers, vec![false, true, false, true]);
    assert_eq!((lane_head.sliding_window.size, lane_head.sliding_window.of_layer(3)), (6, Some(6)));
}

#[test]
fn the_float32_lane_reference_matches_pytorch() {
    for name in FIXTURES {
        let (r, want) = reference(name);
        let (config, weights) = load_hf_dir(&fixture(name)).unwrap();
        let model = ShardedModel::new(&config, &weights, config.lanes.count).unwrap();
        let schedule = DtpSchedule::of_laneformer(&config).unwrap();
        let mut session = model.session(Execution::Delayed(schedule.clone())).unwrap();
        let logits = session.forward(&r.prompt).unwrap();
        let rel = rel_err(&logits.concat(), &want);
        eprintln!("{name}: ‖Δ‖/‖ref‖ = {rel:.2e} over {} positions", logits.len());
        assert!(rel <= MAX_REL_ERR, "{name}: relative error {rel:.3e}");

        let mut session = model.session(Execution::Delayed(schedule)).unwrap();
        let mut last = session.forward(&r.greedy_prompt).unwrap().pop().unwrap();
        let mut tokens = Vec::new();
        for _ in 0..r.greedy_tokens.len() {
            let t = argmax(&last);
            tokens.push(t);
            last = session.step(t).unwrap();
        }
        assert_eq!(tokens, r.greedy_tokens, "{name}: greedy tokens");
    }
}

fn fast(name: &str, threads: usize, isa: Isa, prefill_batch: usize) -> FastRuntime {
    let (config, weights) = load_hf_dir(&fixture(name)).unwrap();
    FastRuntime::new(&config, &weights, FastOptions { threads, isa, prefill_batch, act_precision: ActPrecision::Int16 }).unwrap()
}

/// A runtime's logits of the fixture's prompt and its greedy continuation.
fn run(rt: &mut dyn Runtime, r: &Reference) -> (Vec<f32>, Vec<u32>) {
    let logits = rt.score(&r.prompt).unwrap().concat();
    let (out, _) = collect(rt, &r.greedy_prompt, r.greedy_tokens.len(), &SamplingParams::default(), &[], 0).unwrap();
    (logits, ids(&out))
}

#[test]
fn the_cpu_runtimes_serve_laneformers_as_pytorch_computes_them() {
    for name in FIXTURES {
        let (r, want) = reference(name);
        let (config, weights) = load_hf_dir(&fixture(name)).unwrap();
        let runtimes: [(&str, Box<dyn Runtime>); 2] = [
            ("reference", Box::new(ReferenceRuntime::new(&config, &weights).unwrap())),
            // Prompt batches of 5 tokens: the chunked prefill meets the window and the delays.
            ("fast", Box::new(fast(name, 2, Isa::detect(None), 5))),
        ];
        for (kind, mut rt) in runtimes {
            let (logits, tokens) = run(rt.as_mut(), &r);
            let rel = rel_err(&logits, &want);
            eprintln!("{name} {kind}: ‖Δ‖/‖ref‖ = {rel:.2e}");
            let bound = if kind == "fast" { MAX_REL_ERR_F16_KV } else { MAX_REL_ERR };
            assert!(rel <= bound, "{name} {kind}: relative error {rel:.3e}");
            assert_eq!(tokens, r.greedy_tokens, "{name} {kind}: greedy tokens");
        }
    }
}

#[test]
fn the_fast_lane_pass_is_the_same_at_any_batch_thread_count_and_isa() {
    let name = "lane-head-lane-norms-window";
    let (r, _) = reference(name);
    let base = fast(name, 1, Isa::Portable, 64).score(&r.prompt).unwrap();
    for isa in Isa::available() {
        for (threads, batch) in [(1, 1), (2, 3), (3, 64)] {
            let got = fast(name, threads, isa, batch).score(&r.prompt).unwrap();
            assert!(got == base, "{isa:?}, {threads} threads, batches of {batch}: logits differ");
        }
    }
}

/// A copy of fixture `name` in a fresh temporary folder with `edit` applied to its config.json.
fn edited_copy(name: &str, tag: &str, edit: impl FnOnce(&mut serde_json::Value)) -> PathBuf {
    let src = fixture(name);
    let dir = std::env::temp_dir().join(format!("peregrine-laneformer-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
    }
    let mut json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    edit(&mut json);
    std::fs::write(dir.join("config.json"), json.to_string()).unwrap();
    dir
}

#[test]
fn inconsistent_checkpoints_are_clear_errors() {
    let cases: [(&str, &str, fn(&mut serde_json::Value), &str); 6] = [
        ("lanes", "vocab-parallel-early-local", |j| j["num_lanes"] = 3.into(), "not a multiple of num_lanes 3"),
        ("head", "vocab-parallel-early-local", |j| j["lm_head_type"] = "mixture".into(), "lm_head_type `mixture`"),
        ("agg", "lane-head-lane-norms-window", |j| j["pre_norm_lane_agg"] = true.into(), "pre_norm_lane_agg needs lm_head_type replicate"),
        ("window", "single-lane-window", |j| j["sliding_window"] = serde_json::Value::Null, "needs a positive sliding_window"),
        ("unclamped", "lane-head-lane-norms-window", |j| j["unclamped_layers"] = serde_json::json!([9]), "unclamped_layers names layer 9"),
        // Per-lane scales are declared but the file holds shared `.weight` norms.
        ("norms", "replicate-early-allreduce", |j| j["replicated_rmsn_scale"] = false.into(), "attention_norm.scale"),
    ];
    for (tag, name, edit, needle) in cases {
        let dir = edited_copy(name, tag, edit);
        let err = load_hf_dir(&dir).map(|_| ()).expect_err(tag).to_string();
        assert!(err.contains(needle), "{tag}: {err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
    // A lane-stacked tensor of the wrong shape names the tensor and its stacked shape.
    let dir = edited_copy("replicate-early-allreduce", "shape", |j| j["num_lanes"] = 4.into());
    let err = load_hf_dir(&dir).map(|_| ()).expect_err("shape").to_string();
    assert!(err.contains("model.layers.0.attention.wq.weight") && err.contains("[4, 16, 64]"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_released_model_shape_has_its_published_parameter_count() {
    let dir = edited_copy("replicate-early-allreduce", "count", |j| {
        for (k, v) in [("vocab_size", 32000), ("hidden_size", 3072), ("intermediate_size", 12288), ("num_hidden_layers", 15)] {
            j[k] = v.into();
        }
        (j["num_attention_heads"], j["num_key_value_heads"], j["num_lanes"]) = (32.into(), 16.into(), 8.into());
    });
    let json = peregrine_engine::laneformer::LaneformerJson::read(&dir.join("config.json")).unwrap();
    let config = json.to_model_config(&dir.join("config.json"), "laneformer-2b").unwrap();
    assert_eq!(config.parameter_count(), 2_320_069_632);
    assert_eq!(config.head_dim, 96);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_dtp_block_with_fixed_lanes_runs_its_lanes_on_the_cpu() {
    // An ordinary Llama checkpoint declared as trained for 2 DTP lanes (our `dtp` block).
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf/llama-gqa-untied");
    let dir = std::env::temp_dir().join(format!("peregrine-dtp-block-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
    }
    // (Its vocabulary of 320 is the Laneformer fixtures' tokenizer's.)
    std::fs::copy(fixture(FIXTURES[0]).join("tokenizer.json"), dir.join("tokenizer.json")).unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    json["dtp"] = serde_json::json!({ "lanes": 2, "delay": 1, "early_layers": "none" });
    std::fs::write(dir.join("config.json"), json.to_string()).unwrap();
    let files = peregrine_engine::model::load_model(&dir).unwrap();
    assert_eq!((files.config().lanes.count, files.config().lanes.delay, files.config().lanes.early_comm), (2, 1, false));

    let tokens: Vec<u32> = (0..12).map(|i| (i * 29 % 300 + 3) as u32).collect();
    let schedule = DtpSchedule::of_laneformer(files.config()).unwrap();
    let lanes = ShardedModel::new(files.config(), files.weights(), 2).unwrap();
    let want = lanes.session(Execution::Delayed(schedule)).unwrap().forward(&tokens).unwrap().concat();
    let mut rt = FastRuntime::new(files.config(), files.weights(), FastOptions::defaults()).unwrap();
    let got = rt.score(&tokens).unwrap().concat();
    let rel = rel_err(&got, &want);
    assert!(rel <= MAX_REL_ERR_F16_KV, "fast lane pass vs the lane reference: {rel:.3e}");
    // The lanes change the function: the single-stream model gives other logits.
    let (plain_config, plain_weights) = load_hf_dir(&src).unwrap();
    let plain = FastRuntime::new(&plain_config, &plain_weights, FastOptions::defaults()).unwrap().score(&tokens).unwrap().concat();
    assert!(rel_err(&plain, &want) > 1e-3, "the dtp block was ignored");
    std::fs::remove_dir_all(&dir).unwrap();
}
