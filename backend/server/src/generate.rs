//! `peregrine generate`: one prompt through the engine, text streamed to stdout and
//! timings to stderr (or one JSON object with `--json`).

use std::io::Write;

use peregrine_engine::ChatMessage;
use peregrine_engine::EngineHandle;
use peregrine_engine::SamplingParams;
use peregrine_engine::{Event, Prompt, Request};
use serde::Serialize;

use crate::cli::GenerateArgs;
use crate::engine_start::start_engine;
use crate::error::{Error, Result};

/// What `--json` prints.
#[derive(Serialize)]
struct JsonOutput {
    token_ids: Vec<u32>,
    text: String,
    finish_reason: peregrine_api::FinishReason,
    usage: peregrine_api::Usage,
    timings: peregrine_api::Timings,
}

/// Runs the subcommand.
pub async fn run(args: GenerateArgs) -> Result<()> {
    let engine: EngineHandle = start_engine(&args.model, 1).await?;
    let prompt = if args.chat {
        Prompt::Chat(vec![ChatMessage { role: "user".into(), content: args.prompt.clone() }])
    } else {
        Prompt::Text(args.prompt.clone())
    };
    let request = Request {
        max_tokens: args.max_tokens,
        sampling: SamplingParams {
            temperature: args.temperature,
            top_k: args.top_k,
            top_p: args.top_p,
            min_p: args.min_p,
            repetition_penalty: args.repetition_penalty,
            seed: args.seed,
            ..SamplingParams::default()
        },
        stop: args.stop.clone(),
        ignore_eos: args.ignore_eos,
        ..Request::new(prompt)
    };
    let mut submission = engine.submit(request)?;
    let (mut ids, mut text) = (Vec::new(), String::new());
    let mut stdout = std::io::stdout();
    while let Some(event) = submission.events.recv().await {
        match event {
            Event::Token { id, text: piece, .. } => {
                ids.push(id);
                text.push_str(&piece);
                if !args.json {
                    let _ = stdout.write_all(piece.as_bytes()).and_then(|_| stdout.flush());
                }
            }
            Event::Text(piece) => {
                text.push_str(&piece);
                if !args.json {
                    let _ = stdout.write_all(piece.as_bytes());
                }
            }
            Event::Done { finish_reason, usage, timings } => {
                if args.json {
                    let out = JsonOutput { token_ids: ids, text, finish_reason, usage, timings };
                    println!("{}", serde_json::to_string(&out).unwrap_or_default());
                } else {
                    println!();
                    eprintln!(
                        "[{finish_reason:?}] prompt {} tokens in {:.1} ms ({:.1} tok/s) · generated {} tokens · decode {:.1} tok/s · TTFT {:.1} ms",
                        timings.prompt_n, timings.prompt_ms, timings.prompt_per_second, timings.predicted_n, timings.predicted_per_second, timings.ttft_ms
                    );
                }
                return Ok(());
            }
            Event::Error { message, .. } => return Err(Error::Request(message)),
            Event::Queued { .. } | Event::Started { .. } | Event::PromptLogprobs(_) | Event::Stats(_) => {}
        }
    }
    Err(Error::Request("the engine stopped without finishing the request".into()))
}
