//! The 3–8B presets' widths on the GPU (head dim 128, 7:1 grouped-query attention, a
//! 152k vocabulary, shared-memory plans that need a smaller block): each weight format
//! teacher-forced against the fast CPU runtime and run under chaos delays. Two layers of
//! each preset: every per-layer plan is the full model's, the depth only repeats it (the
//! benchmark verifies whole-depth runs), and a short run of the widest ones for
//! compute-sanitizer.

use libtest_mimic::{Failed, Trial};
use peregrine_engine::config::ModelConfig;
use peregrine_engine::cuda::{tune, CudaRuntime};
use peregrine_engine::lab::synthetic::{synthetic_quant_weights, synthetic_weights, QuantMix};
use peregrine_engine::runtime::RunEnd;
use peregrine_engine::sampling::SamplingParams;
use peregrine_engine::tensor::DType;
use peregrine_engine::weights::Weights;
use peregrine_engine::{CudaOptions, GpuWeights};

use super::quant::{race_check_of, top1_agreement_of};
use super::{cuda_options, preset_shape, Check, WEIGHT_SEED};

/// The presets past 2B parameters, at this many layers.
const BIG_PRESETS: [&str; 3] = ["qwen2.5-coder-3b", "qwen2.5-coder-7b", "llama-3.1-8b"];
const LAYERS: usize = 2;
/// Teacher-forced positions (a 152k-entry LM head per position on the CPU) and the
/// agreement required of random weights (disagreements must be near-ties).
const POSITIONS: usize = 128;
const MIN_TOP1: f64 = 0.98;

pub fn trials() -> Vec<Trial> {
    let mut t = Vec::new();
    for preset in BIG_PRESETS {
        for mix in [None, Some(QuantMix::Uniform(DType::Q8_0)), Some(QuantMix::Q4KM)] {
            let name = format!("{preset} widths, {LAYERS} layers, {}", mix.map_or("bf16".to_string(), |m| format!("{m:?}")));
            t.push(Trial::test(format!("{name}: teacher-forced top-1 matches the CPU fast runtime, chaos delays change no token"), move || {
                big_check(preset, mix)
            }));
        }
    }
    t.push(Trial::test("sanitize: 3–8B widths in Q4_K_M and Q8_0 (smaller blocks): prefill, sampling and a few tokens", sanitize_big));
    t
}

/// Short, for compute-sanitizer: the two widest presets' quantized builds (the block
/// sizes their shared-memory plans fit) through a prefilled prompt and sampled tokens.
fn sanitize_big() -> Check {
    for preset in ["qwen2.5-coder-7b", "llama-3.1-8b"] {
        for mix in [QuantMix::Q4KM, QuantMix::Uniform(DType::Q8_0)] {
            let config = ModelConfig { num_layers: LAYERS, ..preset_shape(preset) };
            let weights = synthetic_quant_weights(&config, WEIGHT_SEED, mix);
            let mut rt = fitting_runtime(&config, &weights)?;
            println!("  {}", rt.describe());
            let prompt = peregrine_engine::lab::rng::SplitMix64(5).tokens(40, config.vocab_size);
            let sampling = SamplingParams { temperature: 0.8, top_k: 40, seed: 1, ..Default::default() };
            let (out, end) = super::run(&mut rt, &prompt, 4, &sampling, &[])?;
            super::ensure(out.len() == 4 && end == RunEnd::Length, || format!("{preset} {mix:?}: {} tokens, end {end:?}", out.len()))?;
        }
    }
    Ok(())
}

fn big_check(preset: &str, mix: Option<QuantMix>) -> Check {
    let config = ModelConfig { num_layers: LAYERS, ..preset_shape(preset) };
    let weights = match mix {
        None => synthetic_weights(&config, WEIGHT_SEED),
        Some(m) => synthetic_quant_weights(&config, WEIGHT_SEED, m),
    };
    top1_agreement_of(fitting_runtime(&config, &weights)?, &config, &weights, POSITIONS, MIN_TOP1)?;
    race_check_of(fitting_runtime(&config, &weights)?, &config)
}

/// The runtime `peregrine` would build: native formats, the largest block size whose
/// kernel fits the device's shared memory.
fn fitting_runtime(config: &ModelConfig, weights: &Weights) -> Result<CudaRuntime, Failed> {
    let cuda = CudaOptions { weights: GpuWeights::Native, ..cuda_options() };
    let base = tune::planned_options(config, weights, &cuda, 1).map_err(|e| e.to_string())?;
    let mut log = |line: &str| println!("  {line}");
    Ok(tune::with_fitting_kernel(config, weights, &[0], &cuda, base, None, &mut log).map_err(|e| e.to_string())?)
}
