//! `trace`: per shape and kernel build, the phase trace of the step TRACE_AFTER_PROMPT
//! after the prompt, runs pooled (medians over layers × runs). A trace that changes the
//! tokens, or holds no figures, measured something else: that is an error.

use peregrine_engine::cuda::layout::TRACE_AFTER_PROMPT;
use peregrine_engine::cuda::trace;
use peregrine_engine::lab::rng::SplitMix64;
use peregrine_engine::lab::runs::{collect, ids};
use peregrine_engine::lab::synthetic::{synthetic_mix_weights, QuantMix, MIX_NAMES};
use peregrine_engine::sampling::SamplingParams;
use peregrine_engine::{CudaOptions, GpuWeights};

use super::*;

/// What `trace` runs.
pub struct Plan {
    pub shapes: Vec<String>,
    pub variants: Vec<String>,
    pub prompt: usize,
    pub runs: usize,
    pub tp: usize,
    pub weights: String,
}

pub fn run(plan: &Plan) -> Result<()> {
    let gen = TRACE_AFTER_PROMPT + 8;
    let greedy = SamplingParams::default();
    let mut failures = Vec::new();
    for shape in &plan.shapes {
        let config = shape_config(shape);
        let mix = QuantMix::from_name(&plan.weights)
            .unwrap_or_else(|| panic!("unknown --weights {} (one of {})", plan.weights, MIX_NAMES.join(", ")));
        let w = synthetic_mix_weights(&config, WEIGHT_SEED, mix);
        let prompt = SplitMix64(7).tokens(plan.prompt, config.vocab_size);
        // --tp N: rank 0's blocks of a tensor-parallel run over GPUs 0..N, standard TP, and
        // for a Laneformer preset also its own lanes folded onto them; one runtime at a time.
        let tp = plan.tp;
        let mut kinds: Vec<(String, ModelConfig, Option<DtpSchedule>)> = vec![(String::new(), config.clone(), None)];
        if tp > 1 {
            kinds = vec![(format!(" tp {tp}"), config.clone(), None)];
            if let Some((lanes, sched)) = own_lanes(shape)? {
                kinds.push((format!(" {} lanes on {tp}", sched.lanes), lanes, Some(sched)));
            }
        }
        for (label, config, sched) in kinds {
            let gpus = peregrine_engine::model::rank_devices(&config, &(0..tp).collect::<Vec<_>>())?;
            let base = cuda_options();
            let cuda = CudaOptions {
                weights: if mix.is_some() { GpuWeights::Native } else { GpuWeights::Bf16 },
                share_gpu: base.share_gpu || gpus.len() > tp,
                ..base
            };
            let mut rt = CudaRuntime::with_kernel(&config, &w, &gpus, &cuda, kernel_variant(&plan.variants[0])?, sched)?;
            let shape = format!("{shape}{label} {}", plan.weights);
            for name in &plan.variants {
                rt.set_options(kernel_variant(name)?)?;
                let (plain, _) = collect(&mut rt, &prompt, gen, &greedy, &[], 0)?;
                let mut traced = kernel_variant(name)?;
                traced.diagnostics.trace = true;
                rt.set_options(traced)?;
                println!(
                    "== trace {shape} {name}: step {} (prompt {} + {TRACE_AFTER_PROMPT}), {} runs pooled",
                    plan.prompt + TRACE_AFTER_PROMPT,
                    plan.prompt,
                    plan.runs
                );
                println!("  {}", rt.describe());
                collect(&mut rt, &prompt, gen, &greedy, &[], 0)?; // warm-up
                let mut figures = Vec::new();
                let mut same = true;
                let mut clock = Vec::new();
                let mut steps = Vec::new();
                for _ in 0..plan.runs {
                    let (out, _) = collect(&mut rt, &prompt, gen, &greedy, &[], 0)?;
                    same &= ids(&out) == ids(&plain);
                    let raw = rt.last_trace().ok_or_else(|| peregrine_engine::CudaError::Kernel("no trace after a traced run".into()))?;
                    match trace::event_figures(raw) {
                        Ok(f) => figures.extend(f),
                        Err(e) => println!("  trace unusable: {e}"),
                    }
                    match trace::step_figures(raw) {
                        Ok(f) => steps.push(f),
                        Err(e) => println!("  no step figures: {e}"),
                    }
                    if let Ok(t) = trace::calibrate(raw) {
                        clock.push(1.0 / t.ns_per_cycle);
                    }
                }
                if !same {
                    failures.push(format!("{shape} {name}: traced runs changed the untraced run's {gen} greedy tokens"));
                }
                if figures.is_empty() {
                    failures.push(format!("{shape} {name}: the trace holds no phase figures"));
                }
                let rows = trace::summarize(&figures);
                println!(
                    "  SM clock fitted from the stamps: {:.3} GHz (per run: {clock:.3?})",
                    clock.iter().sum::<f64>() / clock.len().max(1) as f64
                );
                println!("{}", trace::table(&rows));
                if !steps.is_empty() {
                    println!("  {}", trace::step_line(&steps));
                }
            }
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(peregrine_engine::CudaError::Mismatch(failures.join("; ")).into())
    }
}
