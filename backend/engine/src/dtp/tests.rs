//! Sharding and DTP against known ground, on tiny synthetic shapes (no GPU): sharded
//! standard TP equals the unsharded float32 reference; DTP with delay 0 equals standard
//! TP; DTP on one lane equals the ordinary model; bad shapes and configs are clear errors.

use super::reference::{Execution, ShardedModel};
use super::*;
use crate::config::{Architecture, LaneConfig, ModelConfig, RopeLayout, SlidingWindow};
use crate::cpu::reference::{KvCache, ReferenceModel};
use crate::lab::synthetic::{ordinary, preset, synthetic_weights};
use crate::weights::Weights;

/// Relative logits bound of sharded vs unsharded runs (the required 1e-5).
const REL_TOL: f64 = 1e-5;

/// Llama, GQA with 2 KV heads (replicated at 4 and 8 lanes), an odd vocabulary, 5 layers.
fn tiny_llama() -> ModelConfig {
    let mut c = preset("smollm2-135m").expect("preset");
    (c.name, c.vocab_size, c.hidden_size, c.intermediate_size, c.num_layers) = ("tiny-llama".into(), 61, 64, 96, 5);
    (c.num_heads, c.num_kv_heads, c.head_dim, c.max_context) = (8, 2, 8, 64);
    c
}

/// Qwen2 (q/k/v biases), untied head, GQA 8/4, 4 layers.
fn tiny_qwen() -> ModelConfig {
    let mut c = preset("qwen2.5-coder-1.5b").expect("preset");
    (c.name, c.vocab_size, c.hidden_size, c.intermediate_size, c.num_layers) = ("tiny-qwen".into(), 50, 48, 64, 4);
    (c.num_heads, c.num_kv_heads, c.head_dim, c.max_context, c.tie_embeddings) = (8, 4, 6, 64, false);
    c
}

fn tokens(c: &ModelConfig) -> Vec<u32> {
    crate::lab::rng::SplitMix64(7).tokens(10, c.vocab_size)
}

fn unsharded(c: &ModelConfig, w: &Weights) -> Vec<Vec<f32>> {
    let m = ReferenceModel::new(c, w).expect("reference");
    m.forward(&mut KvCache::new(c, 64), &tokens(c), true).expect("forward")
}

fn run(c: &ModelConfig, w: &Weights, degree: usize, e: impl Fn(&ModelConfig) -> Execution) -> Vec<Vec<f32>> {
    let m = ShardedModel::new(c, w, degree).expect("shards");
    m.session(e(c)).expect("session").forward(&tokens(c)).expect("forward")
}

fn dtp(delay: usize, early: EarlyLayers, lanes: usize) -> impl Fn(&ModelConfig) -> Execution {
    move |c| {
        let cfg = DtpConfig { lanes: Lanes::RunTime, delay, early_layers: early };
        Execution::Delayed(DtpSchedule::new(&cfg, c, lanes).expect("schedule"))
    }
}

/// ‖a − b‖ / ‖b‖ over every logit of every position.
fn rel(a: &[Vec<f32>], b: &[Vec<f32>]) -> f64 {
    assert_eq!(a.len(), b.len());
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x.len(), y.len());
        for (&p, &q) in x.iter().zip(y) {
            num += (p as f64 - q as f64).powi(2);
            den += (q as f64).powi(2);
        }
    }
    (num / den).sqrt()
}

#[test]
fn standard_tp_at_1_2_4_8_equals_the_unsharded_reference() {
    for c in [tiny_llama(), tiny_qwen()] {
        let w = synthetic_weights(&c, 11);
        let want = unsharded(&c, &w);
        for degree in [1, 2, 4, 8] {
            let got = run(&c, &w, degree, |_| Execution::Standard);
            let e = rel(&got, &want);
            assert!(e <= REL_TOL, "{} at TP={degree}: rel {e:e}", c.name);
        }
    }
}

#[test]
fn dtp_with_delay_0_equals_standard_tp() {
    for c in [tiny_llama(), tiny_qwen()] {
        let w = synthetic_weights(&c, 12);
        for lanes in [2, 4, 8] {
            let want = run(&c, &w, lanes, |_| Execution::Standard);
            let got = run(&c, &w, lanes, dtp(0, EarlyLayers::Present, lanes));
            let e = rel(&got, &want);
            assert!(e <= REL_TOL, "{} L={lanes}: rel {e:e}", c.name);
        }
    }
}

#[test]
fn dtp_on_one_lane_equals_the_ordinary_model() {
    for c in [tiny_llama(), tiny_qwen()] {
        let w = synthetic_weights(&c, 13);
        let want = unsharded(&c, &w);
        for (delay, early) in [(1, EarlyLayers::Present), (2, EarlyLayers::Present), (2, EarlyLayers::None)] {
            let got = run(&c, &w, 1, dtp(delay, early, 1));
            let e = rel(&got, &want);
            assert!(e <= 1e-6, "{} d={delay} {early:?}: rel {e:e}", c.name);
        }
    }
}

/// `c` declared as a Laneformer of `lanes` lanes, delay `delay`, interleaved RoPE.
fn as_laneformer(c: &ModelConfig, lanes: usize, delay: usize, comm: bool) -> ModelConfig {
    let l = crate::config::LaneConfig { count: lanes, delay, comm, ..Default::default() };
    ModelConfig { rope_layout: crate::config::RopeLayout::Interleaved, lanes: l, ..c.clone() }
}

fn laneformer_run(c: &ModelConfig, w: &Weights) -> Vec<Vec<f32>> {
    run(c, w, c.lanes.count, |c| Execution::Delayed(DtpSchedule::of_laneformer(c).expect("schedule")))
}

#[test]
fn a_one_lane_laneformer_is_the_ordinary_model_with_interleaved_rope() {
    let c = as_laneformer(&tiny_llama(), 1, 0, true);
    let w = synthetic_weights(&c, 21);
    let want = unsharded(&c, &w);
    for (delay, comm) in [(1, true), (2, true), (2, false)] {
        let e = rel(&laneformer_run(&as_laneformer(&c, 1, delay, comm), &w), &want);
        assert!(e <= 1e-6, "d={delay} comm={comm}: rel {e:e}");
    }
}

#[test]
fn a_laneformer_with_delay_0_is_standard_tp_of_the_same_weights() {
    let c = as_laneformer(&tiny_llama(), 1, 0, true);
    let w = synthetic_weights(&c, 22);
    for lanes in [2, 4] {
        let want = run(&c, &w, lanes, |_| Execution::Standard);
        let e = rel(&laneformer_run(&as_laneformer(&c, lanes, 0, true), &w), &want);
        assert!(e <= REL_TOL, "L={lanes}: rel {e:e}");
    }
}

#[test]
fn dtp_with_a_delay_is_a_different_function_on_several_lanes() {
    // The schedule must change something: if it were ignored, DTP would equal standard TP.
    let c = tiny_llama();
    let w = synthetic_weights(&c, 14);
    let standard = run(&c, &w, 2, |_| Execution::Standard);
    let present = run(&c, &w, 2, dtp(2, EarlyLayers::Present, 2));
    let none = run(&c, &w, 2, dtp(2, EarlyLayers::None, 2));
    let d1 = run(&c, &w, 2, dtp(1, EarlyLayers::Present, 2));
    for (name, x) in [("d2 present", &present), ("d2 none", &none), ("d1 present", &d1)] {
        assert!(rel(x, &standard) > 1e-3, "{name} equals standard TP");
    }
    assert!(rel(&present, &none) > 1e-3, "early-layer mode ignored");
    assert!(rel(&present, &d1) > 1e-3, "delay ignored");
}

#[test]
fn schedule_follows_the_published_rule_for_laneformer_2b() {
    let c = preset("laneformer-2b").expect("laneformer-2b");
    let s = DtpSchedule::of_laneformer(&c).expect("schedule");
    assert_eq!((s.lanes, s.delay, s.num_layers), (8, 1, 15));
    assert_eq!(s.combine(0), Combine::AllReduce);
    // Every layer from d on adds layer n − d's partials, the early layer's included.
    assert_eq!(s.combine(1), Combine::Delayed { received: 0, send: true });
    assert_eq!(s.combine(2), Combine::Delayed { received: 1, send: true });
    assert_eq!(s.combine(13), Combine::Delayed { received: 12, send: true });
    assert_eq!(s.combine(14), Combine::Delayed { received: 13, send: false });
    assert_eq!(s.sent_layers(), 0..14);
    let scale = 8f32.sqrt();
    let early_none = LaneConfig { early_comm: false, ..c.lanes };
    let none = DtpSchedule::of_laneformer(&ModelConfig { lanes: early_none, ..c.clone() }).unwrap();
    assert_eq!(none.combine(0), Combine::LaneLocal { scale, send: true });
    let defines: Vec<(&str, String)> = none.kernel_defines();
    let want = [
        ("DTP_LANES", "8".to_string()),
        ("DTP_DELAY", "1".into()),
        ("DTP_EARLY_NONE", "1".into()),
        ("DTP_LANE_SCALE", format!("{scale:?}f")),
    ];
    assert_eq!(defines, want);
    // Without communication every layer from d on is lane-local, and nothing is sent.
    let silent = DtpSchedule::of_laneformer(&ModelConfig { lanes: LaneConfig { comm: false, ..early_none }, ..c.clone() }).unwrap();
    assert_eq!(silent.combine(0), Combine::LaneLocal { scale, send: false });
    assert_eq!(silent.combine(7), Combine::LaneLocal { scale, send: false });
    assert_eq!(silent.sent_layers(), 0..0);
    let standard = DtpSchedule::standard(&ordinary(&c), 2).unwrap();
    assert!((0..15).all(|n| standard.combine(n) == Combine::Delayed { received: n, send: true }));
}

#[test]
fn laneformer_2b_preset_matches_the_released_shape() {
    let c = preset("Laneformer-2B").expect("laneformer-2b");
    c.validate().expect("valid");
    let got = (c.hidden_size, c.intermediate_size, c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim, c.vocab_size);
    assert_eq!(got, (3072, 12_288, 15, 32, 16, 96, 32_000));
    assert_eq!(
        (c.architecture, c.rope_theta, c.rope_layout, c.tie_embeddings),
        (Architecture::Llama, 10_000.0, RopeLayout::Interleaved, false)
    );
    assert_eq!((c.lanes.count, c.sliding_window.size, c.sliding_window.layers.iter().filter(|&&w| w).count()), (8, 512, 10));
    assert_eq!(c.parameter_count(), 2_320_069_632);
    // Its ordinary form keeps every matrix and drops only the lanes and the window.
    let plain = ordinary(&c);
    assert!(!plain.lanes.is_laneformer() && plain.sliding_window == SlidingWindow::default());
    assert_eq!(plain.parameter_count(), c.parameter_count());
    for degree in [1, 2, 4, 8] {
        let plan = ShardPlan::new(&plain, degree).expect("divides");
        assert_eq!(plan.lanes[degree - 1].vocab.end, 32_000);
    }
}

#[test]
fn shard_ranges_split_heads_columns_and_vocab() {
    let c = tiny_llama();
    let p = ShardPlan::new(&c, 2).unwrap();
    assert_eq!((p.lanes[1].q_heads.clone(), p.lanes[1].kv_heads.clone(), p.lanes[1].ffn.clone()), (4..8, 1..2, 48..96));
    assert_eq!((p.lanes[0].vocab.clone(), p.lanes[1].vocab.clone()), (0..30, 30..61));
    // 8 lanes over 2 KV heads: lanes 0-3 read head 0, lanes 4-7 head 1.
    let p = ShardPlan::new(&c, 8).unwrap();
    let kv: Vec<usize> = p.lanes.iter().map(|l| l.kv_heads.start).collect();
    assert_eq!(kv, [0, 0, 0, 0, 1, 1, 1, 1]);
    assert!(p.lanes.iter().all(|l| l.kv_heads.len() == 1 && l.q_heads.len() == 1));
    assert_eq!(p.kv_replication(&c), 4);
}

#[test]
fn shapes_that_do_not_divide_are_clear_errors() {
    let err = |c: &ModelConfig, degree| ShardPlan::new(c, degree).unwrap_err().to_string();
    let smol = preset("smollm2-135m").unwrap();
    assert!(err(&smol, 2).contains("9 query heads, not a multiple of 2"), "{}", err(&smol, 2));
    let mut c = tiny_llama();
    c.intermediate_size = 100;
    assert!(err(&c, 8).contains("FFN of 100 columns"), "{}", err(&c, 8));
    let mut c = tiny_llama();
    (c.num_heads, c.num_kv_heads) = (12, 3);
    assert!(err(&c, 2).contains("3 KV heads, not a multiple of 2"), "{}", err(&c, 2));
    assert!(err(&c, 4).contains("must be a multiple of them"), "{}", err(&c, 4));
    assert!(err(&c, 0).contains("at least one GPU"));
    // Through the sharded model and the schedule as well, never a panic.
    let w = synthetic_weights(&smol_tiny_heads(), 1);
    assert!(ShardedModel::new(&smol_tiny_heads(), &w, 2).is_err());
    let cfg = DtpConfig { lanes: Lanes::RunTime, delay: 1, early_layers: EarlyLayers::Present };
    assert!(DtpSchedule::new(&cfg, &smol, 2).unwrap_err().to_string().contains("query heads"));
}

/// A tiny model with 3 heads (not divisible by 2).
fn smol_tiny_heads() -> ModelConfig {
    let mut c = tiny_llama();
    (c.num_heads, c.num_kv_heads) = (3, 3);
    c
}

#[test]
fn dtp_config_validation_names_the_problem() {
    let c = tiny_llama();
    let cfg = |delay, early| DtpConfig { lanes: Lanes::RunTime, delay, early_layers: early };
    let e = DtpSchedule::new(&cfg(0, EarlyLayers::None), &c, 2).unwrap_err().to_string();
    assert!(e.contains("early_layers `none` needs delay ≥ 1"), "{e}");
    let e = DtpSchedule::new(&cfg(6, EarlyLayers::Present), &c, 2).unwrap_err().to_string();
    assert!(e.contains("delay 6 exceeds the 5 layers"), "{e}");
    assert!(DtpSchedule::new(&cfg(3, EarlyLayers::Present), &c, 2).is_ok());
    let fixed = DtpConfig { lanes: Lanes::Fixed(8), ..cfg(2, EarlyLayers::Present) };
    let e = DtpSchedule::new(&fixed, &c, 2).unwrap_err().to_string();
    assert!(e.contains("trained for 8 DTP lanes"), "{e}");
    assert!(DtpSchedule::new(&fixed, &c, 8).is_ok());
    // A schedule for another degree does not run on a model split differently.
    let w = synthetic_weights(&c, 3);
    let m = ShardedModel::new(&c, &w, 2).unwrap();
    let four = DtpSchedule::new(&cfg(1, EarlyLayers::Present), &c, 4).unwrap();
    assert!(m.session(Execution::Delayed(four)).is_err());
}

#[test]
fn file_forms_parse_and_reject_bad_values() {
    let json = |s: &str| DtpConfig::from_hf_json(&serde_json::from_str(s).unwrap());
    assert_eq!(json(r#"{"hidden_size": 8}"#).unwrap(), None);
    let want = DtpConfig { lanes: Lanes::Fixed(8), delay: 2, early_layers: EarlyLayers::None };
    assert_eq!(json(r#"{"dtp": {"lanes": 8, "delay": 2, "early_layers": "none"}}"#).unwrap(), Some(want));
    let runtime = DtpConfig { lanes: Lanes::RunTime, delay: 2, early_layers: EarlyLayers::Present };
    assert_eq!(json(r#"{"dtp": {"delay": 2}}"#).unwrap(), Some(runtime));
    assert_eq!(json(r#"{"dtp": {"lanes": 0, "delay": 2}}"#).unwrap(), Some(runtime));
    assert!(json(r#"{"dtp": {"delay": 2, "early_layers": "sometimes"}}"#).unwrap_err().to_string().contains("sometimes"));
    assert!(json(r#"{"dtp": {"delay": 2, "delya": 1}}"#).unwrap_err().to_string().contains("delya"));
    assert!(json(r#"{"dtp": {"lanes": 2}}"#).unwrap_err().to_string().contains("delay"));
    // The block written for a config reads back as the same config.
    let block = serde_json::json!({ "dtp": want.to_block() });
    assert_eq!(DtpConfig::from_hf_json(&block).unwrap(), Some(want));

    let gguf = |delay: Option<u64>, lanes: Option<u64>, early: Option<&str>| {
        DtpConfig::from_gguf_keys(
            |k| match k {
                config::GGUF_DELAY_KEY => delay,
                config::GGUF_LANES_KEY => lanes,
                _ => None,
            },
            |k| (k == config::GGUF_EARLY_KEY).then(|| early.map(str::to_string)).flatten(),
        )
    };
    assert_eq!(gguf(None, None, None).unwrap(), None);
    assert_eq!(gguf(Some(2), Some(8), Some("none")).unwrap(), Some(want));
    assert_eq!(gguf(Some(2), None, None).unwrap(), Some(runtime));
    assert!(gguf(None, Some(8), None).unwrap_err().to_string().contains("no peregrine.dtp.delay"));

    assert_eq!("delay=2,early=none,lanes=8".parse::<DtpConfig>().unwrap(), want);
    assert_eq!("delay=2".parse::<DtpConfig>().unwrap(), runtime);
    assert!("early=none".parse::<DtpConfig>().unwrap_err().to_string().contains("no delay"));
    assert!("delay=two".parse::<DtpConfig>().unwrap_err().to_string().contains("not a whole number"));
    assert!("delay=2,speed=9".parse::<DtpConfig>().unwrap_err().to_string().contains("unknown key `speed`"));
}

#[test]
fn read_model_dtp_reads_a_hf_directory() {
    // The build's own folder: the test reads no environment variable.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("target-test-dtp-read-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), r#"{"hidden_size": 8, "dtp": {"delay": 1, "early_layers": "present"}}"#).unwrap();
    let got = read_model_dtp(&dir);
    std::fs::write(dir.join("config.json"), r#"{"hidden_size": 8}"#).unwrap();
    let plain = read_model_dtp(&dir);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(got.unwrap(), Some(DtpConfig { lanes: Lanes::RunTime, delay: 1, early_layers: EarlyLayers::Present }));
    assert_eq!(plain.unwrap(), None);
    assert!(read_model_dtp(std::path::Path::new("/nonexistent/model.gguf")).is_err());
}

#[test]
fn benchmark_shapes_of_issue_9_shard_over_8_gpus() {
    // The TP benchmarks run these at TP 1, 2, 4, 8; qwen2.5-coder-1.5b's 12 heads stop at 4.
    for name in ["llama-3.2-1b", "smollm2-1.7b", "laneformer-2b"] {
        let c = ordinary(&preset(name).unwrap());
        for degree in [1, 2, 4, 8] {
            let p = ShardPlan::new(&c, degree).unwrap_or_else(|e| panic!("{name} at {degree}: {e}"));
            assert_eq!(p.lanes.iter().map(|l| l.q_heads.len()).sum::<usize>(), c.num_heads);
            assert_eq!(p.lanes.iter().map(|l| l.vocab.len()).sum::<usize>(), c.vocab_size);
        }
    }
    let q = preset("qwen2.5-coder-1.5b").unwrap();
    assert!(ShardPlan::new(&q, 4).is_ok());
    assert!(ShardPlan::new(&q, 8).unwrap_err().to_string().contains("12 query heads"));
    // llama-3.2-1b at 8: one KV head per lane; laneformer-2b's 8 lanes: two.
    assert!(ShardPlan::new(&preset("llama-3.2-1b").unwrap(), 8).unwrap().lanes.iter().all(|l| l.kv_heads.len() == 1));
    assert!(ShardPlan::new(&preset("laneformer-2b").unwrap(), 8).unwrap().lanes.iter().all(|l| l.kv_heads.len() == 2));
}
