//! [`Runtime`] over the float32 reference forward pass.

use crate::admission::check_fits;
use crate::config::ModelConfig;
use crate::cpu::reference::{KvCache, ReferenceModel};
use crate::error::Result;
use crate::runtime::{cpu_name, BackendInfo, DecodeJob, Flow, RunEnd, Runtime};
use crate::sampling::{sample, Sampled};
use crate::weights::Weights;

/// The reference model plus its KV cache, sized to the model's context.
pub struct ReferenceRuntime {
    model: ReferenceModel,
    cache: KvCache,
}

impl ReferenceRuntime {
    /// Dequantizes the weights and allocates the cache lazily up to the context.
    pub fn new(config: &ModelConfig, weights: &Weights) -> Result<ReferenceRuntime> {
        let model = ReferenceModel::new(config, weights)?;
        let cache = KvCache::new(config, config.max_context);
        Ok(ReferenceRuntime { model, cache })
    }

    /// The model, for tests that bisect by layer.
    pub fn model_mut(&mut self) -> &mut ReferenceModel {
        &mut self.model
    }
}

impl Runtime for ReferenceRuntime {
    fn config(&self) -> &ModelConfig {
        &self.model.config
    }

    fn backend(&self) -> BackendInfo {
        BackendInfo { kind: "cpu".into(), devices: vec![cpu_name()] }
    }

    fn generate(&mut self, job: &DecodeJob<'_>, on_token: &mut dyn FnMut(&Sampled) -> Flow) -> Result<RunEnd> {
        check_fits(&self.model.config, job.prompt.len(), job.max_tokens)?;
        self.cache.clear();
        // Token by token (the reference pass has no batch anyway), so a cancel lands
        // between two prompt tokens.
        let mut logits = Vec::new();
        for &t in job.prompt {
            if job.cancel.requested() {
                return Ok(RunEnd::Stopped);
            }
            logits = self.model.forward(&mut self.cache, &[t], false)?.pop().unwrap_or_default();
        }
        let mut seen = job.prompt.to_vec();
        for step in 0..job.max_tokens {
            let s = sample(&logits, job.sampling, &seen, step as u64, job.top_logprobs);
            if job.stop_tokens.contains(&s.id) {
                return Ok(RunEnd::StopToken);
            }
            if on_token(&s) == Flow::Stop {
                return Ok(RunEnd::Stopped);
            }
            seen.push(s.id);
            if step + 1 < job.max_tokens {
                logits = self.model.forward(&mut self.cache, &[s.id], false)?.pop().unwrap_or_default();
            }
        }
        Ok(RunEnd::Length)
    }

    fn score(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        check_fits(&self.model.config, tokens.len(), 0)?;
        self.cache.clear();
        self.model.forward(&mut self.cache, tokens, true)
    }
}
