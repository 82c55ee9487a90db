//! The rules a request must meet, defined once: sampling ranges, the
//! top-log-probability count, token ids inside the vocabulary, a non-empty prompt that
//! fits the context with its generation budget. The engine checks them when a request
//! is submitted (handle.rs, so a bad one never waits in the queue) and again when its
//! thread takes it (generator.rs, once text prompts are tokenized); runtimes called
//! directly (benchmarks, tests) guard their entry points with [`check_fits`] too, so bad input stays an error there; their other
//! checks are capacities of their own buffers (a KV cache shorter than the context).

use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::sampling::{SamplingParams, MAX_TOP_LOGPROBS};

/// Checks a request whose prompt is already `prompt` ids against `config`.
pub fn admit(config: &ModelConfig, prompt: &[u32], max_tokens: usize, sampling: &SamplingParams, top_logprobs: usize) -> Result<()> {
    admit_sampling(sampling, top_logprobs)?;
    let vocab = config.vocab_size;
    if let Some(bad) = prompt.iter().find(|&&id| id as usize >= vocab) {
        return Err(Error::InvalidRequest(format!("token id {bad} is outside the vocabulary ({vocab})")));
    }
    check_fits(config, prompt.len(), max_tokens)
}

/// The rules that need no prompt: sampling ranges and the top-log-probability count.
pub fn admit_sampling(sampling: &SamplingParams, top_logprobs: usize) -> Result<()> {
    sampling.validate()?;
    if top_logprobs > MAX_TOP_LOGPROBS {
        return Err(Error::InvalidRequest(format!("top_logprobs must be at most {MAX_TOP_LOGPROBS}")));
    }
    Ok(())
}

/// Prompt + max_tokens must fit the context; an empty prompt has nothing to condition on.
pub fn check_fits(config: &ModelConfig, prompt: usize, max_tokens: usize) -> Result<()> {
    if prompt == 0 {
        return Err(Error::InvalidRequest("the prompt is empty (no tokens)".into()));
    }
    if prompt + max_tokens > config.max_context {
        return Err(Error::ContextOverflow { prompt, max_tokens, context: config.max_context });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rule_has_its_own_message() {
        let config = crate::lab::synthetic::preset("smollm2-135m").expect("preset");
        let ok = SamplingParams::default();
        assert!(admit(&config, &[1, 2], 8, &ok, 0).is_ok());
        let err = |r: Result<()>| r.expect_err("refused").to_string();
        assert!(err(admit(&config, &[], 8, &ok, 0)).contains("empty"));
        assert!(err(admit(&config, &[49_152], 8, &ok, 0)).contains("outside the vocabulary"));
        assert!(err(admit(&config, &[1], 8, &ok, MAX_TOP_LOGPROBS + 1)).contains("top_logprobs"));
        assert!(matches!(admit(&config, &[1], config.max_context, &ok, 0), Err(Error::ContextOverflow { .. })));
        let bad = SamplingParams { temperature: -1.0, ..ok };
        assert!(admit(&config, &[1], 8, &bad, 0).is_err());
        assert!(check_fits(&config, 1, 0).is_ok() && check_fits(&config, 0, 1).is_err());
    }
}
