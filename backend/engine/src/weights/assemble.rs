//! Builds [`Weights`] from any tensor source, checking that every tensor the
//! config requires is there with the shape the config implies.

use super::roles::{LayerRole, WeightRole};
use super::{LayerWeights, Weights};
use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

impl Weights {
    /// Fetches each weight `config` needs (biases only with `attention_bias`, the
    /// LM head only when untied) and checks its shape. `fetch` returns
    /// [`Error::MissingTensor`] for absent tensors; `progress(done, total)` is
    /// called after each layer. `path` names the source in errors.
    pub fn assemble(
        config: &ModelConfig,
        path: &str,
        mut fetch: impl FnMut(WeightRole) -> Result<Tensor>,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<Weights> {
        let mut get = |role: WeightRole| -> Result<Tensor> {
            let t = fetch(role)?;
            check_shape(config, path, role, &t)?;
            Ok(t)
        };
        let embed = get(WeightRole::Embed)?;
        let mut layers = Vec::with_capacity(config.num_layers);
        for i in 0..config.num_layers {
            let mut l = |role| get(WeightRole::Layer(i, role));
            let (q, k, v) = (l(LayerRole::Q)?, l(LayerRole::K)?, l(LayerRole::V)?);
            let (q_bias, k_bias, v_bias) = if config.attention_bias {
                (Some(l(LayerRole::QBias)?), Some(l(LayerRole::KBias)?), Some(l(LayerRole::VBias)?))
            } else {
                (None, None, None)
            };
            layers.push(LayerWeights {
                attn_norm: l(LayerRole::AttnNorm)?,
                q,
                k,
                v,
                q_bias,
                k_bias,
                v_bias,
                o: l(LayerRole::O)?,
                ffn_norm: l(LayerRole::FfnNorm)?,
                gate: l(LayerRole::Gate)?,
                up: l(LayerRole::Up)?,
                down: l(LayerRole::Down)?,
            });
            progress(i + 1, config.num_layers);
        }
        let final_norm = get(WeightRole::FinalNorm)?;
        let lm_head = if config.tie_embeddings { None } else { Some(get(WeightRole::LmHead)?) };
        Ok(Weights { embed, layers, final_norm, lm_head })
    }

    /// Checks every tensor's presence and shape against `config`.
    #[cfg(feature = "lab")]
    pub fn check(&self, config: &ModelConfig, path: &str) -> Result<()> {
        if self.layers.len() != config.num_layers {
            return Err(Error::BadConfig {
                path: path.to_string(),
                reason: format!("{} layers of weights for a {}-layer config", self.layers.len(), config.num_layers),
            });
        }
        if self.lm_head.is_none() != config.tie_embeddings {
            return Err(Error::BadConfig { path: path.to_string(), reason: "LM head presence disagrees with tie_embeddings".into() });
        }
        let mut all: Vec<(WeightRole, &Tensor)> = vec![(WeightRole::Embed, &self.embed), (WeightRole::FinalNorm, &self.final_norm)];
        all.extend(self.lm_head.iter().map(|t| (WeightRole::LmHead, t)));
        for (i, l) in self.layers.iter().enumerate() {
            for role in LayerRole::ALL {
                match (l.get(role), role.is_bias() && !config.attention_bias) {
                    (Some(t), false) => all.push((WeightRole::Layer(i, role), t)),
                    (None, true) => {}
                    (t, _) => {
                        let state = if t.is_some() { "unexpected" } else { "missing" };
                        return Err(Error::BadConfig { path: path.to_string(), reason: format!("layer {i}: {state} {role:?}") });
                    }
                }
            }
        }
        all.into_iter().try_for_each(|(role, t)| check_shape(config, path, role, t))
    }
}

impl LayerWeights {
    /// The tensor playing `role`, if this layer has one.
    #[cfg(feature = "lab")]
    pub fn get(&self, role: LayerRole) -> Option<&Tensor> {
        Some(match role {
            LayerRole::AttnNorm => &self.attn_norm,
            LayerRole::Q => &self.q,
            LayerRole::K => &self.k,
            LayerRole::V => &self.v,
            LayerRole::QBias => return self.q_bias.as_ref(),
            LayerRole::KBias => return self.k_bias.as_ref(),
            LayerRole::VBias => return self.v_bias.as_ref(),
            LayerRole::O => &self.o,
            LayerRole::FfnNorm => &self.ffn_norm,
            LayerRole::Gate => &self.gate,
            LayerRole::Up => &self.up,
            LayerRole::Down => &self.down,
        })
    }
}

fn check_shape(config: &ModelConfig, path: &str, role: WeightRole, t: &Tensor) -> Result<()> {
    let expected = role.expected_shape(config);
    if t.shape != expected {
        return Err(Error::ShapeMismatch { path: path.to_string(), tensor: t.name.clone(), expected, found: t.shape.clone() });
    }
    Ok(())
}
