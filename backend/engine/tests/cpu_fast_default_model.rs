//! The fast CPU runtime on the default model (SmolLM2-135M-Instruct Q4_1 GGUF):
//! logits against the float32 reference on the same dequantized weights, and
//! teacher-forced top-1 and greedy tokens against the reference and llama.cpp
//! (the prompts of tests/fixtures/llamacpp/forward.json).

mod common;

use common::llamacpp::{default_model, forward_fixture};
use peregrine_engine::cpu::fast_runtime::{FastOptions, FastRuntime};
use peregrine_engine::cpu::reference::{KvCache, ReferenceModel};
use peregrine_engine::gguf::load_gguf;
use peregrine_engine::lab::logits::argmax;
use peregrine_engine::runtime::{Cancel, DecodeJob, Flow, Runtime};
use peregrine_engine::sampling::SamplingParams;

/// Largest ‖Δ‖/‖ref‖ of any position's logits against the float32 reference.
const MAX_REL_ERR: f64 = 1e-2;
/// Required teacher-forced top-1 agreement with the float32 reference.
const MIN_TOP1_VS_REFERENCE: f64 = 0.97;
/// Required agreement with llama.cpp (the reference runtime's own bar).
const MIN_TOP1_VS_LLAMACPP: f64 = 0.95;
/// llama.cpp's top-2 gap above which greedy tokens must agree.
const DECISIVE_GAP: f32 = 2.0;

#[test]
fn fast_runtime_matches_the_reference_and_llamacpp() {
    let fixture = forward_fixture();
    let (_, config, weights) = load_gguf(&default_model()).unwrap();
    let reference = ReferenceModel::new(&config, &weights).unwrap();
    let mut fast = FastRuntime::new(&config, &weights, FastOptions::defaults()).unwrap();
    eprintln!("fast runtime: {}", fast.backend().devices.join(", "));
    let (mut vs_ref, mut vs_llama, mut total) = (0usize, 0usize, 0usize);
    let (mut sum_d2, mut sum_r2, mut worst) = (0.0f64, 0.0f64, 0.0f64);
    for case in &fixture.prompts {
        let ours = fast.score(&case.tokens).unwrap();
        let refs = reference.forward(&mut KvCache::new(&config, 1024), &case.tokens, true).unwrap();
        let mut case_worst = 0.0f64;
        for (pos, (o, r)) in ours.iter().zip(&refs).enumerate() {
            let d2: f64 = o.iter().zip(r).map(|(a, b)| ((a - b) as f64).powi(2)).sum();
            let r2: f64 = r.iter().map(|b| (*b as f64).powi(2)).sum();
            case_worst = case_worst.max((d2 / r2).sqrt());
            sum_d2 += d2;
            sum_r2 += r2;
            vs_ref += usize::from(argmax(o) == argmax(r));
            vs_llama += usize::from(argmax(o) == case.argmax[pos]);
        }
        total += ours.len();
        worst = worst.max(case_worst);

        let sampling = SamplingParams::default();
        let job = DecodeJob {
            prompt: &case.tokens,
            max_tokens: case.greedy.len(),
            sampling: &sampling,
            stop_tokens: &[],
            top_logprobs: 0,
            cancel: Cancel::NEVER,
            reuse_prefix: false,
            draft: peregrine_engine::speculative::DraftPlan::OFF,
            constraint: None,
        };
        let mut greedy = Vec::new();
        fast.generate(&job, &mut |s| {
            greedy.push(s.id);
            Flow::Continue
        })
        .unwrap();
        let same = greedy.iter().zip(&case.greedy).take_while(|(a, b)| a == b).count();
        let decisive = case.greedy_rescored_gap.iter().take_while(|&&g| g >= DECISIVE_GAP).count();
        eprintln!(
            "{:<18} worst position ‖Δ‖/‖ref‖ {case_worst:.2e} · greedy prefix {same}/{} (llama.cpp decisive {decisive})",
            case.name,
            case.greedy.len()
        );
        assert!(
            same >= decisive.min(case.greedy.len()),
            "{}: greedy diverged at {same} before llama.cpp's first near-tie at {decisive}",
            case.name
        );
    }
    let (rate_ref, rate_llama) = (vs_ref as f64 / total as f64, vs_llama as f64 / total as f64);
    eprintln!("logits ‖Δ‖/‖ref‖ over all positions {:.2e}, worst position {worst:.2e}", (sum_d2 / sum_r2).sqrt());
    eprintln!(
        "teacher-forced top-1: vs reference {vs_ref}/{total} = {:.2}%, vs llama.cpp {vs_llama}/{total} = {:.2}%",
        rate_ref * 100.0,
        rate_llama * 100.0
    );
    assert!(total >= 250);
    assert!(worst <= MAX_REL_ERR, "worst relative error {worst:.3e} > {MAX_REL_ERR:e}");
    assert!(rate_ref >= MIN_TOP1_VS_REFERENCE, "top-1 vs reference {rate_ref:.4} < {MIN_TOP1_VS_REFERENCE}");
    assert!(rate_llama >= MIN_TOP1_VS_LLAMACPP, "top-1 vs llama.cpp {rate_llama:.4} < {MIN_TOP1_VS_LLAMACPP}");
}
