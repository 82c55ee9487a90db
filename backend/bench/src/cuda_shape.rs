//! The GPU side of `peregrine bench --device cuda` for one model shape, by the method of
//! docs/benchmarks.md ("GPU method"): a verified (untimed, checked) greedy run first, then timed runs whose
//! decode rate comes from the kernel's own per-token timestamps (median of runs),
//! judged against the HBM bound measured in the same process, plus time to first
//! token of a long prompt: through the batched prefill (the default) and, for
//! comparison, token by token in the persistent kernel, with the first step's logits of
//! the two paths compared. Written against the CUDA runtime's public API only.

use std::time::Instant;

use peregrine_engine::config::ModelConfig;
use peregrine_engine::cpu::fast_runtime::{FastOptions, FastRuntime};
use peregrine_engine::cpu::reference::{KvCache, ReferenceModel};
use peregrine_engine::cuda::layout::{self, KernelOptions};
use peregrine_engine::cuda::tune::{self, ThreadsChoice, ThreadsSource};
use peregrine_engine::cuda::CudaRuntime;
use peregrine_engine::dtp::reference::{Execution, ShardedModel};
use peregrine_engine::dtp::DtpSchedule;
use peregrine_engine::lab::logits::{argmax, rel_err};
use peregrine_engine::lab::runs::{collect, ids};
use peregrine_engine::lab::teacher_forced::{self, Agreement};
use peregrine_engine::runtime::{Cancel, DecodeJob, Flow, RunEnd, Runtime};
use peregrine_engine::sampling::{Sampled, SamplingParams};
use peregrine_engine::weights::Weights;
use peregrine_engine::{CudaOptions, ThreadsPolicy};
use peregrine_engine::{Error, Result};

/// Prompt tokens before the decode measurement.
pub const DEFAULT_PROMPT_TOKENS: usize = 32;
/// Tokens generated per timed run.
pub const DEFAULT_GEN_TOKENS: usize = 256;
/// Prompt length of the time-to-first-token measurement.
pub const DEFAULT_TTFT_PROMPT_TOKENS: usize = 512;
/// Timed runs per shape (the median is reported).
pub const DEFAULT_RUNS: usize = 5;
/// Leading greedy steps checked against the CPU float32 reference (small shapes).
pub const CHECKED_TOKENS: usize = 16;
/// The H200's HBM3e bandwidth as specified (bytes per second): the second yardstick
/// next to the copy bandwidth measured in the run.
pub const H200_SPEC_BANDWIDTH: f64 = 4.8e12;
/// Size of the device-to-device copy that measures the bandwidth ceiling.
pub const BANDWIDTH_BYTES: usize = 1 << 30;
/// Timed copies of that buffer (median).
pub const BANDWIDTH_REPEATS: usize = 10;
/// Relative logit error allowed against the CPU float32 reference (bf16 weights and
/// KV cache; the same bound as the GPU tests').
pub const MAX_REL_ERR: f64 = 3e-2;
/// Up to this many parameters the verified run's first steps are checked against the
/// CPU float32 reference step by step; bigger shapes score a few prompt positions
/// (the single-threaded reference takes about a second per token at 1.5B).
pub const STEPWISE_REFERENCE_MAX_PARAMS: u64 = 500_000_000;
/// Longest sequence (prompt + checked steps) the step-by-step reference runs: it is
/// single-threaded matvecs, ~0.1 s a position at 135M (~25 s here), so a long-context
/// run (`--prompt 8000`) scores a few prompt positions instead, like a bigger shape.
pub const STEPWISE_REFERENCE_MAX_POSITIONS: usize = 256;
/// Prompt positions scored against the reference for bigger shapes and long prompts.
pub const LARGE_REFERENCE_POSITIONS: usize = 2;
/// Seed of the benchmark's prompt token ids.
pub const PROMPT_SEED: u64 = 0x5EED_0001;

/// What to run on each shape.
#[derive(Debug, Clone, PartialEq)]
pub struct CudaBenchPlan {
    pub prompt_tokens: usize,
    pub gen_tokens: usize,
    pub ttft_prompt_tokens: usize,
    pub runs: usize,
    /// KV-cache positions to allocate (default: the kernel's default, capped by the model).
    pub context: Option<usize>,
}

impl Default for CudaBenchPlan {
    fn default() -> Self {
        CudaBenchPlan {
            prompt_tokens: DEFAULT_PROMPT_TOKENS,
            gen_tokens: DEFAULT_GEN_TOKENS,
            ttft_prompt_tokens: DEFAULT_TTFT_PROMPT_TOKENS,
            runs: DEFAULT_RUNS,
            context: None,
        }
    }
}

impl CudaBenchPlan {
    /// Kernel options for `config`, or why the plan does not fit its KV cache.
    pub fn kernel_options(&self, config: &ModelConfig, cuda: &CudaOptions) -> Result<KernelOptions> {
        if self.prompt_tokens == 0 || self.gen_tokens < CHECKED_TOKENS || self.ttft_prompt_tokens == 0 || self.runs == 0 {
            return Err(Error::InvalidRequest(format!(
                "bench needs --prompt ≥ 1, --gen ≥ {CHECKED_TOKENS}, a TTFT prompt ≥ 1 and --runs ≥ 1"
            )));
        }
        let mut options = KernelOptions::from_cuda(cuda);
        if let Some(c) = self.context {
            options.kv_positions = c;
        }
        let cap = layout::kv_positions(config, &options);
        let need = (self.prompt_tokens + self.gen_tokens).max(self.ttft_prompt_tokens + 1);
        if need > cap {
            return Err(Error::InvalidRequest(format!(
                "{}: the bench needs {need} KV positions but the cache holds {cap} (--context)",
                config.name
            )));
        }
        Ok(options)
    }
}

/// The untimed, checked run the timed runs are compared with.
#[derive(Debug, Clone, PartialEq)]
pub struct Verification {
    /// Greedy tokens of the verified run.
    pub tokens: Vec<u32>,
    /// Each token is the argmax of the kernel's own logits of its step.
    pub argmax_consistent: bool,
    /// Largest relative logit error against the CPU float32 reference.
    pub reference_rel_err: f64,
    /// Positions compared with the reference, and how many share its top-1.
    pub reference_positions: usize,
    pub reference_top1: usize,
    /// `"greedy steps"` (teacher-forced on the GPU's tokens) or `"prompt positions"` (big
    /// shapes; `", long prompt"` where only the prompt's length ruled the steps out).
    pub reference_kind: &'static str,
    /// Every token of the run teacher-forced on the fast CPU runtime (`None`: DTP, whose
    /// function only the first positions' DTP reference computes).
    pub whole_run: Option<Agreement>,
}

impl Verification {
    /// The verified run is trustworthy.
    pub fn passed(&self) -> bool {
        let whole = self.whole_run.as_ref().is_none_or(|a| a.passed(self.tokens.len()));
        self.argmax_consistent && self.reference_rel_err < MAX_REL_ERR && whole
    }
}

/// Figures of one shape.
#[derive(Debug, Clone, PartialEq)]
pub struct ShapeFigures {
    pub name: String,
    /// Tensor-parallel degree (GPUs the shape ran on).
    pub tp: usize,
    /// The DTP delay when the shape ran as Delayed Tensor Parallelism.
    pub dtp: Option<usize>,
    pub parameters: u64,
    /// Bytes each GPU's kernel streams per token (its weights once).
    pub bytes_per_token: u64,
    /// Decode tok/s of each timed run (device timestamps), and their median.
    pub decode_runs: Vec<f64>,
    pub decode_tok_s: f64,
    pub us_per_token: f64,
    /// bandwidth / bytes_per_token, and the median's share of it.
    pub bound_tok_s: f64,
    pub pct_of_bound: f64,
    /// Weight bytes streamed per second as a share of [`H200_SPEC_BANDWIDTH`].
    pub pct_of_spec: f64,
    /// Engine call → first token on the host, for the TTFT prompt (median), with the
    /// runtime's default prompt path (the batched prefill where supported).
    pub ttft_ms: f64,
    /// The same through the per-token path (the prompt as persistent-kernel steps).
    pub ttft_tokens_ms: f64,
    /// A conversation's next turn: the TTFT prompt plus [`TURN_TOKENS`] more, right after
    /// the TTFT prompt ran, with prompt reuse (median), and the prompt tokens it reused.
    pub turn_ttft_ms: f64,
    pub turn_reused: usize,
    /// GPU time of the batched prefill itself in the TTFT runs (median), and one
    /// profiled run's split: (GEMMs, attention, row kernels) in ms.
    pub prefill_gpu_ms: Option<f64>,
    pub prefill_split: Option<(f64, f64, f64)>,
    /// First generated step's logits, batched prefill vs per-token path, on the TTFT
    /// prompt: ‖Δ‖/‖per-token‖, and whether the greedy first tokens agree.
    pub prefill_rel_err: f64,
    pub prefill_same_token: bool,
    /// Every timed run produced the verified run's `gen_tokens` tokens.
    pub tokens_match: bool,
    pub verification: Verification,
    /// Device, grid and kernel variant.
    pub describe: String,
}

/// Median (mean of the middle two for an even count); NaN when empty.
pub fn median(values: &[f64]) -> f64 {
    crate::cpu_plan::median(values)
}

/// Deterministic token ids spread over the vocabulary (SplitMix64).
pub fn bench_tokens(n: usize, vocab_size: usize, seed: u64) -> Vec<u32> {
    peregrine_engine::lab::rng::SplitMix64(seed).tokens(n, vocab_size)
}

/// Greedy run of `max_tokens`; returns the tokens and how the run ended.
fn greedy(rt: &mut CudaRuntime, prompt: &[u32], max_tokens: usize) -> Result<(Vec<u32>, RunEnd)> {
    let (out, end) = collect(rt, prompt, max_tokens, &SamplingParams::default(), &[], 0)?;
    Ok((ids(&out), end))
}

/// The verified run: greedy with the kernel's logits kept, checked against its own
/// argmax and against the CPU float32 reference (DTP: the lane-by-lane DTP reference).
fn verify(
    rt: &mut CudaRuntime,
    config: &ModelConfig,
    weights: &Weights,
    dtp: Option<&DtpSchedule>,
    prompt: &[u32],
    gen: usize,
) -> Result<Verification> {
    rt.set_debug_logits(true);
    let run = greedy(rt, prompt, gen);
    let logits = rt.debug_logits().to_vec();
    rt.set_debug_logits(false);
    let (tokens, _) = run?;
    let checked = CHECKED_TOKENS.min(tokens.len()).min(logits.len());
    let argmax_consistent =
        checked == CHECKED_TOKENS && logits.len() >= tokens.len() && tokens.iter().zip(&logits).all(|(&t, l)| argmax(l) == t);
    if let Some(sched) = dtp {
        // DTP is a different function from the plain model: score a few prompt positions
        // with the float32 DTP reference of the same lanes.
        let head = &prompt[..LARGE_REFERENCE_POSITIONS.min(prompt.len())];
        let gpu = rt.score(head)?;
        let model = ShardedModel::new(config, weights, sched.lanes)?;
        let cpu = model.session(Execution::Delayed(sched.clone()))?.forward(head)?;
        let pairs: Vec<(Vec<f32>, Vec<f32>)> = gpu.into_iter().zip(cpu).collect();
        return Ok(Verification {
            tokens,
            argmax_consistent,
            reference_rel_err: pairs.iter().map(|(g, c)| rel_err(g, c)).fold(0.0, f64::max),
            reference_positions: pairs.len(),
            reference_top1: pairs.iter().filter(|(g, c)| argmax(g) == argmax(c)).count(),
            reference_kind: "prompt positions, DTP reference",
            whole_run: None,
        });
    }
    let reference = ReferenceModel::new(config, weights)?;
    let stepwise = config.parameter_count() <= STEPWISE_REFERENCE_MAX_PARAMS && prompt.len() + checked <= STEPWISE_REFERENCE_MAX_POSITIONS;
    let (kind, pairs) = if stepwise {
        // Teacher-forced on the GPU's own tokens: row prompt-1+t predicts step t.
        let mut seq = prompt.to_vec();
        seq.extend(&tokens[..checked.saturating_sub(1)]);
        let mut cache = KvCache::new(config, seq.len());
        let cpu = reference.forward(&mut cache, &seq, true)?;
        let pairs: Vec<(Vec<f32>, Vec<f32>)> = (0..checked).map(|t| (logits[t].clone(), cpu[prompt.len() - 1 + t].clone())).collect();
        ("greedy steps", pairs)
    } else {
        let head = &prompt[..LARGE_REFERENCE_POSITIONS.min(prompt.len())];
        let gpu = rt.score(head)?;
        let mut cache = KvCache::new(config, head.len());
        let cpu = reference.forward(&mut cache, head, true)?;
        let kind =
            if config.parameter_count() <= STEPWISE_REFERENCE_MAX_PARAMS { "prompt positions, long prompt" } else { "prompt positions" };
        (kind, gpu.into_iter().zip(cpu).collect())
    };
    let reference_rel_err = pairs.iter().map(|(g, c)| rel_err(g, c)).fold(0.0, f64::max);
    let reference_top1 = pairs.iter().filter(|(g, c)| argmax(g) == argmax(c)).count();
    let whole_run = Some(whole_run_agreement(config, weights, prompt, &tokens, &logits)?);
    Ok(Verification {
        tokens,
        argmax_consistent,
        reference_rel_err,
        reference_positions: pairs.len(),
        reference_top1,
        reference_kind: kind,
        whole_run,
    })
}

/// The whole greedy run teacher-forced on the fast CPU runtime (every core; float
/// weights stay float there, quantized ones run the formats' CPU kernels): the row
/// before each generated token is compared with the kernel's logits of that step.
fn whole_run_agreement(config: &ModelConfig, weights: &Weights, prompt: &[u32], tokens: &[u32], logits: &[Vec<f32>]) -> Result<Agreement> {
    let n = tokens.len().min(logits.len());
    if n == 0 || prompt.is_empty() {
        return Ok(Agreement::default());
    }
    let mut seq = prompt.to_vec();
    seq.extend(&tokens[..n - 1]);
    let rows = FastRuntime::new(config, weights, FastOptions::defaults())?.score(&seq)?;
    Ok(teacher_forced::agreement(&tokens[..n], &logits[..n], &rows[prompt.len() - 1..]))
}

/// Benchmarks one shape on devices `ordinals` (several: tensor parallelism);
/// `bandwidth` is the measured copy bandwidth of one GPU (bytes read + written per
/// second) the bound is computed from (each GPU streams its own shard).
/// `dtp`: run the shape as Delayed Tensor Parallelism with this schedule (lanes = GPUs).
pub fn bench_shape(
    config: &ModelConfig,
    weights: &Weights,
    ordinals: &[usize],
    dtp: Option<&DtpSchedule>,
    plan: &CudaBenchPlan,
    cuda: &CudaOptions,
    bandwidth: f64,
) -> Result<ShapeFigures> {
    let options = plan.kernel_options(config, cuda)?;
    let mut rt = tune::with_fitting_kernel(config, weights, ordinals, cuda, options, dtp.cloned(), &mut |line| {
        eprintln!("{}: {line}", config.name)
    })?;
    // The block size serve would run with (measured at load, or cached).
    let threads = match cuda.threads {
        ThreadsPolicy::Fixed(threads) => ThreadsChoice { threads, source: ThreadsSource::Forced },
        ThreadsPolicy::Tuned => tune::choose_threads(&mut rt, &mut |line| eprintln!("{}: {line}", config.name))?,
    };
    let prompt = bench_tokens(plan.prompt_tokens, config.vocab_size, PROMPT_SEED);
    let verification = verify(&mut rt, config, weights, dtp, &prompt, plan.gen_tokens)?;
    greedy(&mut rt, &prompt, plan.gen_tokens)?; // warm-up: clocks, caches, first-touch
    let mut decode_runs = Vec::with_capacity(plan.runs);
    let mut tokens_match = true;
    for _ in 0..plan.runs {
        let (out, end) = greedy(&mut rt, &prompt, plan.gen_tokens)?;
        // Greedy is deterministic (the race checks hold it so), so every timed run's
        // tokens are the verified run's, each one scored above.
        tokens_match &= end == RunEnd::Length && out == verification.tokens;
        decode_runs.push(rt.last_run().decode_tokens_per_s().unwrap_or(f64::NAN));
    }
    let long_prompt = bench_tokens(plan.ttft_prompt_tokens, config.vocab_size, PROMPT_SEED ^ 1);
    let default_options = rt.options().clone();
    let batched = ttft(&mut rt, &long_prompt, plan.runs)?;
    let prefill_split = if rt.batched_prefill() {
        rt.set_prefill_profile(true);
        ttft(&mut rt, &long_prompt, 1)?;
        rt.set_prefill_profile(false);
        rt.last_prefill_split().map(|s| (s.gemm_ms, s.attention_ms, s.rows_ms))
    } else {
        None
    };
    rt.set_options(KernelOptions { batched_prefill: false, ..default_options.clone() })?;
    let tokens = ttft(&mut rt, &long_prompt, plan.runs)?;
    rt.set_options(default_options)?;
    let (turn_ttft_ms, turn_reused) = turn_ttft(&mut rt, &long_prompt, plan.runs)?;
    let bytes_per_token = rt.streamed_bytes_per_token();
    let decode_tok_s = median(&decode_runs);
    let bound_tok_s = bandwidth / bytes_per_token.max(1) as f64;
    Ok(ShapeFigures {
        name: config.name.clone(),
        tp: ordinals.len(),
        dtp: dtp.map(|s| s.delay),
        parameters: config.parameter_count(),
        bytes_per_token,
        decode_tok_s,
        us_per_token: 1e6 / decode_tok_s,
        bound_tok_s,
        pct_of_bound: 100.0 * decode_tok_s / bound_tok_s,
        pct_of_spec: 100.0 * decode_tok_s * bytes_per_token as f64 / H200_SPEC_BANDWIDTH,
        ttft_ms: batched.ttft_ms,
        ttft_tokens_ms: tokens.ttft_ms,
        turn_ttft_ms,
        turn_reused,
        prefill_gpu_ms: batched.prefill_gpu_ms,
        prefill_split,
        prefill_rel_err: rel_err(&batched.logits, &tokens.logits),
        prefill_same_token: batched.first == tokens.first,
        decode_runs,
        tokens_match,
        verification,
        describe: format!("{}; {}", rt.describe(), threads.describe()),
    })
}

/// Time to first token of one prompt with the runtime's current options.
struct Ttft {
    /// Median over the timed runs, ms.
    ttft_ms: f64,
    /// The batched prefill's median GPU time, when it ran.
    prefill_gpu_ms: Option<f64>,
    /// First token and its logits (one more run, debug logits kept).
    first: u32,
    logits: Vec<f32>,
}

/// New tokens of the next turn in [`turn_ttft`].
pub const TURN_TOKENS: usize = 32;

/// TTFT (median ms over `runs`) of `first` plus [`TURN_TOKENS`] tokens with prompt
/// reuse, each run right after one of `first` (its cache then holds all of `first`),
/// and the prompt tokens the last run reused.
fn turn_ttft(rt: &mut CudaRuntime, first: &[u32], runs: usize) -> Result<(f64, usize)> {
    let sampling = SamplingParams::default();
    let mut second = first.to_vec();
    second.extend(bench_tokens(TURN_TOKENS, rt.config().vocab_size, PROMPT_SEED ^ 2));
    let mut ttfts = Vec::with_capacity(runs);
    for _ in 0..runs {
        rt.generate(&one_token(first, &sampling, false), &mut |_| Flow::Continue)?;
        ttfts.push(first_token_ms(rt, &one_token(&second, &sampling, true))?);
    }
    Ok((median(&ttfts), rt.reused_prefix()))
}

/// A greedy run of `prompt` to its first token.
fn one_token<'a>(prompt: &'a [u32], sampling: &'a SamplingParams, reuse_prefix: bool) -> DecodeJob<'a> {
    DecodeJob { prompt, max_tokens: 1, sampling, stop_tokens: &[], top_logprobs: 0, cancel: Cancel::NEVER, reuse_prefix, draft: peregrine_engine::speculative::DraftPlan::OFF, constraint: None }
}

/// Engine call → first token on the host, in ms, of one run of `job` (NaN without a token).
fn first_token_ms(rt: &mut CudaRuntime, job: &DecodeJob<'_>) -> Result<f64> {
    let started = Instant::now();
    let mut first = None;
    rt.generate(job, &mut |_| {
        first.get_or_insert(started.elapsed());
        Flow::Continue
    })?;
    Ok(first.map_or(f64::NAN, |d| d.as_secs_f64() * 1e3))
}

/// [`Ttft`] of `prompt` over `runs` runs.
fn ttft(rt: &mut CudaRuntime, prompt: &[u32], runs: usize) -> Result<Ttft> {
    let sampling = SamplingParams::default();
    let job = one_token(prompt, &sampling, false);
    let mut ttfts = Vec::with_capacity(runs);
    let mut gpu = Vec::with_capacity(runs);
    for _ in 0..runs {
        ttfts.push(first_token_ms(rt, &job)?);
        if let Some(ms) = rt.last_run().prefill_gpu_ms {
            gpu.push(ms);
        }
    }
    rt.set_debug_logits(true);
    let mut id = u32::MAX;
    let run = rt.generate(&job, &mut |s: &Sampled| {
        id = s.id;
        Flow::Continue
    });
    let logits = rt.debug_logits().first().cloned().unwrap_or_default();
    rt.set_debug_logits(false);
    run?;
    Ok(Ttft { ttft_ms: median(&ttfts), prefill_gpu_ms: (!gpu.is_empty()).then(|| median(&gpu)), first: id, logits })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_tokens_are_deterministic_and_in_range() {
        let a = bench_tokens(512, 49152, PROMPT_SEED);
        assert_eq!(a, bench_tokens(512, 49152, PROMPT_SEED));
        assert!(a.iter().all(|&t| t < 49152));
        assert_ne!(a, bench_tokens(512, 49152, PROMPT_SEED ^ 1));
    }

    #[test]
    fn plan_checks_the_kv_cache() {
        let config = peregrine_engine::lab::synthetic::preset("smollm2-135m").expect("preset");
        assert!(CudaBenchPlan::default().kernel_options(&config, &CudaOptions::default()).is_ok());
        let small = CudaBenchPlan { context: Some(300), ..Default::default() };
        assert!(small.kernel_options(&config, &CudaOptions::default()).is_err(), "512-token TTFT prompt does not fit 300 positions");
        let short = CudaBenchPlan { gen_tokens: 4, ..Default::default() };
        assert!(short.kernel_options(&config, &CudaOptions::default()).is_err());
    }

    #[test]
    fn without_a_device_the_bench_is_an_error_not_a_panic() {
        if peregrine_engine::cuda::devices().is_ok() {
            return; // a GPU machine: the device scripts exercise the real path
        }
        let config = peregrine_engine::lab::synthetic::preset("smollm2-135m").expect("preset");
        let config = ModelConfig { num_layers: 1, vocab_size: 512, ..config };
        let weights = peregrine_engine::lab::synthetic::synthetic_weights(&config, 1);
        let err = bench_shape(&config, &weights, &[0], None, &CudaBenchPlan::default(), &CudaOptions::default(), 4e12)
            .expect_err("no device here");
        assert!(err.to_string().to_lowercase().contains("cuda"), "{err}");
    }
}
