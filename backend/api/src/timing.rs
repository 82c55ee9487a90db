//! Speed and usage figures, defined once for the engine, the server and the page.
//!
//! Definitions (every runtime measures the same way):
//! - time to first token (TTFT): from the engine starting the request (after any
//!   queue wait) to the first generated token being visible to the host;
//! - decode tokens/s: (n − 1) / (t_last − t_first) over the n generated tokens
//!   (undefined below two tokens);
//! - prompt figures: prompt tokens over the time until the first token.

use serde::{Deserialize, Serialize};

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A stop token or stop string ended it.
    Stop,
    /// max_tokens (or the context) was reached.
    Length,
    /// The client went away or asked to stop.
    Cancelled,
}

/// Token counts of a finished request (OpenAI's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Usage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub total_tokens: u32,
    /// How much of the prompt came from the cache of an earlier request.
    #[serde(default)]
    pub prompt_tokens_details: PromptTokensDetails,
}

/// OpenAI's `usage.prompt_tokens_details`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct PromptTokensDetails {
    /// Prompt tokens whose keys and values were reused, not computed again.
    pub cached_tokens: u32,
}

/// Live figures sent while a request streams.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Stats {
    /// Tokens generated so far.
    pub tokens: u32,
    /// Time to first token in ms, once there is one.
    pub ttft_ms: Option<f64>,
    /// Decode tokens/s so far (needs two tokens).
    pub decode_tok_per_s: Option<f64>,
    /// Since the engine started the request, in ms.
    pub elapsed_ms: f64,
    /// Tokens per pass over the weights so far: above 1 where speculative decoding's
    /// drafts are accepted.
    #[serde(default)]
    pub tokens_per_step: Option<f64>,
}

/// Final timings, with llama.cpp's field names plus TTFT.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Timings {
    /// Prompt tokens read by this request (the cached ones not counted, as llama.cpp).
    pub prompt_n: u32,
    /// Prompt tokens reused from an earlier request's cache.
    #[serde(default)]
    pub cache_n: u32,
    pub prompt_ms: f64,
    pub prompt_per_second: f64,
    pub predicted_n: u32,
    pub predicted_ms: f64,
    pub predicted_per_second: f64,
    pub ttft_ms: f64,
    /// Tokens drafted by speculative decoding and verified (llama.cpp's name).
    #[serde(default)]
    pub draft_n: u32,
    /// Drafted tokens the model accepted (llama.cpp's name).
    #[serde(default)]
    pub draft_n_accepted: u32,
}

/// Clock readings of one request, in ms since the engine started it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TokenClock {
    pub first_ms: Option<f64>,
    pub last_ms: Option<f64>,
    pub tokens: u32,
    /// Passes over the weights that produced the tokens (an accepted draft shares its
    /// predecessor's pass).
    pub steps: u32,
}

impl TokenClock {
    /// Records one generated token seen at `at_ms`; `accepted_draft`: it came out of
    /// the same pass as the token before it.
    pub fn tick(&mut self, at_ms: f64, accepted_draft: bool) {
        self.first_ms.get_or_insert(at_ms);
        self.last_ms = Some(at_ms);
        self.tokens += 1;
        self.steps += u32::from(!accepted_draft || self.steps == 0);
    }

    /// Tokens per pass over the weights; `None` before the first token.
    pub fn tokens_per_step(&self) -> Option<f64> {
        (self.steps > 0).then(|| self.tokens as f64 / self.steps as f64)
    }

    /// Decode tokens/s by the shared definition; `None` below two tokens.
    pub fn decode_tok_per_s(&self) -> Option<f64> {
        match (self.first_ms, self.last_ms) {
            (Some(f), Some(l)) if self.tokens >= 2 && l > f => Some((self.tokens - 1) as f64 * 1000.0 / (l - f)),
            _ => None,
        }
    }

    /// Live stats at `now_ms`.
    pub fn stats(&self, now_ms: f64) -> Stats {
        Stats {
            tokens: self.tokens,
            ttft_ms: self.first_ms,
            decode_tok_per_s: self.decode_tok_per_s(),
            elapsed_ms: now_ms,
            tokens_per_step: self.tokens_per_step(),
        }
    }

    /// Final timings for a prompt of `prompt_n` tokens read (besides any cached ones).
    pub fn timings(&self, prompt_n: u32) -> Timings {
        let ttft = self.first_ms.unwrap_or(0.0);
        let predicted_ms = match (self.first_ms, self.last_ms) {
            (Some(f), Some(l)) => l - f,
            _ => 0.0,
        };
        Timings {
            prompt_n,
            prompt_ms: ttft,
            prompt_per_second: if ttft > 0.0 { prompt_n as f64 * 1000.0 / ttft } else { 0.0 },
            predicted_n: self.tokens,
            predicted_ms,
            predicted_per_second: self.decode_tok_per_s().unwrap_or(0.0),
            ttft_ms: ttft,
            cache_n: 0,
            draft_n: 0,
            draft_n_accepted: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_rate_uses_n_minus_one_intervals() {
        let mut c = TokenClock::default();
        assert_eq!(c.decode_tok_per_s(), None);
        c.tick(100.0, false);
        assert_eq!(c.decode_tok_per_s(), None);
        c.tick(110.0, false);
        c.tick(120.0, false);
        assert_eq!(c.decode_tok_per_s(), Some(100.0));
        let t = c.timings(50);
        assert_eq!((t.ttft_ms, t.predicted_n, t.predicted_ms), (100.0, 3, 20.0));
        assert_eq!(t.prompt_per_second, 500.0);
    }

    #[test]
    fn accepted_drafts_share_their_predecessors_step() {
        let mut c = TokenClock::default();
        assert_eq!(c.tokens_per_step(), None);
        // One plain step, then a step that emitted two accepted drafts and its own token.
        for (ms, draft) in [(10.0, false), (20.0, false), (20.0, true), (20.0, true), (30.0, false)] {
            c.tick(ms, draft);
        }
        assert_eq!((c.tokens, c.steps), (5, 3));
        assert_eq!(c.stats(30.0).tokens_per_step, Some(5.0 / 3.0));
    }
}
