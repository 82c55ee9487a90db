//! Fill-in-the-middle over HTTP with the default model's weights and a vocabulary whose
//! unused control tokens are renamed to FIM tokens (as the engine's infill fixture does):
//! llama.cpp's `/infill`, streamed and not, and `suffix` on `/v1/completions` (the same
//! layout, so the same greedy text); the default model itself answers 400 for both.

mod common;

use common::{dist_with_index, model_path, real_engine, start, SseReader};
use peregrine_engine::cpu::fast_runtime::{FastOptions, FastRuntime};
use peregrine_engine::generator::Generator;
use peregrine_engine::gguf::{load_gguf, GgufFile, MetaValue};
use peregrine_engine::tokenizer::Tokenizer;
use peregrine_engine::EngineHandle;
use peregrine_server::app::AppState;
use serde_json::{json, Value};

/// The renames of the engine's FIM fixture (scripts/fixtures/make_fim_fixtures.py).
const RENAMES: [(usize, &str); 5] =
    [(5, "<|file_sep|>"), (7, "<|fim_prefix|>"), (8, "<|fim_suffix|>"), (9, "<|fim_middle|>"), (10, "<|fim_pad|>")];

fn fim_engine() -> EngineHandle {
    EngineHandle::start(
        || {
            let mut meta = GgufFile::open(&model_path())?.metadata;
            if let Some(MetaValue::Array(tokens)) = meta.get_mut("tokenizer.ggml.tokens") {
                for (id, text) in RENAMES {
                    tokens[id] = MetaValue::String(text.into());
                }
            }
            let tokenizer = Tokenizer::from_gguf_metadata(&meta)?;
            let (_, config, weights) = load_gguf(&model_path())?;
            let mut options = FastOptions::defaults();
            options.threads = 2;
            let runtime = FastRuntime::new(&config, &weights, options)?;
            Ok(Generator::new(Box::new(runtime), Some(tokenizer), None))
        },
        2,
    )
    .expect("the FIM engine starts")
}

fn body() -> Value {
    json!({
        "input_prefix": "def add(a, b):\n    ",
        "input_suffix": "\n\nprint(add(2, 3))\n",
        "input_extra": [{ "filename": "notes.md", "text": "add returns the sum\n" }],
        "n_predict": 8,
        "temperature": 0,
        "ignore_eos": true,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infill_streams_and_not_and_suffix_fills_the_same_middle() {
    let server = start(AppState::new(dist_with_index()).with_engine(fim_engine(), "fim")).await;
    let client = reqwest::Client::new();
    let post = |path: &str, body: Value| client.post(server.url(path)).json(&body).send();

    let res = post("/infill", body()).await.unwrap();
    assert_eq!(res.status(), 200);
    let whole: Value = res.json().await.unwrap();
    assert_eq!(whole["stop"], true);
    assert_eq!(whole["tokens_predicted"], 8);
    assert_eq!(whole["stop_type"], "limit");
    let prompt = whole["prompt"].as_str().unwrap();
    assert!(
        prompt.starts_with("<reponame>myproject\n<|file_sep|>notes.md\nadd returns the sum\n<|file_sep|>filename\n<|fim_prefix|>def add"),
        "{prompt}"
    );
    assert!(prompt.ends_with("print(add(2, 3))\n<|fim_middle|>"), "{prompt}");
    let content = whole["content"].as_str().unwrap().to_string();
    assert!(!content.is_empty());

    let mut streamed = body();
    streamed["stream"] = json!(true);
    let res = post("/infill", streamed).await.unwrap();
    assert_eq!(res.status(), 200);
    let events = SseReader::new(res).collect().await;
    assert!(events.iter().all(|e| e.data != "[DONE]"), "llama.cpp's stream has no [DONE]");
    let chunks: Vec<Value> = events.iter().filter(|e| !e.data.is_empty()).map(|e| e.json()).collect();
    let (last, pieces) = chunks.split_last().expect("chunks");
    assert_eq!(last["stop"], true);
    assert_eq!(last["tokens_evaluated"], whole["tokens_evaluated"]);
    assert!(pieces.iter().all(|c| c["stop"] == false));
    // The same prompt again: all but its last token come from the cache.
    let prompt_n = whole["tokens_evaluated"].as_u64().unwrap();
    assert_eq!(last["tokens_cached"].as_u64().unwrap(), prompt_n - 1, "{last}");
    assert_eq!(last["timings"]["prompt_n"].as_u64().unwrap(), 1, "{last}");
    assert_eq!(pieces.iter().map(|c| c["content"].as_str().unwrap()).collect::<String>(), content, "greedy: the same middle");

    // `suffix` on the OpenAI route: the prompt is the prefix, the same layout without extra files.
    let res = post(
        "/v1/completions",
        json!({ "prompt": "def add(a, b):\n    ", "suffix": "\n\nprint(add(2, 3))\n", "max_tokens": 8, "temperature": 0, "ignore_eos": true }),
    )
    .await
    .unwrap();
    assert_eq!(res.status(), 200);
    let openai: Value = res.json().await.unwrap();
    let mut same = body();
    same.as_object_mut().unwrap().remove("input_extra");
    let plain: Value = post("/infill", same).await.unwrap().json().await.unwrap();
    assert_eq!(openai["choices"][0]["text"], plain["content"]);
    assert_eq!(openai["usage"]["prompt_tokens"], plain["tokens_evaluated"]);

    // The playground's infill mode: the same layout, streamed as playground events.
    let info: Value = client.get(server.url("/api/info")).send().await.unwrap().json().await.unwrap();
    assert_eq!(info["infill"], true, "{info}");
    let playground = json!({ "prompt": "def add(a, b):\n    ", "suffix": "\n\nprint(add(2, 3))\n", "mode": "infill",
                             "max_tokens": 8, "temperature": 0, "ignore_eos": true });
    let res = post("/api/generate", playground).await.unwrap();
    assert_eq!(res.status(), 200);
    let events: Vec<Value> = SseReader::new(res).collect().await.iter().map(|e| e.json()).collect();
    let text: String = events.iter().filter(|e| e["type"] == "token").map(|e| e["text"].as_str().unwrap()).collect();
    assert_eq!(text, plain["content"].as_str().unwrap(), "infill mode fills the same middle");
    let started = events.iter().find(|e| e["type"] == "started").unwrap();
    assert_eq!(started["prompt_tokens"], plain["tokens_evaluated"]);

    // Client mistakes are 400s naming the field.
    for (bad, field) in [
        (json!({ "input_suffix": "" }), "input_prefix"),
        (json!({ "input_prefix": "" }), "input_suffix"),
        (json!({ "input_prefix": "", "input_suffix": "", "n_predict": -5 }), "n_predict"),
    ] {
        let res = post("/infill", bad).await.unwrap();
        assert_eq!(res.status(), 400);
        let e: Value = res.json().await.unwrap();
        assert!(e["error"]["message"].as_str().unwrap().contains(field), "{e}");
    }
    let res = post("/v1/completions", json!({ "prompt": [1, 2, 3], "suffix": "x" })).await.unwrap();
    assert_eq!(res.status(), 400);
    let res = post("/v1/completions", json!({ "prompt": "a", "suffix": "x", "echo": true })).await.unwrap();
    assert_eq!(res.status(), 400);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_model_has_no_fim_tokens_and_says_so() {
    let server = start(AppState::new(dist_with_index()).with_engine(real_engine(), "default")).await;
    let client = reqwest::Client::new();
    let res = client.post(server.url("/infill")).json(&json!({ "input_prefix": "a", "input_suffix": "b" })).send().await.unwrap();
    assert_eq!(res.status(), 400);
    let e: Value = res.json().await.unwrap();
    assert!(e["error"]["message"].as_str().unwrap().contains("cannot fill in the middle"), "{e}");
    let res = client.post(server.url("/v1/completions")).json(&json!({ "prompt": "a", "suffix": "b" })).send().await.unwrap();
    assert_eq!(res.status(), 400);
    let e: Value = res.json().await.unwrap();
    assert_eq!(e["error"]["param"], "suffix", "{e}");
    let info: Value = client.get(server.url("/api/info")).send().await.unwrap().json().await.unwrap();
    assert_eq!(info["infill"], false, "{info}");
    let res =
        client.post(server.url("/api/generate")).json(&json!({ "prompt": "a", "suffix": "b", "mode": "infill" })).send().await.unwrap();
    assert_eq!(res.status(), 400);
    let e: Value = res.json().await.unwrap();
    assert!(e["message"].as_str().unwrap().contains("cannot fill in the middle"), "{e}");
    server.stop().await;
}
