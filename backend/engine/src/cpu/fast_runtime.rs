//! [`Runtime`] over the fast forward pass: packed quantized weights, SIMD kernels,
//! a thread team that lives as long as the runtime, the prompt in batches. Sampling
//! is the shared `sample()`, called exactly as the reference runtime calls it, so a
//! seed gives the same tokens whenever the logits agree.

use crate::config::ModelConfig;
use crate::cpu::act_quant::ActPrecision;
use crate::cpu::fast_model::FastModel;
use crate::cpu::forward::{forward, LogitsFor};
use crate::cpu::isa::Isa;
use crate::cpu::kv_cache::KvCache;
use crate::cpu::pool::Pool;
use crate::admission::check_fits;
use crate::cpu::workspace::Workspace;
use crate::error::{Error, Result};
use crate::runtime::{cpu_name, BackendInfo, Cancel, DecodeJob, Flow, RunEnd, Runtime};
use crate::sampling::{sample, Sampled};
use crate::weights::Weights;

/// Prompt tokens per forward call: large enough that each unpacked weight tile
/// feeds many tokens, small enough that activations stay in L2.
pub const DEFAULT_PREFILL_BATCH: usize = 256;

/// How to build a [`FastRuntime`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FastOptions {
    /// Threads in the team (the caller's thread included).
    pub threads: usize,
    pub isa: Isa,
    /// Prompt tokens per forward call.
    pub prefill_batch: usize,
    /// Activation precision of the integer kernels.
    pub act_precision: ActPrecision,
}

impl FastOptions {
    /// The engine's CPU options made concrete: every core unless capped, the best
    /// instruction set up to the cap, the default batch.
    pub fn from_options(cpu: &crate::options::CpuOptions) -> FastOptions {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let threads = cpu.threads.filter(|&n| n > 0).unwrap_or(cores);
        FastOptions { threads, isa: Isa::detect(cpu.isa_cap), prefill_batch: DEFAULT_PREFILL_BATCH, act_precision: cpu.act_precision }
    }

    /// [`Self::from_options`] of the default CPU options.
    pub fn defaults() -> FastOptions {
        Self::from_options(&crate::options::CpuOptions::default())
    }
}

/// The fast CPU runtime.
pub struct FastRuntime {
    model: FastModel,
    pool: Pool,
    ws: Workspace,
    cache: KvCache,
}

impl FastRuntime {
    /// Repacks the weights and starts the thread team.
    pub fn new(config: &ModelConfig, weights: &Weights, options: FastOptions) -> Result<FastRuntime> {
        if !options.isa.is_supported() {
            return Err(Error::InvalidRequest(format!("this CPU lacks the {} instruction set", options.isa.name())));
        }
        let threads = options.threads.max(1);
        let model = FastModel::new(config, weights, options.isa, threads)?;
        let pool = Pool::new(threads).map_err(|e| Error::Unavailable(format!("cannot start CPU worker threads: {e}")))?;
        let ws = Workspace::new(&model, options.prefill_batch.max(1), threads, options.act_precision);
        let cache = KvCache::new(config);
        Ok(FastRuntime { model, pool, ws, cache })
    }

    /// Threads in the team.
    pub fn threads(&self) -> usize {
        self.pool.threads()
    }

    /// The instruction set in use.
    pub fn isa(&self) -> Isa {
        self.model.isa
    }

    /// Bytes of repacked weights.
    pub fn packed_bytes(&self) -> usize {
        self.model.packed_bytes()
    }

    /// Runs `tokens` after what is cached, in batches; returns the logits of every
    /// position (`all`) or of the last only, one row per position.
    pub fn forward(&mut self, tokens: &[u32], all: bool) -> Result<Vec<Vec<f32>>> {
        let vocab = self.model.config.vocab_size;
        let want = if all { LogitsFor::All } else { LogitsFor::Last };
        let mut out = Vec::new();
        let chunks: Vec<&[u32]> = tokens.chunks(self.ws.batch()).collect();
        for (i, chunk) in chunks.iter().enumerate() {
            let last_chunk = i + 1 == chunks.len();
            let want = if all || last_chunk { want } else { LogitsFor::Last };
            let rows = forward(&self.model, &self.pool, &mut self.ws, &mut self.cache, chunk, want)?;
            if all || last_chunk {
                out.extend((0..rows).map(|r| self.ws.logits(r, vocab).to_vec()));
            }
        }
        Ok(out)
    }

    /// Forgets the cached sequence.
    pub fn reset(&mut self) {
        self.cache.clear();
    }

    /// Runs the prompt (chunked) and leaves the last position's logits in the workspace;
    /// false when `cancel` fired first (asked before each chunk, so a cancelled run
    /// ends within one chunk instead of after the whole prompt).
    fn prefill(&mut self, prompt: &[u32], cancel: Cancel<'_>) -> Result<bool> {
        for chunk in prompt.chunks(self.ws.batch()) {
            if cancel.requested() {
                return Ok(false);
            }
            forward(&self.model, &self.pool, &mut self.ws, &mut self.cache, chunk, LogitsFor::Last)?;
        }
        Ok(true)
    }
}

impl Runtime for FastRuntime {
    fn config(&self) -> &ModelConfig {
        &self.model.config
    }

    fn backend(&self) -> BackendInfo {
        let detail = format!("{} · {} threads · {}", cpu_name(), self.threads(), self.isa().name());
        BackendInfo { kind: "cpu".into(), devices: vec![detail] }
    }

    fn generate(&mut self, job: &DecodeJob<'_>, on_token: &mut dyn FnMut(&Sampled) -> Flow) -> Result<RunEnd> {
        check_fits(&self.model.config, job.prompt.len(), job.max_tokens)?;
        let vocab = self.model.config.vocab_size;
        self.cache.clear();
        self.cache.reserve(job.prompt.len() + job.max_tokens);
        if !self.prefill(job.prompt, job.cancel)? {
            return Ok(RunEnd::Stopped);
        }
        let mut seen = job.prompt.to_vec();
        for step in 0..job.max_tokens {
            let s = sample(self.ws.logits(0, vocab), job.sampling, &seen, step as u64, job.top_logprobs);
            if job.stop_tokens.contains(&s.id) {
                return Ok(RunEnd::StopToken);
            }
            if on_token(&s) == Flow::Stop {
                return Ok(RunEnd::Stopped);
            }
            seen.push(s.id);
            if step + 1 < job.max_tokens {
                forward(&self.model, &self.pool, &mut self.ws, &mut self.cache, &[s.id], LogitsFor::Last)?;
            }
        }
        Ok(RunEnd::Length)
    }

    fn score(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        check_fits(&self.model.config, tokens.len(), 0)?;
        self.cache.clear();
        self.cache.reserve(tokens.len());
        self.forward(tokens, true)
    }
}
