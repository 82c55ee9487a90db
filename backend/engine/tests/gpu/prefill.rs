//! The batched prefill (cuBLAS GEMMs and prefill.cu) against every prompt token run
//! as a persistent-kernel step: first-step logits, per-step logits while both paths
//! feed the same tokens, and greedy tokens (a first difference must be a near-tie the
//! measured logit difference explains); on the check shapes and the benchmark presets,
//! over one and several prompt chunks and both prefill attention kernels. Also the runs
//! compute-sanitizer watches (scripts run the `sanitize` trial under it).

use libtest_mimic::{Failed, Trial};
use peregrine_engine::config::ModelConfig;
use peregrine_engine::cuda::{CudaRuntime, KernelOptions};
use peregrine_engine::lab::logits::{rel_err, rel_err_max, top1_or_near_tie, NearTie};
use peregrine_engine::lab::rng::SplitMix64;
use peregrine_engine::lab::synthetic::{check_shapes, synthetic_weights};
use peregrine_engine::runtime::{RunEnd, Runtime};
use peregrine_engine::sampling::SamplingParams;

use super::{ensure, ids, preset_shape, run, run_top, runtime, Check, BENCH_SHAPES, MAX_REL_ERR, WEIGHT_SEED};

/// Greedy tokens compared per prompt in the long-prompt checks.
const PREFILL_GEN: usize = 20;

pub fn trials() -> Vec<Trial> {
    let mut t = Vec::new();
    for config in check_shapes() {
        let c = config.clone();
        t.push(Trial::test(format!("{}: batched prefill matches the token path", config.name), move || prefill_check(&c)));
        t.push(Trial::test(
            format!("{}: batched prefill matches the token path over long prompts and several chunks", config.name),
            move || long_prompts(&config),
        ));
    }
    for shape in BENCH_SHAPES {
        let config = preset_shape(shape);
        t.push(Trial::test(format!("{shape}: batched prefill matches the token path over long prompts"), move || long_prompts(&config)));
    }
    t.push(Trial::test("sanitize: prefill chunks, both prefill attention kernels and sampling run to the end", sanitize_runs));
    t
}

/// The batched prefill (cuBLAS + prefill.cu) against every prompt token as a kernel
/// step: first-step logits within MAX_REL_ERR; greedy tokens equal, or the first
/// difference a near-tie the measured logit difference explains.
fn prefill_check(config: &ModelConfig) -> Check {
    let weights = synthetic_weights(config, WEIGHT_SEED);
    let base = KernelOptions { prefill_chunk: 16, ..KernelOptions::default() };
    let mut rt = runtime(config, &weights, &[0], base.clone(), None)?;
    let prompt = SplitMix64(21).tokens(40, config.vocab_size);
    let mut path = |batched: bool| -> Result<(Vec<u32>, Vec<Vec<f32>>, usize), Failed> {
        rt.set_options(KernelOptions { batched_prefill: batched, ..base.clone() }).map_err(|e| e.to_string())?;
        rt.set_debug_logits(true);
        let (out, _) = run(&mut rt, &prompt, 12, &SamplingParams::default(), &[])?;
        Ok((ids(&out), rt.debug_logits().to_vec(), rt.last_run().prefill_positions))
    };
    let (ids_b, lg_b, positions) = path(true)?;
    let (ids_t, lg_t, _) = path(false)?;
    ensure(positions + 1 == prompt.len(), || format!("batched prefill ran {positions} of {} positions", prompt.len() - 1))?;
    let err = rel_err_max(&lg_b[0], &lg_t[0]);
    ensure(err < MAX_REL_ERR, || format!("first-step logits rel err {err:.2e}"))?;
    let same = ids_b.iter().zip(&ids_t).take_while(|(a, b)| a == b).count();
    if same < ids_b.len() {
        ensure(top1_or_near_tie(&lg_t[same], &lg_b[same], ids_b[same]), || format!("greedy tokens differ at step {same}, not a near-tie"))?;
    }
    Ok(())
}

/// Batched prefill against the token path on `rt` (its options otherwise kept) for one
/// prompt: the batched path ran every position but the last, the token path none; the
/// first generated step's logits and every step's while the runs feed the same tokens
/// (the first differing step included: both still saw the same inputs there) within
/// MAX_REL_ERR by ‖Δ‖/‖ref‖; the greedy tokens equal, or the first difference a
/// near-tie on the token path's logits.
fn prefill_case(rt: &mut CudaRuntime, label: &str, prompt: &[u32]) -> Check {
    let greedy = SamplingParams::default();
    let base = rt.options().clone();
    let mut path = |batched: bool| -> Result<(Vec<u32>, Vec<Vec<f32>>, usize), Failed> {
        rt.set_options(KernelOptions { batched_prefill: batched, ..base.clone() }).map_err(|e| e.to_string())?;
        rt.set_debug_logits(true);
        let (out, _) = run(rt, prompt, PREFILL_GEN, &greedy, &[])?;
        rt.set_debug_logits(false);
        Ok((ids(&out), rt.debug_logits().to_vec(), rt.last_run().prefill_positions))
    };
    let (ids_b, lg_b, pos_b) = path(true)?;
    let (ids_t, lg_t, pos_t) = path(false)?;
    rt.set_options(base).map_err(|e| e.to_string())?;
    let same = ids_b.iter().zip(&ids_t).take_while(|(a, b)| a == b).count();
    let first_err = match (lg_b.first(), lg_t.first()) {
        (Some(b), Some(t)) => rel_err(b, t),
        _ => f64::INFINITY,
    };
    let compared = (same + 1).min(PREFILL_GEN).min(lg_b.len()).min(lg_t.len());
    let step_err = (0..compared).map(|t| rel_err(&lg_b[t], &lg_t[t])).fold(0.0, f64::max);
    let tie = (same < PREFILL_GEN).then(|| NearTie::of(&lg_t[same], &lg_b[same], ids_b[same]));
    println!(
        "  {label}: {}-token prompt, batched ({pos_b} positions) vs token by token: first-step rel err {first_err:.2e}, per-step max {step_err:.2e}; greedy agree {same}/{PREFILL_GEN}{}",
        prompt.len(),
        tie.map_or(String::new(), |t| format!(", then a near-tie: margin {:.2e} vs max |Δ logit| {:.2e}", t.margin, t.max_diff))
    );
    ensure(pos_b + 1 == prompt.len() && pos_t == 0, || format!("{label}: batched prefill ran {pos_b} positions, the token path {pos_t}"))?;
    ensure(first_err < MAX_REL_ERR && step_err < MAX_REL_ERR, || {
        format!("{label}: first-step logits rel err {first_err:.2e}, per-step max {step_err:.2e}")
    })?;
    ensure(tie.is_none_or(|t| t.explained()), || format!("{label}: greedy tokens differ at step {same}, not a near-tie"))
}

/// gpu_check's prefill pass on `config`: a 300-token and a 2-token prompt; past 100M
/// parameters a 700-token one too (beyond the attention's shared-memory reach, so every
/// block attends); below, 173 tokens in 48-row chunks (later chunks attend to earlier
/// chunks' cache rows) with the tensor-core and the CUDA-core prefill attention.
fn long_prompts(config: &ModelConfig) -> Check {
    let name = &config.name;
    let w = synthetic_weights(config, WEIGHT_SEED);
    let tiny = config.parameter_count() < 100_000_000;
    let mut rng = SplitMix64(0xBA7C4 ^ config.hidden_size as u64);
    let mut rt = runtime(config, &w, &[0], KernelOptions::default(), None)?;
    println!("  {}", rt.describe());
    prefill_case(&mut rt, name, &rng.tokens(300, config.vocab_size))?;
    prefill_case(&mut rt, &format!("{name} 2-token prompt"), &rng.tokens(2, config.vocab_size))?;
    if !tiny {
        prefill_case(&mut rt, &format!("{name} 700-token prompt"), &rng.tokens(700, config.vocab_size))?;
        return Ok(());
    }
    drop(rt);
    let opts = KernelOptions { prefill_chunk: 48, ..KernelOptions::default() };
    let mut rt = runtime(config, &w, &[0], opts.clone(), None)?;
    let prompt = rng.tokens(173, config.vocab_size);
    prefill_case(&mut rt, &format!("{name} 48-row chunks"), &prompt)?;
    rt.set_options(KernelOptions { prefill_mma_attention: false, ..opts }).map_err(|e| e.to_string())?;
    prefill_case(&mut rt, &format!("{name} 48-row chunks, CUDA-core attention"), &prompt)
}

/// Small and short, for compute-sanitizer (it slows every access down): a 40-token
/// prompt over three 16-row prefill chunks and two CUDA-core attention key tiles (32),
/// with the tensor-core attention first (one partial 64-key tile), then the CUDA-core
/// one, and a scoring; then 150-token prompts in 64-row chunks that span three
/// tensor-core key tiles with the last chunk starting mid-block, at head_dim 64 (GQA)
/// and 128 (q/k/v bias). Each run must end as asked; the sanitizer judges the accesses.
fn sanitize_runs() -> Check {
    let c = &check_shapes()[0];
    let w = synthetic_weights(c, WEIGHT_SEED);
    let mut rt = runtime(c, &w, &[0], KernelOptions { prefill_chunk: 16, ..KernelOptions::default() }, None)?;
    println!("  {}", rt.describe());
    let prompt = SplitMix64(5).tokens(40, c.vocab_size);
    let sp =
        SamplingParams { temperature: 0.8, top_k: 20, top_p: 0.9, min_p: 0.02, repetition_penalty: 1.1, seed: 1, ..Default::default() };
    let (out, end) = run_top(&mut rt, &prompt, 8, &sp, &[], 4)?;
    ensure(out.len() == 8 && end == RunEnd::Length, || format!("40-token prompt: {} tokens, end {end:?}", out.len()))?;
    rt.set_options(KernelOptions { prefill_chunk: 16, prefill_mma_attention: false, ..KernelOptions::default() })
        .map_err(|e| e.to_string())?;
    let (out, _) = run(&mut rt, &prompt, 2, &sp, &[])?;
    let scores = rt.score(&prompt).map_err(|e| e.to_string())?;
    ensure(out.len() == 2 && scores.len() == prompt.len(), || {
        format!("CUDA-core attention: {} tokens, {} scored positions", out.len(), scores.len())
    })?;
    for c in &check_shapes()[..2] {
        let w = synthetic_weights(c, WEIGHT_SEED);
        let opts = KernelOptions { prefill_chunk: 64, prefill_mma_attention: true, ..KernelOptions::default() };
        let mut rt = runtime(c, &w, &[0], opts, None)?;
        println!("  {}", rt.describe());
        let prompt = SplitMix64(6).tokens(150, c.vocab_size);
        let (out, end) = run(&mut rt, &prompt, 2, &sp, &[])?;
        let positions = rt.last_run().prefill_positions;
        ensure(out.len() == 2 && end == RunEnd::Length && positions + 1 == prompt.len(), || {
            format!("{}: 150-token prompt: {positions} batched prefill positions, {} tokens, end {end:?}", c.name, out.len())
        })?;
    }
    Ok(())
}
