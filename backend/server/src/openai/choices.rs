//! `n` > 1: one engine request per choice (seeds `seed`, `seed + 1`, …, so each choice
//! is what a single request with that seed gives; with a batch they run side by side),
//! and the whole answers merged into one object with `choices[i].index = i` (streamed:
//! stream.rs's `sse_choices`).

use peregrine_engine::Request;
use serde_json::{json, Value};

use crate::app::AppState;
use crate::engine_slot::LoadedEngine;
use crate::error::{Error, Result};
use crate::jobs::{self, Job, JobSpec};

/// Most choices one request may ask for.
pub const MAX_CHOICES: u32 = 8;

/// The number of choices, checked.
pub fn count(n: Option<u32>) -> Result<usize> {
    let n = n.unwrap_or(1);
    if !(1..=MAX_CHOICES).contains(&n) {
        return Err(Error::bad("n", format!("n must be between 1 and {MAX_CHOICES}")));
    }
    Ok(n as usize)
}

/// Submits `n` copies of `request`, choice `i` with seed `seed + i`; all or none.
pub fn submit_all(
    state: &AppState,
    engine: &LoadedEngine,
    request: Request,
    n: usize,
    spec: (&'static str, crate::request_context::Caller),
) -> Result<Vec<Job>> {
    (0..n)
        .map(|i| {
            let mut r = request.clone();
            r.sampling.seed = r.sampling.seed.wrapping_add(i as u64);
            jobs::submit(state, &engine.handle, JobSpec { request: r, endpoint: spec.0, caller: spec.1.clone(), ticker: false })
        })
        .collect()
}

/// Waits for every choice's whole answer (`collect` builds one from its job) and
/// merges them.
pub async fn collect_merged<F, Fut>(jobs: Vec<Job>, collect: F) -> Result<Value>
where
    F: FnMut(Job) -> Fut,
    Fut: std::future::Future<Output = Result<Value>>,
{
    let answers = futures_util::future::join_all(jobs.into_iter().map(collect)).await.into_iter().collect::<Result<Vec<_>>>()?;
    Ok(merge(answers))
}

/// Whole answers of the same request, one per choice, as one: their first choices in
/// order, usage with the prompt counted once and the completions summed.
pub fn merge(mut answers: Vec<Value>) -> Value {
    let mut out = answers.remove(0);
    let mut completion = out["usage"]["completion_tokens"].as_u64().unwrap_or(0);
    let mut choices = vec![out["choices"][0].clone()];
    for a in answers {
        completion += a["usage"]["completion_tokens"].as_u64().unwrap_or(0);
        choices.push(a["choices"][0].clone());
    }
    for (i, c) in choices.iter_mut().enumerate() {
        c["index"] = json!(i);
    }
    out["choices"] = Value::Array(choices);
    let prompt = out["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
    out["usage"]["completion_tokens"] = json!(completion);
    out["usage"]["total_tokens"] = json!(prompt + completion);
    out
}
