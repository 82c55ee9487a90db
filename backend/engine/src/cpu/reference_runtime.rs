//! [`Runtime`] over the float32 reference forward pass (a Laneformer of several lanes
//! over the lane reference, `dtp::reference`, every lane computed).

use crate::admission::check_fits;
use crate::config::ModelConfig;
use crate::cpu::reference::{KvCache, ReferenceModel};
use crate::dtp::reference::{Execution, ShardedModel};
use crate::dtp::DtpSchedule;
use crate::error::Result;
use crate::runtime::{cpu_name, BackendInfo, DecodeJob, Flow, RunEnd, Runtime};
use crate::sampling::Sampled;
use crate::speculative::verify::decode_speculative;
use crate::speculative::{DraftCounts, VerifyCapacity};
use crate::weights::Weights;

/// One residual stream, or a Laneformer's lanes.
enum Model {
    Plain { model: ReferenceModel, cache: KvCache },
    Lanes { model: ShardedModel, schedule: DtpSchedule },
}

/// Rows of one sequence a reference step verifies (its token plus drafts).
pub const VERIFY_ROWS: usize = 8;

/// The reference model plus its KV cache, sized to the model's context.
pub struct ReferenceRuntime {
    config: ModelConfig,
    model: Model,
    /// The last run's draft counts.
    drafts: DraftCounts,
}

impl ReferenceRuntime {
    /// Dequantizes the weights and allocates the cache lazily up to the context.
    pub fn new(config: &ModelConfig, weights: &Weights) -> Result<ReferenceRuntime> {
        let model = if config.lanes.count > 1 {
            Model::Lanes { model: ShardedModel::new(config, weights, config.lanes.count)?, schedule: DtpSchedule::of_laneformer(config)? }
        } else {
            Model::Plain { model: ReferenceModel::new(config, weights)?, cache: KvCache::new(config, config.max_context) }
        };
        Ok(ReferenceRuntime { config: config.clone(), model, drafts: DraftCounts::default() })
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

    fn verify_capacity(&self) -> VerifyCapacity {
        match self.model {
            // Rows run one after another here: each costs a whole step, so drafting
            // never pays, but the runtime checks the rule the fast runtime follows.
            Model::Plain { .. } => VerifyCapacity { rows: VERIFY_ROWS, row_cost: 1.0 },
            Model::Lanes { .. } => VerifyCapacity::SINGLE,
        }
    }

    fn follows_grammars(&self) -> bool {
        // Every token goes through `decode_speculative`, which masks with the job's grammar.
        true
    }

    fn draft_counts(&self) -> DraftCounts {
        self.drafts
    }

    fn generate(&mut self, job: &DecodeJob<'_>, on_token: &mut dyn FnMut(&Sampled) -> Flow) -> Result<RunEnd> {
        check_fits(&self.config, job.prompt.len(), job.max_tokens)?;
        self.drafts = DraftCounts::default();
        let job = &DecodeJob { draft: job.draft.within(self.verify_capacity()), ..job.clone() };
        if let Model::Plain { model, cache } = &mut self.model {
            cache.clear();
            let mut rows = Vec::new();
            for &t in job.prompt {
                if job.cancel.requested() {
                    return Ok(RunEnd::Stopped);
                }
                rows = model.forward(cache, &[t], false)?;
            }
            let mut state = (model, cache, rows);
            let (end, counts) = decode_speculative(
                &mut state,
                job,
                on_token,
                |(_, _, rows), j| rows[j].as_slice(),
                |(model, cache, rows), tokens| {
                    *rows = model.forward(cache, tokens, true)?;
                    Ok(())
                },
                |(_, cache, _), n| cache.truncate(cache.filled() - n),
            )?;
            self.drafts = counts;
            return Ok(end);
        }
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
            // The lanes verify one row per step (`VerifyCapacity::SINGLE`): the plan drafts
            // nothing, so every step is one token and nothing is ever rolled back.
            let (end, _) = decode_speculative(
                &mut logits,
                job,
                on_token,
                |l, _| l.as_slice(),
                |l, tokens| {
                    for &t in tokens {
                        *l = step(t)?;
                    }
                    Ok(())
                },
                |_, _| unreachable!("a plan within VerifyCapacity::SINGLE drafts nothing"),
            )?;
            Ok(end)
        })
    }

    fn score(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        check_fits(&self.config, tokens.len(), 0)?;
        self.with_steps(|step| tokens.iter().map(|&t| step(t)).collect())
    }
}
