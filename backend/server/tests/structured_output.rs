//! Structured output on the real engine (default model, CPU) over real HTTP: OpenAI's
//! `response_format` (json_schema and json_object, streamed and not), llama.cpp's
//! `grammar` (GBNF, and Lark behind `%llguidance`) and `json_schema` on `/completion`
//! and `/v1/completions`, the Responses API's `text.format`; an invalid grammar or
//! schema is a 400 naming the field with the compiler's reason.

mod common;

use common::{dist_with_index, engine_lock, real_engine, start, Server};
use peregrine_server::app::AppState;
use serde_json::{json, Value};

const MODEL: &str = "SmolLM2-135M-Instruct.Q4_1";

async fn serve() -> Server {
    start(AppState::new(dist_with_index()).with_engine(real_engine(), MODEL)).await
}

async fn post(server: &Server, path: &str, body: Value) -> (u16, String) {
    let res = reqwest::Client::new().post(server.url(path)).json(&body).send().await.unwrap();
    (res.status().as_u16(), res.text().await.unwrap())
}

async fn post_json(server: &Server, path: &str, body: Value) -> Value {
    let (status, text) = post(server, path, body).await;
    assert_eq!(status, 200, "{path}: {text}");
    serde_json::from_str(&text).unwrap()
}

/// A 400 whose `param` is `param` and whose message contains `reason`.
fn refused(status: u16, text: &str, param: &str, reason: &str) {
    assert_eq!(status, 400, "{text}");
    let e: Value = serde_json::from_str(text).unwrap();
    assert_eq!(e["error"]["param"], param, "{text}");
    let message = e["error"]["message"].as_str().unwrap();
    assert!(message.contains(reason), "{message}");
}

fn item_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "item": { "type": "string", "maxLength": 16 },
            "count": { "type": "integer", "minimum": 1, "maximum": 9 },
            "colour": { "enum": ["red", "green", "blue"] }
        },
        "required": ["item", "count", "colour"],
        "additionalProperties": false
    })
}

fn check_item(text: &str) {
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"));
    assert_eq!(v.as_object().unwrap().len(), 3, "{text}");
    assert!(v["item"].as_str().is_some_and(|s| s.chars().count() <= 16), "{text}");
    assert!(v["count"].as_u64().is_some_and(|c| (1..=9).contains(&c)), "{text}");
    assert!(["red", "green", "blue"].contains(&v["colour"].as_str().unwrap()), "{text}");
}

#[tokio::test]
async fn chat_response_formats_shape_the_answer_streamed_and_not() {
    let _turn = engine_lock().await;
    let server = serve().await;
    let format = json!({ "type": "json_schema", "json_schema": { "name": "item", "schema": item_schema(), "strict": true } });
    let body = json!({
        "messages": [{ "role": "user", "content": "Name something in a shop." }],
        "max_tokens": 80, "temperature": 0, "response_format": format,
    });
    let whole = post_json(&server, "/v1/chat/completions", body.clone()).await;
    let content = whole["choices"][0]["message"]["content"].as_str().unwrap().to_string();
    check_item(&content);
    assert_eq!(whole["choices"][0]["finish_reason"], "stop", "{whole}");

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (status, text) = post(&server, "/v1/chat/completions", streamed).await;
    assert_eq!(status, 200, "{text}");
    let joined: String = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| serde_json::from_str::<Value>(d).unwrap()["choices"][0]["delta"]["content"].as_str().map(str::to_string))
        .collect();
    assert_eq!(joined, content, "streamed and whole answers agree");

    let mut object = body.clone();
    object["response_format"] = json!({ "type": "json_object" });
    object["temperature"] = json!(0.9);
    object["seed"] = json!(3);
    let v = post_json(&server, "/v1/chat/completions", object).await;
    let content = v["choices"][0]["message"]["content"].as_str().unwrap();
    if v["choices"][0]["finish_reason"] == "stop" {
        assert!(serde_json::from_str::<Value>(content).unwrap().is_object(), "{content}");
    }
}

#[tokio::test]
async fn llama_grammar_and_schema_fields_work_on_the_completion_routes() {
    let _turn = engine_lock().await;
    let server = serve().await;
    let gbnf = "root ::= \"The answer is \" (\"yes\" | \"no\") \".\"";
    let v = post_json(&server, "/completion", json!({ "prompt": "Is water wet?", "n_predict": 20, "grammar": gbnf })).await;
    let content = v["content"].as_str().unwrap();
    assert!(content == "The answer is yes." || content == "The answer is no.", "{v}");
    assert_eq!(v["stop_type"], "eos", "a complete grammar stops the request: {v}");

    let lark = "%llguidance {}\nstart: \"#\" /[0-9]{3}/";
    let v = post_json(&server, "/v1/completions", json!({ "prompt": "A code:", "max_tokens": 10, "grammar": lark })).await;
    let text = v["choices"][0]["text"].as_str().unwrap();
    assert!(text.len() == 4 && text.starts_with('#') && text[1..].chars().all(|c| c.is_ascii_digit()), "{v}");

    let v = post_json(&server, "/completion", json!({ "prompt": "Shopping list item as JSON:", "n_predict": 80, "json_schema": item_schema() }))
        .await;
    check_item(v["content"].as_str().unwrap());

    let v = post_json(
        &server,
        "/v1/responses",
        json!({ "input": "Name something in a shop.", "max_output_tokens": 80, "temperature": 0,
                "text": { "format": { "type": "json_schema", "name": "item", "schema": item_schema(), "strict": true } } }),
    )
    .await;
    check_item(v["output"][0]["content"][0]["text"].as_str().unwrap());
}

#[tokio::test]
async fn invalid_grammars_and_schemas_are_400s_naming_the_field() {
    let _turn = engine_lock().await;
    let server = serve().await;
    let chat = json!({ "messages": [{ "role": "user", "content": "Hi" }], "max_tokens": 4 });
    let with = |k: &str, v: Value| {
        let mut b = chat.clone();
        b[k] = v;
        b
    };
    let (status, text) = post(&server, "/v1/chat/completions", with("grammar", json!("root ::= \"a\" undefined-rule"))).await;
    refused(status, &text, "grammar", "rule `undefined-rule` is used but never defined");
    let (status, text) = post(&server, "/completion", json!({ "prompt": "Hi", "grammar": "root ::= [a-" })).await;
    refused(status, &text, "grammar", "invalid grammar: line 1");
    let bad_schema = json!({ "type": "json_schema", "json_schema": { "name": "x", "schema": { "type": "objekt" } } });
    let (status, text) = post(&server, "/v1/chat/completions", with("response_format", bad_schema)).await;
    refused(status, &text, "response_format", "invalid response_format");
    let (status, text) = post(&server, "/completion", json!({ "prompt": "Hi", "json_schema": { "minimum": "three" } })).await;
    refused(status, &text, "json_schema", "invalid json_schema");
    let (status, text) = post(&server, "/v1/chat/completions", with("json_schema", json!([1]))).await;
    refused(status, &text, "json_schema", "must be a JSON schema");
    let both = json!({ "prompt": "Hi", "grammar": "root ::= \"a\"", "json_schema": {} });
    let (status, text) = post(&server, "/completion", both).await;
    refused(status, &text, "json_schema", "give one of grammar, json_schema");
}

/// The playground's `json_schema`: the streamed answer is the schema's JSON, and a bad
/// schema is a 400 naming the field before any event.
#[tokio::test]
async fn the_playground_route_takes_a_json_schema() {
    let _turn = engine_lock().await;
    let server = serve().await;
    let body = json!({ "prompt": "Name an item to buy.", "mode": "chat", "max_tokens": 60, "temperature": 0, "json_schema": item_schema() });
    let (status, text) = post(&server, "/api/generate", body).await;
    assert_eq!(status, 200, "{text}");
    let mut answer = String::new();
    let mut finish = None;
    for block in text.split("\n\n") {
        let data: String = block.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim).collect();
        let Ok(event) = serde_json::from_str::<Value>(&data) else { continue };
        match event["type"].as_str() {
            Some("token") => answer += event["text"].as_str().unwrap(),
            Some("done") => finish = Some(event["finish_reason"].clone()),
            _ => {}
        }
    }
    assert_eq!(finish, Some(json!("stop")), "a complete grammar ends the run: {text}");
    check_item(&answer);
    // The playground's own error shape: {code, message}, the message naming the field.
    for (schema, reason) in [(json!({ "type": "no-such-type" }), "no-such-type"), (json!([1]), "object")] {
        let (status, text) = post(&server, "/api/generate", json!({ "prompt": "x", "json_schema": schema })).await;
        assert_eq!(status, 400, "{text}");
        let e: Value = serde_json::from_str(&text).unwrap();
        let message = e["message"].as_str().unwrap();
        assert!(e["code"] == "invalid_request" && message.contains("json_schema") && message.contains(reason), "{text}");
    }
}
