//! Engine events as the OpenAI routes see them: text pieces with their token's
//! log-probability (token texts resolved), the scored prompt, and the end.

use peregrine_api::{FinishReason, Timings, Usage};
use peregrine_engine::Event;
use peregrine_engine::Sampled;
use peregrine_engine::TextModel;

use crate::error::Error;
use crate::jobs::Job;

/// One token with its log-probability and the best alternatives.
#[derive(Debug, Clone)]
pub struct TokenLp {
    pub id: u32,
    pub token: String,
    /// `None` for the first prompt token (nothing conditions it).
    pub logprob: Option<f32>,
    pub top: Vec<(String, f32)>,
    /// The ids of `top`, in its order (llama.cpp's probabilities carry them).
    pub top_ids: Vec<u32>,
}

/// What the OpenAI renderers react to.
#[derive(Debug)]
pub enum Step {
    /// The engine took the request.
    Started,
    /// The prompt's tokens, scored (echo + logprobs).
    Prompt(Vec<TokenLp>),
    /// Output text; `token` is set when log-probabilities were asked for.
    Text { text: String, token: Option<TokenLp> },
    /// Finished (terminal).
    Done { reason: FinishReason, usage: Usage, timings: Timings },
    /// Failed (terminal).
    Failed(Error),
}

fn token_lp(text: &TextModel, s: &Sampled) -> TokenLp {
    TokenLp {
        id: s.id,
        token: text.token_str(s.id),
        logprob: Some(s.logprob),
        top: s.top.iter().map(|t| (text.token_str(t.id), t.logprob)).collect(),
        top_ids: s.top.iter().map(|t| t.id).collect(),
    }
}

/// Reads a job as steps.
pub struct Steps {
    pub job: Job,
    pub text: std::sync::Arc<TextModel>,
    /// Attach log-probabilities to text steps.
    pub logprobs: bool,
}

impl Steps {
    /// The next step; `None` after a terminal one.
    pub async fn next(&mut self) -> Option<Step> {
        loop {
            let step = match self.job.next().await? {
                Event::Started { .. } => Step::Started,
                Event::PromptLogprobs(tokens) => Step::Prompt(
                    tokens
                        .iter()
                        .map(|t| match &t.scored {
                            Some(s) => TokenLp { token: self.text.token_str(t.id), ..token_lp(&self.text, s) },
                            None => {
                                TokenLp { id: t.id, token: self.text.token_str(t.id), logprob: None, top: Vec::new(), top_ids: Vec::new() }
                            }
                        })
                        .collect(),
                ),
                Event::Token { text, sampled, .. } if self.logprobs => Step::Text { text, token: Some(token_lp(&self.text, &sampled)) },
                Event::Token { text, .. } if !text.is_empty() => Step::Text { text, token: None },
                Event::Text(text) if !text.is_empty() => Step::Text { text, token: None },
                Event::Done { finish_reason, usage, timings } => Step::Done { reason: finish_reason, usage, timings },
                Event::Error { code, message } => Step::Failed(Error::from_event(code, message)),
                Event::Token { .. } | Event::Text(_) | Event::Queued { .. } | Event::Stats(_) => continue,
            };
            return Some(step);
        }
    }
}

/// A whole answer, for the non-streamed routes.
pub struct Finished {
    /// All output text.
    pub text: String,
    /// The scored prompt tokens (echo + logprobs).
    pub prompt: Vec<TokenLp>,
    /// The generated tokens (with logprobs).
    pub output: Vec<TokenLp>,
    pub reason: FinishReason,
    pub usage: Usage,
    pub timings: Timings,
}

impl Steps {
    /// Waits for the end and gathers everything the steps carried.
    pub async fn finish(mut self) -> Result<Finished, Error> {
        let (mut text, mut prompt, mut output) = (String::new(), Vec::new(), Vec::new());
        while let Some(step) = self.next().await {
            match step {
                Step::Started => {}
                Step::Prompt(p) => prompt.extend(p),
                Step::Text { text: t, token } => {
                    text.push_str(&t);
                    output.extend(token);
                }
                Step::Failed(e) => return Err(e),
                Step::Done { reason, usage, timings } => return Ok(Finished { text, prompt, output, reason, usage, timings }),
            }
        }
        Err(Error::Internal("the request ended without a result".into()))
    }
}

/// OpenAI's `finish_reason` string, always one of OpenAI's values: a request the
/// server cut short (its time limit, shutdown) reads as `length`, an answer ended
/// before its natural stop; a request its client cancelled has nobody to answer.
pub fn finish_reason(r: FinishReason) -> &'static str {
    match r {
        FinishReason::Stop => "stop",
        FinishReason::Length | FinishReason::Cancelled => "length",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finish_reasons_are_openai_values() {
        for r in [FinishReason::Stop, FinishReason::Length, FinishReason::Cancelled] {
            assert!(["stop", "length", "content_filter", "tool_calls"].contains(&finish_reason(r)), "{r:?}");
        }
    }
}
