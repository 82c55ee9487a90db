//! The real engine on the default model over real HTTP: playground SSE framing and
//! stats, OpenAI completions and chat (streamed and not, usage, timings, logprobs,
//! token-id prompts, echo scoring), and cancellation on disconnect (the next request's
//! first token within 2 s, the running gauge back to 0; during a long prompt, far
//! sooner than its whole prefill). Tests share one engine and take turns on it.

mod common;

use std::time::{Duration, Instant};

use common::{dist_with_index, engine_lock, metric, real_engine, start, wait_for, Server, SseReader};
use peregrine_server::app::AppState;
use serde_json::{json, Value};

/// Seconds the next request's first token may take after a disconnect (the brief's bound).
const FIRST_TOKEN_AFTER_CANCEL_S: f64 = 2.0;
/// A short code prompt (few tokens: the CPU reference path is slow in debug builds).
const PROMPT: &str = "def fib(n):";
/// Lines of the long prompt (~36 tokens each: about 2,000 tokens, 8 prefill chunks).
const LONG_PROMPT_LINES: usize = 56;
/// The long-prompt test disconnects this long after `started`.
const DISCONNECT_AFTER: Duration = Duration::from_millis(50);

async fn serve() -> Server {
    start(AppState::new(dist_with_index()).with_engine(real_engine(), "SmolLM2-135M-Instruct.Q4_1")).await
}

async fn post(server: &Server, path: &str, body: Value) -> reqwest::Response {
    reqwest::Client::new().post(server.url(path)).json(&body).send().await.unwrap()
}

async fn metrics(server: &Server) -> String {
    reqwest::get(server.url("/metrics")).await.unwrap().text().await.unwrap()
}

#[tokio::test]
async fn playground_stream_is_framed_json_with_stats_and_one_terminal_done() {
    let _turn = engine_lock().await;
    let server = serve().await;
    let res = post(&server, "/api/generate", json!({ "prompt": PROMPT, "max_tokens": 6, "temperature": 0 })).await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["cache-control"], "no-cache");
    let events = SseReader::new(res).collect().await;
    for e in &events {
        assert_eq!(e.json()["type"], e.event.as_str(), "the event name matches the payload type");
    }
    let names: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(names.first(), Some(&"started"), "{names:?}");
    assert_eq!(names.iter().filter(|n| **n == "done" || **n == "error").count(), 1);
    assert_eq!(names.last(), Some(&"done"));
    assert!(names.contains(&"stats"), "{names:?}");
    let text: String = events.iter().filter(|e| e.event == "token").map(|e| e.json()["text"].as_str().unwrap().to_string()).collect();
    let counted: u64 = events.iter().filter(|e| e.event == "token").map(|e| e.json()["tokens"].as_u64().unwrap()).sum();
    let done = events.last().unwrap().json();
    assert!(!text.is_empty());
    assert_eq!(done["usage"]["completion_tokens"].as_u64(), Some(counted));
    assert_eq!(done["usage"]["prompt_tokens"], events[0].json()["prompt_tokens"]);
    assert!(done["timings"]["ttft_ms"].as_f64().unwrap() > 0.0);
    let last_stats = events.iter().rev().find(|e| e.event == "stats").unwrap().json();
    assert_eq!(last_stats["tokens"].as_u64(), Some(counted));
}

#[tokio::test]
async fn openai_completions_streamed_and_not_agree() {
    let _turn = engine_lock().await;
    let server = serve().await;
    let body = json!({ "model": "SmolLM2-135M-Instruct.Q4_1", "prompt": PROMPT, "max_tokens": 5, "temperature": 0, "logprobs": 2 });
    let full: Value = post(&server, "/v1/completions", body.clone()).await.json().await.unwrap();
    let choice = &full["choices"][0];
    let text = choice["text"].as_str().unwrap().to_string();
    assert!(!text.is_empty(), "{full}");
    assert_eq!(
        full["usage"]["total_tokens"].as_u64().unwrap(),
        full["usage"]["prompt_tokens"].as_u64().unwrap() + full["usage"]["completion_tokens"].as_u64().unwrap()
    );
    assert_eq!(choice["logprobs"]["tokens"].as_array().unwrap().len() as u64, full["usage"]["completion_tokens"].as_u64().unwrap());
    assert!(choice["logprobs"]["token_logprobs"].as_array().unwrap().iter().all(|l| l.as_f64().unwrap() <= 0.0));
    assert!(full["timings"]["predicted_n"].as_u64().unwrap() > 0);

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({ "include_usage": true });
    let events = SseReader::new(post(&server, "/v1/completions", streamed).await).collect().await;
    assert_eq!(events.last().unwrap().data, "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| e.json()).collect();
    let usage_chunk = chunks.last().unwrap();
    assert_eq!(usage_chunk["choices"], json!([]));
    for field in ["prompt_tokens", "completion_tokens", "total_tokens"] {
        assert_eq!(usage_chunk["usage"][field], full["usage"][field], "{field}");
    }
    // The same prompt again: all of it but the last token came from the cache.
    let u = &usage_chunk["usage"];
    assert_eq!(u["prompt_tokens_details"]["cached_tokens"].as_u64(), u["prompt_tokens"].as_u64().map(|n| n - 1), "{u}");
    assert!(usage_chunk["timings"]["predicted_per_second"].is_number());
    assert!(chunks[..chunks.len() - 1].iter().all(|c| c["usage"].is_null() && c["object"] == "text_completion"));
    assert!(full["system_fingerprint"].as_str().is_some_and(|f| f.starts_with('b')), "{full}");
    assert!(chunks.iter().all(|c| c["system_fingerprint"] == full["system_fingerprint"]));
    let finishes: Vec<&Value> = chunks.iter().filter_map(|c| c["choices"][0].get("finish_reason")).filter(|f| !f.is_null()).collect();
    assert_eq!(finishes, vec![&choice["finish_reason"]]);
    let streamed_text: String = chunks.iter().filter_map(|c| c["choices"][0]["text"].as_str()).collect();
    assert_eq!(streamed_text, text, "greedy output is the same streamed or not");

    // The same prompt as token ids gives the same completion.
    let ids: Value = post(&server, "/tokenize", json!({ "content": PROMPT, "add_special": true })).await.json().await.unwrap();
    let by_ids: Value =
        post(&server, "/v1/completions", json!({ "prompt": ids["tokens"], "max_tokens": 5, "temperature": 0 })).await.json().await.unwrap();
    assert_eq!(by_ids["choices"][0]["text"].as_str(), Some(text.as_str()));
}

#[tokio::test]
async fn echo_with_max_tokens_zero_scores_the_prompt() {
    let _turn = engine_lock().await;
    let server = serve().await;
    let prompt = "The capital of France is Paris";
    let v: Value = post(&server, "/v1/completions", json!({ "prompt": prompt, "max_tokens": 0, "echo": true, "logprobs": 3 }))
        .await
        .json()
        .await
        .unwrap();
    let choice = &v["choices"][0];
    assert_eq!(choice["text"], prompt, "{v}");
    assert_eq!(choice["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 0);
    let lp = &choice["logprobs"];
    let tokens: Vec<&str> = lp["tokens"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    assert_eq!(tokens.len() as u64, v["usage"]["prompt_tokens"].as_u64().unwrap());
    assert_eq!(tokens.concat(), prompt);
    assert!(lp["token_logprobs"][0].is_null() && lp["top_logprobs"][0].is_null());
    for i in 1..tokens.len() {
        let l = lp["token_logprobs"][i].as_f64().unwrap();
        assert!(l < 0.0, "{l}");
        let top = lp["top_logprobs"][i].as_object().unwrap();
        assert!((1..=3).contains(&top.len()));
        let best = top.values().map(|v| v.as_f64().unwrap()).fold(f64::MIN, f64::max);
        assert!(best >= l - 1e-4, "the top alternative is at least as likely as the actual token");
    }
    assert_eq!(lp["text_offset"][1].as_u64().unwrap() as usize, tokens[0].chars().count());
}

#[tokio::test]
async fn chat_completions_streamed_and_not() {
    let _turn = engine_lock().await;
    let server = serve().await;
    let messages = json!([{ "role": "system", "content": "Be brief." }, { "role": "user", "content": "Hi" }]);
    let v: Value = post(
        &server,
        "/v1/chat/completions",
        json!({ "messages": messages, "max_tokens": 3, "temperature": 0, "logprobs": true, "top_logprobs": 2 }),
    )
    .await
    .json()
    .await
    .unwrap();
    let choice = &v["choices"][0];
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(choice["message"]["role"], "assistant");
    let content = choice["message"]["content"].as_str().unwrap().to_string();
    assert!(!content.is_empty(), "{v}");
    let lp = choice["logprobs"]["content"].as_array().unwrap();
    assert_eq!(lp.len() as u64, v["usage"]["completion_tokens"].as_u64().unwrap());
    assert!(lp.iter().all(|t| t["top_logprobs"].as_array().unwrap().len() == 2 && t["bytes"].is_array()));

    let events = SseReader::new(
        post(
            &server,
            "/v1/chat/completions",
            json!({ "messages": messages, "max_tokens": 3, "temperature": 0, "stream": true, "stream_options": { "include_usage": true } }),
        )
        .await,
    )
    .collect()
    .await;
    assert_eq!(events.last().unwrap().data, "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| e.json()).collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let streamed: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(streamed, content);
    let usage = &chunks.last().unwrap()["usage"];
    for field in ["prompt_tokens", "completion_tokens", "total_tokens"] {
        assert_eq!(usage[field], v["usage"][field], "{field}");
    }
    // The same conversation again: all of its prompt but the last token came from the cache.
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"].as_u64(), usage["prompt_tokens"].as_u64().map(|n| n - 1), "{usage}");
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk"));
    // One backend configuration: one fingerprint, in llama-server's `b…` form, on every chunk and answer.
    let fingerprint = v["system_fingerprint"].as_str().unwrap_or_default();
    assert!(fingerprint.starts_with('b') && fingerprint.len() > 2, "{v}");
    assert!(chunks.iter().all(|c| c["system_fingerprint"] == fingerprint), "a chunk with another fingerprint");
}

/// Drops a stream after its first token, then checks the engine is free at once.
async fn check_disconnect_frees_the_engine(server: &Server, path: &str, body: Value, first_token: impl Fn(&common::Sse) -> bool) {
    let mut reader = SseReader::new(post(server, path, body).await);
    loop {
        let e = reader.next().await.expect("a token before the end");
        if first_token(&e) {
            break;
        }
    }
    drop(reader); // the client disconnects mid-stream
    let t0 = Instant::now();
    let mut next = SseReader::new(post(server, "/api/generate", json!({ "prompt": "Hi", "max_tokens": 2 })).await);
    loop {
        let e = next.next().await.expect("the next request streams");
        assert_ne!(e.event, "error", "{}", e.data);
        if e.event == "token" {
            break;
        }
    }
    let waited = t0.elapsed().as_secs_f64();
    assert!(waited <= FIRST_TOKEN_AFTER_CANCEL_S, "the next request's first token took {waited:.2} s after the disconnect");
    eprintln!("{path}: first token of the next request {waited:.2} s after the disconnect");
    assert_eq!(next.collect().await.last().unwrap().event, "done");
    let engine = real_engine();
    assert!(wait_for(Duration::from_secs(2), || !engine.busy()).await);
    let m = metrics(server).await;
    assert_eq!(metric(&m, "peregrine_requests_running"), Some(0.0), "{m}");
}

#[tokio::test]
async fn disconnecting_mid_stream_cancels_and_frees_the_engine() {
    let _turn = engine_lock().await;
    let server = serve().await;
    let before = metric(&metrics(&server).await, "peregrine_requests_total{finish_reason=\"cancelled\"}").unwrap();
    check_disconnect_frees_the_engine(&server, "/api/generate", json!({ "prompt": PROMPT, "max_tokens": 400, "ignore_eos": true }), |e| {
        e.event == "token"
    })
    .await;
    check_disconnect_frees_the_engine(
        &server,
        "/v1/completions",
        json!({ "prompt": PROMPT, "max_tokens": 400, "ignore_eos": true, "stream": true }),
        |e| e.json()["choices"][0]["text"].as_str().is_some_and(|t| !t.is_empty()),
    )
    .await;
    let after = metric(&metrics(&server).await, "peregrine_requests_total{finish_reason=\"cancelled\"}").unwrap();
    assert_eq!(after - before, 2.0);

    // A non-streaming request whose client gives up is cancelled too.
    let client = reqwest::Client::builder().timeout(Duration::from_millis(700)).build().unwrap();
    let gave_up =
        client.post(server.url("/v1/completions")).json(&json!({ "prompt": PROMPT, "max_tokens": 400, "ignore_eos": true })).send().await;
    assert!(gave_up.is_err(), "the client timed out");
    let engine = real_engine();
    assert!(wait_for(Duration::from_secs(2), || !engine.busy()).await, "the engine stopped the abandoned request");
}

/// Reads up to the `started` event (queue positions first when another test's
/// abandoned request is still ending).
async fn until_started(reader: &mut SseReader) -> common::Sse {
    loop {
        let e = reader.next().await.expect("started");
        if e.event != "queued" {
            assert_eq!(e.event, "started", "{}", e.data);
            return e;
        }
    }
}

/// Seconds from `started` to `done` of one request, and its prompt length.
async fn timed_prefill(server: &Server, prompt: &str) -> (f64, u64) {
    let body = json!({ "prompt": prompt, "max_tokens": 1, "ignore_eos": true, "cache_prompt": false });
    let mut reader = SseReader::new(post(server, "/api/generate", body).await);
    let started = until_started(&mut reader).await;
    let t = Instant::now();
    let events = reader.collect().await;
    assert_eq!(events.last().map(|e| e.event.as_str()), Some("done"));
    (t.elapsed().as_secs_f64(), started.json()["prompt_tokens"].as_u64().unwrap())
}

#[tokio::test]
async fn disconnecting_during_a_long_prompt_frees_the_engine_within_a_chunk() {
    let _turn = engine_lock().await;
    let server = serve().await;
    let long: String =
        (0..LONG_PROMPT_LINES).map(|i| format!("def f{i}(n):\n    return n if n < 2 else f{i}(n - 1) + f{i}(n - 2)\n")).collect();
    timed_prefill(&server, PROMPT).await; // warm-up
    let (prefill, prompt_tokens) = timed_prefill(&server, &long).await;
    let before = metric(&metrics(&server).await, "peregrine_requests_total{finish_reason=\"cancelled\"}").unwrap();

    // No reuse: the prompt is read again, so the disconnect lands during its prefill.
    let body = json!({ "prompt": long, "max_tokens": 16, "ignore_eos": true, "cache_prompt": false });
    let mut reader = SseReader::new(post(&server, "/api/generate", body).await);
    until_started(&mut reader).await;
    tokio::time::sleep(DISCONNECT_AFTER).await;
    drop(reader); // the client disconnects while its prompt is being read
    let t0 = Instant::now();
    let mut next = SseReader::new(post(&server, "/api/generate", json!({ "prompt": "Hi", "max_tokens": 2 })).await);
    let mut queued = false;
    loop {
        let e = next.next().await.expect("the next request streams");
        assert_ne!(e.event, "error", "{}", e.data);
        queued |= e.event == "queued";
        if e.event == "token" {
            break;
        }
    }
    let first_token = t0.elapsed().as_secs_f64();
    assert_eq!(next.collect().await.last().unwrap().event, "done");
    let after = metric(&metrics(&server).await, "peregrine_requests_total{finish_reason=\"cancelled\"}").unwrap();
    eprintln!(
        "disconnect {} ms into a {prompt_tokens}-token prompt: whole prefill {prefill:.3} s; next request's first token {first_token:.3} s \
         after the disconnect (queued behind it: {queued})",
        DISCONNECT_AFTER.as_millis()
    );
    assert_eq!(after - before, 1.0, "the abandoned request counts as cancelled");
    assert!(first_token < prefill * 0.5, "the next request waited {first_token:.3} s (whole prefill {prefill:.3} s)");
}

#[tokio::test]
async fn logit_bias_and_penalties_steer_the_real_model() {
    let _turn = engine_lock().await;
    let server = serve().await;
    let ask = |extra: Value| {
        let mut body =
            json!({ "prompt": "The capital of France is", "max_tokens": 6, "temperature": 0, "ignore_eos": true, "logprobs": 0 });
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        post(&server, "/v1/completions", body)
    };
    let tokens = |v: &Value| -> Vec<String> {
        v["choices"][0]["logprobs"]["tokens"].as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_string()).collect()
    };
    let plain: Value = ask(json!({})).await.json().await.unwrap();
    let plain_tokens = tokens(&plain);
    // The greedy answer's first token, forbidden: the answer starts differently.
    let ids: Value = post(&server, "/tokenize", json!({ "content": plain_tokens[0] })).await.json().await.unwrap();
    let first = ids["tokens"][0].as_u64().unwrap();
    assert_eq!(ids["tokens"].as_array().unwrap().len(), 1, "{ids}");
    let banned: Value = ask(json!({ "logit_bias": { first.to_string(): -100 } })).await.json().await.unwrap();
    assert_ne!(tokens(&banned)[0], plain_tokens[0], "{:?} vs {plain_tokens:?}", tokens(&banned));
    // And favoured: a +100 bias makes a token the whole answer.
    let forced: Value = ask(json!({ "logit_bias": { first.to_string(): 100 } })).await.json().await.unwrap();
    assert!(tokens(&forced).iter().all(|t| t == &plain_tokens[0]), "{:?}", tokens(&forced));
    // A large frequency penalty: no token repeats in the answer.
    let varied: Value = ask(json!({ "frequency_penalty": 2.0, "presence_penalty": 2.0, "max_tokens": 6 })).await.json().await.unwrap();
    let t = tokens(&varied);
    let mut unique = t.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), t.len(), "{t:?}");
}

#[tokio::test]
async fn n_choices_are_the_requests_of_consecutive_seeds() {
    let _turn = engine_lock().await;
    let server = serve().await;
    let body = |n: u32, seed: u64| json!({ "prompt": "Once upon a time", "max_tokens": 8, "temperature": 1.0, "seed": seed, "ignore_eos": true, "n": n });
    let many: Value = post(&server, "/v1/completions", body(3, 5)).await.json().await.unwrap();
    let choices = many["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 3, "{many}");
    for (i, c) in choices.iter().enumerate() {
        assert_eq!(c["index"], i);
        let one: Value = post(&server, "/v1/completions", body(1, 5 + i as u64)).await.json().await.unwrap();
        assert_eq!(c["text"], one["choices"][0]["text"], "choice {i} is the request with seed {}", 5 + i);
    }
    assert_eq!(many["usage"]["completion_tokens"], 24);
    assert_eq!(many["usage"]["total_tokens"].as_u64(), many["usage"]["prompt_tokens"].as_u64().map(|p| p + 24));
    let chat: Value = post(
        &server,
        "/v1/chat/completions",
        json!({ "messages": [{ "role": "user", "content": "Hi" }], "max_tokens": 4, "n": 2, "temperature": 0 }),
    )
    .await
    .json()
    .await
    .unwrap();
    let c = chat["choices"].as_array().unwrap();
    assert_eq!(c.len(), 2, "{chat}");
    assert_eq!(c[0]["message"], c[1]["message"], "greedy: the same answer twice");
}

#[tokio::test]
async fn n_choices_stream_interleaved_with_their_indices() {
    let _turn = engine_lock().await;
    let server = serve().await;
    let body = json!({ "prompt": "Once upon a time", "max_tokens": 8, "temperature": 1.0, "seed": 5, "ignore_eos": true, "n": 3 });
    let whole: Value = post(&server, "/v1/completions", body.clone()).await.json().await.unwrap();
    let mut streamed = body;
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({ "include_usage": true });
    let events = SseReader::new(post(&server, "/v1/completions", streamed).await).collect().await;
    assert_eq!(events.last().unwrap().data, "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| e.json()).collect();
    let (usage, parts) = chunks.split_last().unwrap();
    assert_eq!(usage["choices"], json!([]), "one usage chunk, last");
    assert_eq!(usage["usage"]["completion_tokens"], 24, "{usage}");
    assert_eq!(usage["usage"]["total_tokens"].as_u64(), usage["usage"]["prompt_tokens"].as_u64().map(|p| p + 24));
    let id = &parts[0]["id"];
    let mut texts = vec![String::new(); 3];
    let mut finished = [0; 3];
    for c in parts {
        assert_eq!(&c["id"], id, "every chunk carries the request's id");
        let choice = &c["choices"][0];
        let i = choice["index"].as_u64().unwrap() as usize;
        texts[i] += choice["text"].as_str().unwrap_or("");
        finished[i] += usize::from(!choice["finish_reason"].is_null());
    }
    assert_eq!(finished, [1, 1, 1], "each choice ends once");
    for (i, t) in texts.iter().enumerate() {
        assert_eq!(t.as_str(), whole["choices"][i]["text"].as_str().unwrap(), "choice {i} streamed = whole");
    }
    let chat = json!({ "messages": [{ "role": "user", "content": "Hi" }], "max_tokens": 4, "n": 2, "temperature": 0, "stream": true });
    let events = SseReader::new(post(&server, "/v1/chat/completions", chat).await).collect().await;
    let mut answers = vec![String::new(); 2];
    for e in &events[..events.len() - 1] {
        let c = e.json();
        let choice = &c["choices"][0];
        answers[choice["index"].as_u64().unwrap() as usize] += choice["delta"]["content"].as_str().unwrap_or("");
    }
    assert!(!answers[0].is_empty() && answers[0] == answers[1], "greedy: the same answer twice: {answers:?}");
}

#[tokio::test]
async fn a_playground_chat_turn_carries_its_conversation() {
    let _turn = engine_lock().await;
    let server = serve().await;
    let system = "You are terse.";
    let history = json!([{ "user": "Name a colour.", "assistant": "Blue." }, { "user": "Another?", "assistant": "Red." }]);
    let turn = json!({ "prompt": "And a third?", "mode": "chat", "system": system, "history": history, "max_tokens": 6, "temperature": 0 });
    let events: Vec<Value> = SseReader::new(post(&server, "/api/generate", turn).await).collect().await.iter().map(|e| e.json()).collect();
    let text: String = events.iter().filter(|e| e["type"] == "token").map(|e| e["text"].as_str().unwrap()).collect();
    let messages = json!([
        { "role": "system", "content": system },
        { "role": "user", "content": "Name a colour." }, { "role": "assistant", "content": "Blue." },
        { "role": "user", "content": "Another?" }, { "role": "assistant", "content": "Red." },
        { "role": "user", "content": "And a third?" },
    ]);
    let openai: Value = post(&server, "/v1/chat/completions", json!({ "messages": messages, "max_tokens": 6, "temperature": 0 }))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(text, openai["choices"][0]["message"]["content"].as_str().unwrap(), "the same conversation, the same answer");
    let started = events.iter().find(|e| e["type"] == "started").unwrap();
    assert_eq!(started["prompt_tokens"], openai["usage"]["prompt_tokens"]);
    // Fields of another mode are a 400 naming them.
    let res = post(&server, "/api/generate", json!({ "prompt": "x", "history": history })).await;
    assert_eq!(res.status(), 400);
    let e: Value = res.json().await.unwrap();
    assert!(e["message"].as_str().unwrap().contains("chat"), "{e}");
}
