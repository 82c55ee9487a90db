//! Threads per block chosen by measurement when a model loads. The persistent kernel's
//! best block size depends on the shape with no rule that predicts it (docs/kernel.md),
//! so each candidate decodes a few short greedy runs and the fastest stays. The choice
//! is kept next to the cubins, keyed by GPU, kernel sources, shape, parallelism and the
//! other kernel options, so a model pays the measurement once per machine and kernel.

use super::{CudaRuntime, KernelOptions};
use crate::config::ModelConfig;
use crate::dtp::DtpSchedule;
use crate::error::{CudaError, Error, Result};
use crate::options::{CudaOptions, ThreadsPolicy};
use crate::runtime::{Cancel, DecodeJob, Flow, Runtime};
use crate::sampling::SamplingParams;
use crate::weights::Weights;
/// Block sizes tried, the default first (more warps per SM than 512 do not fit the
/// kernel's registers; fewer than 384 were measured far slower for bf16 weights).
pub const CANDIDATES: [u32; 3] = [512, 448, 384];
/// A kernel with quantized matrices also tries 256: it then has twice the registers
/// per thread, and which wins depends on the formats (docs/quantized.md).
pub const QUANT_CANDIDATES: [u32; 4] = [512, 448, 384, 256];

/// The block sizes tried for kernels with `options`' weight formats.
pub fn candidates(options: &KernelOptions) -> &'static [u32] {
    if options.weight_formats != 0 || options.lm_head_format != 0 {
        &QUANT_CANDIDATES
    } else {
        &CANDIDATES
    }
}
/// A candidate replaces the default only when it is at least this much faster: short
/// runs differ by ~0.3 % between repeats, the gains found are 1.5–2 %.
pub const MIN_GAIN: f64 = 0.01;
/// Prompt and generated tokens of one timed run, and runs per candidate (interleaved).
const PROMPT_TOKENS: usize = 16;
const GEN_TOKENS: usize = 96;
/// Fewer generated tokens than this (a KV cache shorter than 48 positions) measure nothing.
const MIN_GEN_TOKENS: usize = 32;
const ROUNDS: usize = 3;

/// Where the block size came from.
#[derive(Debug, Clone, PartialEq)]
pub enum ThreadsSource {
    /// Fixed by the options (`--threads N`).
    Forced,
    /// The KV cache is too short to time runs, or only the default could run.
    Default,
    /// An earlier load's measurement on this machine.
    Cached,
    /// Measured now: each candidate's median decode rate (tok/s).
    Measured(Vec<(u32, f64)>),
}

/// The block size the runtime now runs with, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadsChoice {
    pub threads: u32,
    pub source: ThreadsSource,
}

impl ThreadsChoice {
    /// One log line: the choice and the figures behind it.
    pub fn describe(&self) -> String {
        match &self.source {
            ThreadsSource::Forced => format!("{} threads per block (fixed by --threads)", self.threads),
            ThreadsSource::Default => format!("{} threads per block (default, not measured)", self.threads),
            ThreadsSource::Cached => format!("{} threads per block (measured on an earlier load)", self.threads),
            ThreadsSource::Measured(m) => {
                let figures: Vec<String> = m.iter().map(|(t, r)| format!("{t}: {r:.0} tok/s")).collect();
                format!("{} threads per block (measured {})", self.threads, figures.join(", "))
            }
        }
    }
}

/// The fastest of `measured` (threads, tok/s), or `default` unless one beats it by
/// [`MIN_GAIN`]. Candidates that could not run are absent.
pub fn pick(default: u32, measured: &[(u32, f64)]) -> u32 {
    let base = measured.iter().find(|(t, r)| *t == default && r.is_finite()).map(|m| m.1);
    let best = measured.iter().filter(|m| m.1.is_finite()).max_by(|a, b| a.1.total_cmp(&b.1));
    match (base, best) {
        (Some(b), Some(&(t, r))) if r >= b * (1.0 + MIN_GAIN) => t,
        (None, Some(&(t, _))) => t,
        _ => default,
    }
}

/// A cached choice: the first line of the file, a block size among `candidates`.
pub fn parse_cached(text: &str, candidates: &[u32]) -> Option<u32> {
    let t: u32 = text.lines().next()?.trim().parse().ok()?;
    candidates.contains(&t).then_some(t)
}

/// Builds the runtime `cuda` describes with its threads per block: fixed by the
/// options, or the cached choice for this GPU and shape, or measured now (and cached).
/// `log` receives progress lines (the first load compiles each candidate's kernel).
pub fn build_tuned(
    config: &ModelConfig,
    weights: &Weights,
    gpus: &[usize],
    cuda: &CudaOptions,
    dtp: Option<DtpSchedule>,
    log: &mut dyn FnMut(&str),
) -> Result<(CudaRuntime, ThreadsChoice)> {
    // The weights' formats are part of the kernel, so of the cached choice's key.
    let base = planned_options(config, weights, cuda, gpus.len())?;
    if cuda.threads == ThreadsPolicy::Tuned {
        // An earlier load's choice builds the runtime with it at once (no kernel compiled twice).
        if let Some(threads) = cached_choice(gpus, config, dtp.as_ref(), cuda, &base) {
            match CudaRuntime::with_kernel(config, weights, gpus, cuda, KernelOptions { threads, ..base.clone() }, dtp.clone()) {
                Ok(rt) => return Ok((rt, ThreadsChoice { threads, source: ThreadsSource::Cached })),
                Err(e) => log(&format!("threads per block: the cached {threads} does not build here ({e}); measuring again")),
            }
        }
    }
    let mut rt = with_fitting_kernel(config, weights, gpus, cuda, base, dtp, log)?;
    let choice = match cuda.threads {
        ThreadsPolicy::Fixed(threads) => ThreadsChoice { threads, source: ThreadsSource::Forced },
        ThreadsPolicy::Tuned => choose_threads(&mut rt, log)?,
    };
    Ok((rt, choice))
}

/// The kernel options `cuda` describes with the formats the weights will have on `tp`
/// GPUs (which also decide the block sizes tried, [`candidates`]).
pub fn planned_options(config: &ModelConfig, weights: &Weights, cuda: &CudaOptions, tp: usize) -> Result<KernelOptions> {
    let plan = crate::cuda::quant::WeightPlan::new(config, weights, cuda.weights, tp)?;
    Ok(KernelOptions { weight_formats: plan.layer_mask(), lm_head_format: plan.lm_head.tag(), ..KernelOptions::from_cuda(cuda) })
}

/// [`CudaRuntime::with_kernel`] at `options`' block size or, where that kernel needs more
/// shared memory than the device offers and the block size is tuned (not fixed by the
/// options), at the next smaller candidate that fits.
pub fn with_fitting_kernel(
    config: &ModelConfig,
    weights: &Weights,
    gpus: &[usize],
    cuda: &CudaOptions,
    options: KernelOptions,
    dtp: Option<DtpSchedule>,
    log: &mut dyn FnMut(&str),
) -> Result<CudaRuntime> {
    let mut threads = options.threads;
    loop {
        match CudaRuntime::with_kernel(config, weights, gpus, cuda, KernelOptions { threads, ..options.clone() }, dtp.clone()) {
            Err(Error::Cuda(e @ CudaError::SharedMemory { .. })) if cuda.threads == ThreadsPolicy::Tuned => {
                // Candidates run from the largest block size down.
                let Some(next) = candidates(&options).iter().copied().find(|&t| t < threads) else { return Err(e.into()) };
                log(&format!("threads per block: {e}; trying {next}"));
                threads = next;
            }
            built => return built,
        }
    }
}

/// The key a measurement of kernels with `base` options on a runtime of `identity` is kept under.
fn tune_key(identity: &str, base: &KernelOptions) -> String {
    format!("{identity}|{:?}", KernelOptions { threads: 0, ..base.clone() })
}

/// The cached choice for a runtime with `base` options on `gpus`, read before it is built.
fn cached_choice(gpus: &[usize], config: &ModelConfig, dtp: Option<&DtpSchedule>, cuda: &CudaOptions, base: &KernelOptions) -> Option<u32> {
    let identity = CudaRuntime::kernel_identity_before(gpus, config, dtp).ok()?;
    let file = super::tune_file_in(&cuda.paths, &tune_key(&identity, base))?;
    std::fs::read_to_string(file).ok().and_then(|s| parse_cached(&s, candidates(base)))
}

/// Sets `rt`'s threads per block: cached, or measured now (and cached).
/// `log` receives progress lines (the first load compiles each candidate's kernel).
pub fn choose_threads(rt: &mut CudaRuntime, log: &mut dyn FnMut(&str)) -> Result<ThreadsChoice> {
    let base = rt.options().clone();
    let key = tune_key(&rt.kernel_identity(), &base);
    let file = rt.tune_file(&key);
    if let Some(t) = file.as_ref().and_then(|f| std::fs::read_to_string(f).ok()).and_then(|s| parse_cached(&s, candidates(&base))) {
        if t == base.threads || rt.set_options(KernelOptions { threads: t, ..base.clone() }).is_ok() {
            return Ok(ThreadsChoice { threads: t, source: ThreadsSource::Cached });
        }
    }
    // A KV cache too short for the timed runs (a tiny --context): nothing to measure with.
    let positions = super::layout::kv_positions(rt.config(), &base);
    if positions < PROMPT_TOKENS + MIN_GEN_TOKENS {
        return Ok(ThreadsChoice { threads: base.threads, source: ThreadsSource::Default });
    }
    let measured = measure(rt, &base, GEN_TOKENS.min(positions - PROMPT_TOKENS), log)?;
    let threads = pick(base.threads, &measured);
    if threads != rt.options().threads {
        rt.set_options(KernelOptions { threads, ..base })?;
    }
    if let Some(f) = &file {
        let figures: Vec<String> = measured.iter().map(|(t, r)| format!("{t} {r:.1}")).collect();
        let text = format!("{threads}\n# tok/s by threads per block: {}\n# {key}\n", figures.join(", "));
        // A cache that cannot be written only costs the next load a measurement.
        if let Err(e) = f.parent().map_or(Ok(()), std::fs::create_dir_all).and_then(|_| std::fs::write(f, text)) {
            log(&format!("could not keep the threads-per-block choice in {}: {e}", f.display()));
        }
    }
    if measured.len() < 2 {
        return Ok(ThreadsChoice { threads, source: ThreadsSource::Default });
    }
    Ok(ThreadsChoice { threads, source: ThreadsSource::Measured(measured) })
}

/// Each runnable candidate's median decode rate over [`ROUNDS`] interleaved greedy runs of
/// `gen` tokens.
fn measure(rt: &mut CudaRuntime, base: &KernelOptions, gen: usize, log: &mut dyn FnMut(&str)) -> Result<Vec<(u32, f64)>> {
    let vocab = rt.config().vocab_size as u32;
    let prompt: Vec<u32> = (0..PROMPT_TOKENS as u32).map(|i| (i * 7919 + 13) % vocab).collect();
    let sampling = SamplingParams::default();
    let job = DecodeJob { prompt: &prompt, max_tokens: gen, sampling: &sampling, stop_tokens: &[], top_logprobs: 0, cancel: Cancel::NEVER, reuse_prefix: false, draft: crate::speculative::DraftPlan::OFF, constraint: None };
    let mut runnable = Vec::new();
    for &t in candidates(base) {
        log(&format!("threads per block: preparing the {t}-thread kernel"));
        match rt.set_options(KernelOptions { threads: t, ..base.clone() }) {
            Ok(()) => runnable.push(t),
            Err(e) => log(&format!("threads per block: {t} skipped ({e})")),
        }
    }
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); runnable.len()];
    for round in 0..=ROUNDS {
        for (i, &t) in runnable.iter().enumerate() {
            rt.set_options(KernelOptions { threads: t, ..base.clone() })?;
            rt.generate(&job, &mut |_| Flow::Continue)?;
            // Round 0 warms each kernel (module load, clocks) and is not counted.
            if round > 0 {
                rates[i].push(rt.last_run().decode_tokens_per_s().unwrap_or(f64::NAN));
            }
        }
    }
    Ok(runnable
        .iter()
        .zip(rates)
        .map(|(&t, mut r)| {
            r.sort_by(f64::total_cmp);
            (t, r[r.len() / 2])
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_stays_unless_beaten_by_the_margin() {
        assert_eq!(pick(512, &[(512, 920.0), (448, 936.0), (384, 931.0)]), 448);
        assert_eq!(pick(512, &[(512, 1335.0), (448, 1238.0), (384, 1305.0)]), 512);
        // 0.5 % faster is within the noise: keep the default.
        assert_eq!(pick(512, &[(512, 1000.0), (448, 1005.0)]), 512);
        assert_eq!(pick(512, &[(512, f64::NAN), (448, 900.0)]), 448);
        assert_eq!(pick(512, &[(448, 900.0), (384, 950.0)]), 384);
        assert_eq!(pick(512, &[]), 512);
    }

    #[test]
    fn cached_choices_are_candidates_only() {
        assert_eq!(parse_cached("448\n# tok/s ...\n", &CANDIDATES), Some(448));
        assert_eq!(parse_cached(" 384 ", &CANDIDATES), Some(384));
        assert_eq!(parse_cached("500\n", &CANDIDATES), None);
        assert_eq!(parse_cached("fast\n", &CANDIDATES), None);
        assert_eq!(parse_cached("", &CANDIDATES), None);
        // 256 is a choice for quantized kernels only.
        assert_eq!(parse_cached("256\n", &CANDIDATES), None);
        assert_eq!(parse_cached("256\n", &QUANT_CANDIDATES), Some(256));
    }

    #[test]
    fn quantized_kernels_also_try_256_threads() {
        let bf16 = KernelOptions::default();
        assert_eq!(candidates(&bf16), &CANDIDATES[..]);
        let q8 = KernelOptions { weight_formats: 1 << 1, lm_head_format: 1, ..KernelOptions::default() };
        assert!(candidates(&q8).contains(&256));
        // A bf16 model with only a quantized LM head is a quantized kernel too.
        assert!(candidates(&KernelOptions { lm_head_format: 1, ..KernelOptions::default() }).contains(&256));
        assert_eq!(candidates(&q8)[0], bf16.threads, "the default is tried first");
    }

    #[test]
    fn descriptions_carry_the_figures() {
        let m = ThreadsChoice { threads: 448, source: ThreadsSource::Measured(vec![(512, 920.4), (448, 936.0)]) };
        assert_eq!(m.describe(), "448 threads per block (measured 512: 920 tok/s, 448: 936 tok/s)");
        assert!(ThreadsChoice { threads: 512, source: ThreadsSource::Cached }.describe().contains("earlier load"));
    }
}
