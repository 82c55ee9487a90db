//! Request fields shared by completions and chat, their validation (every bad value
//! is a 400 naming the field) and their translation into engine sampling settings.

use peregrine_engine::sampling_limits::{MAX_LOGIT_BIAS, MAX_PENALTY};
use peregrine_engine::{Prompt, Request, SamplingParams, MAX_TOP_LOGPROBS};
use serde::Deserialize;
use serde_json::Value;

use crate::engine_slot::LoadedEngine;
use crate::error::{Error, Result};
use crate::routes::generate::check_stops;

/// OpenAI's default temperature.
pub const DEFAULT_TEMPERATURE: f32 = 1.0;
/// Largest temperature OpenAI accepts.
pub const MAX_TEMPERATURE: f32 = 2.0;

/// Fields both endpoints take.
#[derive(Debug, Default, Deserialize)]
pub struct CommonParams {
    pub model: Option<String>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    /// llama.cpp extension (0 = no limit).
    pub top_k: Option<u32>,
    /// llama.cpp extension.
    pub min_p: Option<f32>,
    #[serde(alias = "repeat_penalty")]
    pub repetition_penalty: Option<f32>,
    /// Any JSON integer (negative seeds are reinterpreted as u64).
    pub seed: Option<Value>,
    /// A string or an array of strings.
    pub stop: Option<Value>,
    pub ignore_eos: Option<bool>,
    /// llama.cpp extension: reuse the cached prefix of an earlier request (default true).
    pub cache_prompt: Option<bool>,
    pub n: Option<u32>,
    pub stream: Option<bool>,
    /// `{include_usage}`; read as a value so that a wrong one is a 400 naming it (a
    /// flattened struct loses the path of its nested errors).
    pub stream_options: Option<Value>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    /// OpenAI's `{"id": bias}` or llama.cpp's `[[id, bias], …]` (`false`: never).
    pub logit_bias: Option<Value>,
    /// llama.cpp's GBNF grammar (`structured::grammar`).
    pub grammar: Option<Value>,
    /// llama.cpp's JSON schema for the output.
    pub json_schema: Option<Value>,
    #[serde(flatten)]
    pub speculative: peregrine_api::speculative::SpeculativeParams,
}

impl CommonParams {
    /// 404 unless `model` is absent or names the loaded model; 400 for a
    /// `stream_options` other than `{include_usage: bool}`.
    pub fn check_model(&self, engine: &LoadedEngine) -> Result<()> {
        match &self.stream_options {
            None | Some(Value::Null) => {}
            Some(Value::Object(o)) if o.iter().all(|(k, v)| k == "include_usage" && (v.is_boolean() || v.is_null())) => {}
            Some(_) => return Err(Error::bad("stream_options", "stream_options takes only include_usage (true or false)")),
        }
        engine.check_model(self.model.as_deref())
    }

    /// The engine request for prompt `ids`, with this body's EOS, prompt-cache and
    /// speculative choices (`sampling` and `stop` from [`Self::sampling`] and
    /// [`Self::stops`], checked first); a speculative setting `engine` cannot run is a 400.
    pub fn request(
        &self,
        engine: &LoadedEngine,
        ids: Vec<u32>,
        max_tokens: usize,
        sampling: SamplingParams,
        stop: Vec<String>,
    ) -> Result<Request> {
        Ok(Request {
            max_tokens,
            sampling,
            stop,
            ignore_eos: self.ignore_eos.unwrap_or(false),
            cache_prompt: self.cache_prompt.unwrap_or(true),
            speculative: crate::speculative::engine_request(&self.speculative, engine.handle.verify_capacity())?,
            ..Request::new(Prompt::Tokens(ids))
        })
    }

    /// The grammar `grammar` or `json_schema` asks for, with `others` the route's own
    /// structured-output fields; at most one of them.
    pub fn structured(&self, others: Vec<Option<crate::structured::Asked>>) -> Result<Option<crate::structured::Asked>> {
        let mut asked = vec![crate::structured::grammar(self.grammar.as_ref())?, crate::structured::json_schema(self.json_schema.as_ref())?];
        asked.extend(others);
        crate::structured::one_of(asked)
    }

    /// Whether the answer streams.
    pub fn streaming(&self) -> bool {
        self.stream.unwrap_or(false)
    }

    /// `stream_options.include_usage`.
    pub fn include_usage(&self) -> bool {
        self.stream_options.as_ref().and_then(|o| o.get("include_usage")).and_then(Value::as_bool).unwrap_or(false)
    }

    /// The stop strings.
    pub fn stops(&self) -> Result<Vec<String>> {
        let stops = match &self.stop {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| v.as_str().map(str::to_string).ok_or_else(|| Error::bad("stop", "stop must be a string or an array of strings")))
                .collect::<Result<_>>()?,
            Some(_) => return Err(Error::bad("stop", "stop must be a string or an array of strings")),
        };
        check_stops(&stops)?;
        Ok(stops)
    }

    /// Sampling settings; every unsupported or out-of-range value is a 400.
    pub fn sampling(&self) -> Result<SamplingParams> {
        let mut penalties = [0.0f32; 2];
        for (slot, (name, v)) in
            penalties.iter_mut().zip([("presence_penalty", self.presence_penalty), ("frequency_penalty", self.frequency_penalty)])
        {
            let v = v.unwrap_or(0.0);
            if !(v.is_finite() && v.abs() <= MAX_PENALTY) {
                return Err(Error::bad(name, format!("{name} must be between -{MAX_PENALTY} and {MAX_PENALTY}")));
            }
            *slot = v;
        }
        let logit_bias = self.logit_bias()?;
        let temperature = self.temperature.unwrap_or(DEFAULT_TEMPERATURE);
        if !(temperature.is_finite() && (0.0..=MAX_TEMPERATURE).contains(&temperature)) {
            return Err(Error::bad("temperature", format!("temperature must be between 0 and {MAX_TEMPERATURE}")));
        }
        let top_p = self.top_p.unwrap_or(1.0);
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(Error::bad("top_p", "top_p must be greater than 0 and at most 1"));
        }
        let min_p = self.min_p.unwrap_or(0.0);
        if !(0.0..=1.0).contains(&min_p) {
            return Err(Error::bad("min_p", "min_p must be between 0 and 1"));
        }
        let repetition_penalty = self.repetition_penalty.unwrap_or(1.0);
        if !(repetition_penalty.is_finite() && repetition_penalty > 0.0) {
            return Err(Error::bad("repetition_penalty", "repetition_penalty must be a positive number"));
        }
        let seed = match &self.seed {
            None | Some(Value::Null) => crate::ids::random_seed(),
            Some(v) => v.as_u64().or_else(|| v.as_i64().map(|i| i as u64)).ok_or_else(|| Error::bad("seed", "seed must be an integer"))?,
        };
        Ok(SamplingParams {
            temperature,
            top_k: self.top_k.unwrap_or(0) as usize,
            top_p,
            min_p,
            repetition_penalty,
            seed,
            presence_penalty: penalties[0],
            frequency_penalty: penalties[1],
            logit_bias,
        })
    }

    /// `logit_bias`: token ids (as strings, OpenAI's JSON; or llama.cpp's `[id, bias]`
    /// pairs) to a bias in −100..100; llama.cpp's `false` bans a token (the lowest bias).
    fn logit_bias(&self) -> Result<Vec<(u32, f32)>> {
        let bad = |m: String| Error::bad("logit_bias", m);
        let pairs: Vec<(String, &Value)> = match &self.logit_bias {
            None | Some(Value::Null) => return Ok(Vec::new()),
            Some(Value::Object(map)) => map.iter().map(|(k, v)| (k.clone(), v)).collect(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|pair| match pair.as_array().map(Vec::as_slice) {
                    Some([id, bias]) => Ok((id.to_string(), bias)),
                    _ => Err(bad("logit_bias pairs are [token id, bias]".into())),
                })
                .collect::<Result<_>>()?,
            Some(_) => return Err(bad("logit_bias must be an object of token ids to biases".into())),
        };
        pairs
            .into_iter()
            .map(|(k, v)| {
                let id = k.trim().parse::<u32>().map_err(|_| bad(format!("logit_bias keys are token ids; `{k}` is not one")))?;
                let b = match v {
                    Value::Bool(false) => -MAX_LOGIT_BIAS,
                    v => v.as_f64().ok_or_else(|| bad(format!("logit_bias[{k}] must be a number")))? as f32,
                };
                if !(b.is_finite() && b.abs() <= MAX_LOGIT_BIAS) {
                    return Err(bad(format!("logit_bias[{k}] must be between -100 and 100")));
                }
                Ok((id, b))
            })
            .collect()
    }
}

/// The length limit of `max_tokens` or llama.cpp's `n_predict` (−1: none given, the
/// route's default), never both.
pub fn max_tokens_or_n_predict(max_tokens: Option<u32>, n_predict: Option<i64>) -> Result<Option<u32>> {
    match (max_tokens, n_predict) {
        (Some(_), Some(_)) => Err(Error::bad("n_predict", "give max_tokens or n_predict, not both")),
        (m, None) => Ok(m),
        (None, Some(-1)) => Ok(None),
        (None, Some(n)) => u32::try_from(n)
            .map(Some)
            .map_err(|_| Error::bad("n_predict", "n_predict must be -1 (the default length) or a number of tokens")),
    }
}

/// Checks a requested number of alternatives per token.
pub fn check_top_logprobs(param: &str, n: u32) -> Result<usize> {
    if n as usize > MAX_TOP_LOGPROBS {
        return Err(Error::bad(param, format!("{param} must be at most {MAX_TOP_LOGPROBS}")));
    }
    Ok(n as usize)
}
