//! Laneformer lanes on the GPU: tiny Laneformer shapes (every head kind, windowed
//! layers, per-lane norms, both early modes, no communication, pre-norm aggregation)
//! with their lanes as ranks folded onto GPU 0, against the CPU lane reference; and the
//! lanes as one launch against one kernel per lane.

use libtest_mimic::Trial;
use peregrine_engine::config::ModelConfig;
use peregrine_engine::cuda::{CudaRuntime, KernelOptions};
use peregrine_engine::dtp::reference::{Execution, ShardedModel};
use peregrine_engine::dtp::DtpSchedule;
use peregrine_engine::lab::logits::{argmax, rel_err_max, top1_or_near_tie};
use peregrine_engine::lab::rng::SplitMix64;
use peregrine_engine::lab::synthetic::{check_shapes, synthetic_weights};
use peregrine_engine::runtime::Runtime;
use peregrine_engine::sampling::SamplingParams;
use peregrine_engine::{CudaOptions, Diagnostics, GpuWeights};

use super::{cuda_options, ensure, ids, run, runtime, Check, MAX_REL_ERR, WEIGHT_SEED};

pub fn trials() -> Vec<Trial> {
    let shapes = laneformer_shapes();
    let first = shapes[0].clone();
    let mut trials: Vec<Trial> = shapes
        .into_iter()
        .flat_map(|(name, lanes)| {
            let one = lanes.clone();
            [
                Trial::test(format!("laneformer {name}: lanes on GPU 0 match the CPU lane reference"), move || laneformer_check(&lanes)),
                Trial::test(format!("laneformer {name}: one launch of every lane gives the per-lane kernels' bits"), move || {
                    one_launch_check(&one, GpuWeights::Bf16)
                }),
            ]
        })
        .collect();
    trials.push(Trial::test(format!("laneformer {}, Q8_0 weights: one launch of every lane gives the per-lane kernels' bits", first.0), move || {
        one_launch_check(&first.1, GpuWeights::Q8_0)
    }));
    trials
}

/// Laneformer shapes, all of a tiny model with 8 heads and 8 KV heads of 64: every head
/// kind, windowed early or late layers, per-lane norm scales, both early modes, no
/// communication, pre-norm aggregation; L = 8, 4, 2.
fn laneformer_shapes() -> Vec<(&'static str, ModelConfig)> {
    use peregrine_engine::config::{LaneConfig, LaneHead, RopeLayout, RopeScaling, SlidingWindow};
    let base = ModelConfig {
        name: "tiny-laneformer".into(),
        vocab_size: 4000,
        hidden_size: 512,
        intermediate_size: 1024,
        num_layers: 4,
        num_heads: 8,
        num_kv_heads: 8,
        head_dim: 64,
        max_context: 4096,
        rope_scaling: RopeScaling::None,
        rope_layout: RopeLayout::Interleaved,
        tie_embeddings: false,
        ..check_shapes()[0].clone()
    };
    let lanes = |count, delay| LaneConfig { count, delay, ..LaneConfig::default() };
    let window = |first: bool| SlidingWindow { size: 16, layers: (0..4).map(|l| (l < 2) == first).collect() };
    vec![
        ("8 lanes, replicate, early all-reduce, window", ModelConfig { lanes: lanes(8, 1), sliding_window: window(true), ..base.clone() }),
        (
            "4 lanes, vocab_parallel, early lane-local, lane norms, late window",
            ModelConfig {
                lanes: LaneConfig { early_comm: false, head: LaneHead::VocabParallel, lane_norms: true, ..lanes(4, 2) },
                sliding_window: window(false),
                ..base.clone()
            },
        ),
        (
            "8 lanes, lane head, delay 2, lane norms, late window",
            ModelConfig {
                lanes: LaneConfig { head: LaneHead::Lane, lane_norms: true, ..lanes(8, 2) },
                sliding_window: window(false),
                ..base.clone()
            },
        ),
        (
            "2 lanes, no communication, pre-norm sum, lane norms",
            ModelConfig { lanes: LaneConfig { comm: false, sum_before_norm: true, lane_norms: true, ..lanes(2, 1) }, ..base },
        ),
    ]
}

/// A Laneformer's lanes as ranks sharing GPU 0 (lanes folded onto one GPU): scored logits
/// of 40 positions (past the 16-position window) against the CPU lane reference, and
/// 24 greedy tokens after a prompt run through the batched prefill and through the
/// token path, each the reference's top-1 or a near-tie, unchanged by chaos delays.
fn laneformer_check(config: &ModelConfig) -> Check {
    config.validate().map_err(|e| e.to_string())?;
    let weights = synthetic_weights(config, WEIGHT_SEED);
    let sched = DtpSchedule::of_laneformer(config).map_err(|e| e.to_string())?;
    let tokens = SplitMix64(66).tokens(40, config.vocab_size);
    // Prompt chunks of 16 rows: the batched prefill's windows start inside and across chunks.
    let options = KernelOptions { prefill_chunk: 16, ..KernelOptions::default() };
    let mut rt = runtime(config, &weights, &vec![0; config.lanes.count], options.clone(), Some(sched.clone()))?;
    ensure(rt.batched_prefill(), || "the batched prefill is not available for this shape".into())?;
    let gpu = rt.score(&tokens).map_err(|e| e.to_string())?;
    let lanes = ShardedModel::new(config, &weights, config.lanes.count).map_err(|e| e.to_string())?;
    let mut session = lanes.session(Execution::Delayed(sched.clone())).map_err(|e| e.to_string())?;
    let cpu = session.forward(&tokens).map_err(|e| e.to_string())?;
    let worst = gpu.iter().zip(&cpu).map(|(g, c)| rel_err_max(g, c)).fold(0.0, f64::max);
    println!("  scored logits rel err max {worst:.2e}");
    ensure(gpu.len() == tokens.len() && worst < MAX_REL_ERR, || format!("rel err max {worst:.2e}"))?;
    // Greedy after a 36-token prompt (batched prefill, then the token path): each of the
    // kernel's tokens is the reference's top-1 (or a near-tie the measured logit error
    // explains) given the same earlier tokens.
    let prompt = &tokens[..36];
    for batched in [true, false] {
        rt.set_options(KernelOptions { batched_prefill: batched, ..options.clone() }).map_err(|e| e.to_string())?;
        rt.set_debug_logits(true);
        let (out, _) = run(&mut rt, prompt, 24, &SamplingParams::default(), &[])?;
        let steps = rt.debug_logits().to_vec();
        let mut seq = prompt.to_vec();
        seq.extend(ids(&out));
        let mut session = lanes.session(Execution::Delayed(sched.clone())).map_err(|e| e.to_string())?;
        let cpu = session.forward(&seq[..seq.len() - 1]).map_err(|e| e.to_string())?;
        ensure(out.len() == 24 && steps.len() == 24, || format!("greedy run: {} tokens", out.len()))?;
        let mut worst = 0.0f64;
        for (t, s) in out.iter().enumerate() {
            let want = &cpu[prompt.len() - 1 + t];
            let err = rel_err_max(&steps[t], want);
            worst = worst.max(err);
            ensure(err < MAX_REL_ERR && top1_or_near_tie(want, &steps[t], s.id), || {
                format!(
                    "batched prefill {batched}, greedy step {t}: token {} (reference top-1 {}), logits rel err {err:.2e}",
                    s.id,
                    argmax(want)
                )
            })?;
        }
        println!("  greedy steps rel err max {worst:.2e} (batched prefill {batched})");
    }
    // Random delays on the first and the last lane change no token.
    rt.set_options(options.clone()).map_err(|e| e.to_string())?;
    let (want, _) = run(&mut rt, prompt, 24, &SamplingParams::default(), &[])?;
    for rank in [0, config.lanes.count as u32 - 1] {
        let chaos = KernelOptions { diagnostics: Diagnostics { chaos: true, chaos_rank: rank, trace: false }, ..options.clone() };
        rt.set_options(chaos).map_err(|e| e.to_string())?;
        let (got, _) = run(&mut rt, prompt, 24, &SamplingParams::default(), &[])?;
        ensure(ids(&got) == ids(&want), || format!("chaos on lane {rank} changed the tokens"))?;
    }
    Ok(())
}

/// The lanes as one launch (`one_launch`) against one kernel per lane on the same GPU,
/// with the weights as `choice` holds them:
/// the same summation order everywhere, so scored logits of 40 positions are the same
/// bits, and 24 greedy tokens after the batched prefill and after the token path are
/// the same tokens with the same log-probabilities, also under chaos delays (which a
/// single launch puts on every lane).
fn one_launch_check(config: &ModelConfig, choice: GpuWeights) -> Check {
    config.validate().map_err(|e| e.to_string())?;
    let weights = synthetic_weights(config, WEIGHT_SEED);
    let sched = DtpSchedule::of_laneformer(config).map_err(|e| e.to_string())?;
    let tokens = SplitMix64(67).tokens(40, config.vocab_size);
    let per_lane = KernelOptions { prefill_chunk: 16, ..KernelOptions::default() };
    let one = KernelOptions { one_launch: true, ..per_lane.clone() };
    // Q8_0: the float weights converted at load (`--gpu-weights q8_0`).
    let cuda = CudaOptions { weights: choice, ..cuda_options() };
    let gpus = vec![0; config.lanes.count];
    let mut rt = CudaRuntime::with_kernel(config, &weights, &gpus, &cuda, per_lane.clone(), Some(sched)).map_err(|e| e.to_string())?;
    let want_scores = rt.score(&tokens).map_err(|e| e.to_string())?;
    let prompt = &tokens[..36];
    let mut want = Vec::new();
    for batched in [true, false] {
        rt.set_options(KernelOptions { batched_prefill: batched, ..per_lane.clone() }).map_err(|e| e.to_string())?;
        want.push(run(&mut rt, prompt, 24, &SamplingParams::default(), &[])?.0);
    }
    rt.set_options(one.clone()).map_err(|e| e.to_string())?;
    let scores = rt.score(&tokens).map_err(|e| e.to_string())?;
    let differing = scores.iter().zip(&want_scores).filter(|(a, b)| a != b).count();
    ensure(scores.len() == want_scores.len() && differing == 0, || format!("{differing} of {} scored rows differ", tokens.len()))?;
    for (batched, want) in [true, false].into_iter().zip(&want) {
        rt.set_options(KernelOptions { batched_prefill: batched, ..one.clone() }).map_err(|e| e.to_string())?;
        let (got, _) = run(&mut rt, prompt, 24, &SamplingParams::default(), &[])?;
        let same = got.len() == want.len() && got.iter().zip(want).all(|(g, w)| g.id == w.id && g.logprob.to_bits() == w.logprob.to_bits());
        ensure(same, || format!("batched prefill {batched}: one launch gave {:?}, the per-lane kernels {:?}", ids(&got), ids(want)))?;
    }
    let chaos = KernelOptions { diagnostics: Diagnostics { chaos: true, chaos_rank: 0, trace: false }, ..one };
    rt.set_options(chaos).map_err(|e| e.to_string())?;
    let (got, _) = run(&mut rt, prompt, 24, &SamplingParams::default(), &[])?;
    ensure(ids(&got) == ids(&want[0]), || "chaos delays in the one launch changed the tokens".into())?;
    println!("  one launch: {} scored rows and 2 × 24 greedy tokens identical to the per-lane kernels", tokens.len());
    Ok(())
}
