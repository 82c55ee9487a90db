//! [`Runtime`] over the float32 reference forward pass (a Laneformer of several lanes
//! over the lane reference, `dtp::reference`, every lane computed).

use crate::admission::check_fits;
use crate::config::ModelConfig;
use crate::cpu::reference::{KvCache, ReferenceModel};
use crate::dtp::reference::{Execution, ShardedModel};
use crate::dtp::DtpSchedule;
use crate::error::Result;
use crate::runtime::{cpu_name, decode_steps, BackendInfo, DecodeJob, Flow, RunEnd, Runtime};
use crate::sampling::Sampled;
use crate::weights::Weights;

/// One residual stream, or a Laneformer's lanes.
enum Model {
    Plain { model: ReferenceModel, cache: KvCache },
    Lanes { model: ShardedModel, schedule: DtpSchedule },
}

/// The reference model plus its KV cache, sized to the model's context.
pub struct ReferenceRuntime {
    config: ModelConfig,
    model: Model,
}

impl ReferenceRuntime {
    /// Dequantizes the weights and allocates the cache lazily up to the context.
    pub fn new(config: &ModelConfig, weights: &Weights) -> Result<ReferenceRuntime> {
        let model = if config.lanes.count > 1 {
            Model::Lanes { model: ShardedModel::new(config, weights, config.lanes.count)?, schedule: DtpSchedule::of_laneformer(config)? }
        } else {
            Model::Plain { model: ReferenceModel::new(config, weights)?, cache: KvCache::new(config, config.max_context) }
        };
        Ok(ReferenceRuntime { config: config.clone(), model })
    }

    /// Runs `f` with a fresh sequence's one-token step (the logits of each next token).
    fn with_steps<T>(&mut self, f: impl FnOnce(&mut dyn FnMut(u32) -> Result<Vec<f32>>) -> Result<T>) -> Result<T> {
        match &mut self.model {
            Model::Plain { model, cache } => {
                cache.clear();
                f(&mut |t| Ok(model.forward(cache, &[t], false)?.pop().unwrap_or_default()))
            }
            Model::Lanes { model, schedule } => {
                let mut session = model.session(Execution::Delayed(schedule.clone()))?;
                f(&mut |t| session.step(t))
            }
        }
    }
}

impl Runtime for ReferenceRuntime {
    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn backend(&self) -> BackendInfo {
        BackendInfo { kind: "cpu".into(), devices: vec![cpu_name()] }
    }

    fn generate(&mut self, job: &DecodeJob<'_>, on_token: &mut dyn FnMut(&Sampled) -> Flow) -> Result<RunEnd> {
        check_fits(&self.config, job.prompt.len(), job.max_tokens)?;
        self.with_steps(|step| {
            // Token by token (the reference pass has no batch anyway), so a cancel lands
            // between two prompt tokens.
            let mut logits = Vec::new();
            for &t in job.prompt {
                if job.cancel.requested() {
                    return Ok(RunEnd::Stopped);
                }
                logits = step(t)?;
            }
            decode_steps(&mut logits, job, on_token, |l| l.as_slice(), |l, id| Ok(*l = step(id)?))
        })
    }

    fn score(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        check_fits(&self.config, tokens.len(), 0)?;
        self.with_steps(|step| tokens.iter().map(|&t| step(t)).collect())
    }
}
