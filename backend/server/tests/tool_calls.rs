//! Tool calls on `/v1/chat/completions` on the real engine (default model, CPU) over
//! real HTTP: `tool_choice` required, a named function, `parallel_tool_calls: false`,
//! auto and none; calls answered as `tool_calls` (`finish_reason: "tool_calls"`) whose
//! arguments follow the tool's schema, the same call streamed as `tool_calls` deltas, a
//! history with an assistant's calls and the tool's result, a chat template that lists
//! tools itself getting them natively, and bad tool fields as 400s naming them; the
//! same on Anthropic's `/v1/messages` (`tool_use` blocks, streamed as
//! `input_json_delta`, a `tool_result` round trip) and on `/v1/responses`
//! (`function_call` items, streamed and not, a `function_call_output` round trip).

mod common;

use common::{dist_with_index, engine_lock, model_path, real_engine, start, Server};
use peregrine_engine::generator::Generator;
use peregrine_engine::handle::{EngineHandle, EngineLimits};
use peregrine_engine::{build_generator, load_model, ChatMessage, ChatTemplate, EngineOptions, Prompt};
use peregrine_server::app::AppState;
use serde_json::{json, Value};

const MODEL: &str = "SmolLM2-135M-Instruct.Q4_1";

async fn serve() -> Server {
    start(AppState::new(dist_with_index()).with_engine(real_engine(), MODEL)).await
}

async fn post(server: &Server, body: Value) -> (u16, String) {
    post_to(server, "/v1/chat/completions", body).await
}

async fn post_to(server: &Server, path: &str, body: Value) -> (u16, String) {
    let res = reqwest::Client::new().post(server.url(path)).json(&body).send().await.unwrap();
    (res.status().as_u16(), res.text().await.unwrap())
}

async fn answer(server: &Server, body: Value) -> Value {
    let (status, text) = post(server, body).await;
    assert_eq!(status, 200, "{text}");
    serde_json::from_str(&text).unwrap()
}

fn tools() -> Value {
    json!([
        { "type": "function", "function": { "name": "get_weather", "description": "The weather in a city",
          "parameters": { "type": "object", "properties": { "city": { "type": "string", "maxLength": 30 }, "unit": { "enum": ["celsius", "fahrenheit"] } },
                          "required": ["city", "unit"], "additionalProperties": false } } },
        { "type": "function", "function": { "name": "get_time", "description": "The time in a time zone",
          "parameters": { "type": "object", "properties": { "zone": { "type": "string", "maxLength": 30 } }, "required": ["zone"], "additionalProperties": false } } }
    ])
}

fn ask(choice: Value) -> Value {
    json!({
        "messages": [{ "role": "user", "content": "What is the weather in Paris?" }],
        "tools": tools(), "tool_choice": choice, "max_tokens": 120, "temperature": 0,
    })
}

/// The calls of an answer as (name, arguments object), after checking its shape; a
/// model may repeat parallel calls until the length limit cuts the answer, whose
/// complete calls come back all the same.
fn calls_of(v: &Value) -> Vec<(String, Value)> {
    let choice = &v["choices"][0];
    assert!(["tool_calls", "length"].contains(&choice["finish_reason"].as_str().unwrap()), "{v}");
    let calls = choice["message"]["tool_calls"].as_array().unwrap_or_else(|| panic!("tool_calls: {v}"));
    calls
        .iter()
        .map(|c| {
            assert!(c["id"].as_str().unwrap().starts_with("call"), "{c}");
            assert_eq!(c["type"], "function");
            let args: Value = serde_json::from_str(c["function"]["arguments"].as_str().unwrap()).unwrap();
            (c["function"]["name"].as_str().unwrap().to_string(), args)
        })
        .collect()
}

fn check_weather(args: &Value) {
    assert!(args["city"].as_str().is_some_and(|c| !c.is_empty() && c.chars().count() <= 30), "{args}");
    assert!(["celsius", "fahrenheit"].contains(&args["unit"].as_str().unwrap()), "{args}");
    assert_eq!(args.as_object().unwrap().len(), 2, "{args}");
}

#[tokio::test]
async fn required_and_named_choices_answer_calls_that_follow_the_schemas() {
    let _turn = engine_lock().await;
    let server = serve().await;
    let v = answer(&server, ask(json!("required"))).await;
    let calls = calls_of(&v);
    assert!(!calls.is_empty());
    for (name, args) in &calls {
        match name.as_str() {
            "get_weather" => check_weather(args),
            "get_time" => assert!(args["zone"].is_string(), "{args}"),
            other => panic!("called {other}"),
        }
    }
    assert!(v["choices"][0]["message"]["content"].is_null(), "{v}");

    let named = answer(&server, ask(json!({ "type": "function", "function": { "name": "get_time" } }))).await;
    assert!(calls_of(&named).iter().all(|(n, _)| n == "get_time"), "{named}");

    let mut single = ask(json!({ "type": "function", "function": { "name": "get_weather" } }));
    single["parallel_tool_calls"] = json!(false);
    let one = answer(&server, single.clone()).await;
    let calls = calls_of(&one);
    assert_eq!(calls.len(), 1, "{one}");
    assert_eq!(one["choices"][0]["finish_reason"], "tool_calls", "one call completes the grammar: {one}");
    check_weather(&calls[0].1);

    // Streamed: the same call, as tool_calls deltas.
    single["stream"] = json!(true);
    let (status, text) = post(&server, single).await;
    assert_eq!(status, 200, "{text}");
    let chunks: Vec<Value> =
        text.lines().filter_map(|l| l.strip_prefix("data: ")).filter(|d| *d != "[DONE]").map(|d| serde_json::from_str(d).unwrap()).collect();
    let deltas: Vec<&Value> = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["tool_calls"].as_array()).flatten().collect();
    assert_eq!(deltas.len(), 1, "{text}");
    assert_eq!(deltas[0]["index"], 0);
    assert_eq!(deltas[0]["function"]["name"], "get_weather");
    let streamed: Value = serde_json::from_str(deltas[0]["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(streamed, calls[0].1, "streamed and whole calls agree");
    assert_eq!(chunks.iter().rev().find_map(|c| c["choices"][0]["finish_reason"].as_str()), Some("tool_calls"));
}

#[tokio::test]
async fn auto_none_and_a_tool_round_trip() {
    let _turn = engine_lock().await;
    let server = serve().await;
    // Auto: text or calls (the finish reason says which), a call following its schema.
    for question in ["What is the weather in Paris?", "Say hello.", "Call get_time for the zone Europe/Paris."] {
        let mut body = ask(json!("auto"));
        body["messages"][0]["content"] = json!(question);
        let v = answer(&server, body).await;
        let message = &v["choices"][0]["message"];
        if message["tool_calls"].is_array() {
            for (name, args) in calls_of(&v) {
                if name == "get_weather" {
                    check_weather(&args);
                } else {
                    assert!(args["zone"].is_string() && args.as_object().unwrap().len() == 1, "{args}");
                }
            }
        } else {
            assert!(message["content"].is_string() && v["choices"][0]["finish_reason"] != "tool_calls", "{v}");
        }
        eprintln!("auto, {question:?}: {message}");
    }
    // None: the tools are not offered; a text answer.
    let v = answer(&server, ask(json!("none"))).await;
    assert!(v["choices"][0]["message"]["content"].is_string() && v["choices"][0]["message"].get("tool_calls").is_none(), "{v}");
    // The history carries the assistant's call and the tool's result.
    let history = json!({
        "messages": [
            { "role": "user", "content": "What is the weather in Paris?" },
            { "role": "assistant", "content": null, "tool_calls": [{ "id": "call_1", "type": "function",
              "function": { "name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}" } }] },
            { "role": "tool", "tool_call_id": "call_1", "content": "18 degrees and sunny" }
        ],
        "tools": tools(), "tool_choice": "none", "max_tokens": 24, "temperature": 0,
    });
    let v = answer(&server, history).await;
    assert!(!v["choices"][0]["message"]["content"].as_str().unwrap().is_empty(), "{v}");
}

#[tokio::test]
async fn under_auto_text_is_free_and_an_opened_call_follows_its_schema() {
    use peregrine_server::openai::tools::Tools;
    let engine = real_engine();
    let text = engine.text();
    let tools = Tools::from_request(Some(&tools()), Some(&json!("auto")), None).unwrap().unwrap();
    let grammar = text.constraint(&tools.grammar()).expect("the tools' grammar compiles");
    let taken = |s: &str| {
        let ids = text.tokenizer.as_ref().unwrap().encode(s, false).unwrap();
        (grammar.accepted_prefix(&ids), ids.len())
    };
    let call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>\n";
    for whole in ["Plain text, even with a <tool> tag or <tool_call without its bracket.", &format!("Let me check.\n{call}"), &format!("{call}{call}")] {
        let (ok, n) = taken(whole);
        assert_eq!(ok, n, "{whole:?} is taken whole");
    }
    for bad in [
        "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"town\": \"Paris\"}}",
        "<tool_call>\n{\"name\": \"send_email\", \"arguments\": {}}",
        "<tool_call>\nget_weather(Paris)",
    ] {
        let (ok, n) = taken(bad);
        assert!(ok < n, "{bad:?}: a call off its schema is refused ({ok} of {n} tokens taken)");
    }
}

/// A template in Qwen2.5's shape: it lists `tools` and asks for `<tool_call>` blocks.
const TOOLS_TEMPLATE: &str = r#"{%- if tools %}{{- '<|im_start|>system\nTools:\n<tools>' }}{%- for tool in tools %}{{- '\n' }}{{- tool | tojson }}{%- endfor %}{{- '\n</tools>\nCall one as:\n<tool_call>\n{"name": <name>, "arguments": <object>}\n</tool_call><|im_end|>\n' }}{%- endif %}{%- for message in messages %}{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"#;

#[tokio::test]
async fn a_template_that_lists_tools_gets_them_natively() {
    let _turn = engine_lock().await;
    let load = || {
        let (runtime, text) = build_generator(load_model(&model_path())?, &EngineOptions::cpu())?.into_parts();
        let template = ChatTemplate::new(TOOLS_TEMPLATE, "", "<|im_end|>")?;
        Ok(Generator::new(runtime, text.tokenizer, Some(template)))
    };
    let limits = EngineLimits { max_queue: 2, max_batch: Some(1), kv_budget: None, speculative: Default::default() };
    let engine = EngineHandle::start(load, limits).unwrap();
    assert!(engine.text().native_tools());
    let listed = peregrine_server::openai::tools::Tools::from_request(Some(&tools()), None, None).unwrap().unwrap().openai_json();
    let question = vec![ChatMessage::new("user", "What is the weather in Paris?")];
    let expected = engine.text().prompt_ids(&Prompt::ChatWithTools { messages: question, tools: listed }).unwrap();
    let server = start(AppState::new(dist_with_index()).with_engine(engine.clone(), MODEL)).await;
    let v = answer(&server, ask(json!("required"))).await;
    assert_eq!(v["usage"]["prompt_tokens"], expected.len(), "the template's own listing is the prompt: {v}");
    assert!(!calls_of(&v).is_empty());
    engine.shutdown();
}

#[tokio::test]
async fn bad_tool_fields_are_400s_naming_them() {
    let _turn = engine_lock().await;
    let server = serve().await;
    let cases = [
        (json!({ "tools": [{ "type": "function", "function": { "name": "has space" } }] }), "tools[0].function.name"),
        (json!({ "tool_choice": { "type": "function", "function": { "name": "missing" } } }), "tool_choice.function.name"),
        (json!({ "tool_choice": "always" }), "tool_choice"),
        (json!({ "parallel_tool_calls": "yes" }), "parallel_tool_calls"),
        (json!({ "logprobs": true }), "logprobs"),
        (json!({ "response_format": { "type": "json_object" }, "tool_choice": "required" }), "tool_choice"),
        (json!({ "messages": [{ "role": "user", "content": "x", "tool_calls": [] }] }), "messages[0].tool_calls"),
        (
            json!({ "messages": [{ "role": "assistant", "content": null, "tool_calls": [{ "id": "c", "type": "function", "function": { "name": "get_time", "arguments": "{oops" } }] }] }),
            "messages[0].tool_calls[0].function.arguments",
        ),
    ];
    for (extra, param) in cases {
        let mut body = ask(json!("auto"));
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let (status, text) = post(&server, body).await;
        assert_eq!(status, 400, "{param}: {text}");
        let e: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(e["error"]["param"], param, "{text}");
        assert!(e["error"]["message"].as_str().unwrap().contains(param), "{text}");
    }
}

#[tokio::test]
async fn messages_answer_tool_use_blocks_streamed_and_not_and_take_tool_results() {
    let _turn = engine_lock().await;
    let server = serve().await;
    let anthropic_tools: Vec<Value> =
        tools().as_array().unwrap().iter().map(|t| json!({ "name": t["function"]["name"], "input_schema": t["function"]["parameters"] })).collect();
    let body = json!({
        "messages": [{ "role": "user", "content": "What is the weather in Paris?" }], "max_tokens": 120, "temperature": 0,
        "tools": anthropic_tools, "tool_choice": { "type": "tool", "name": "get_weather", "disable_parallel_tool_use": true },
    });
    let post_messages = |body: Value| post_to(&server, "/v1/messages", body);
    let (status, text) = post_messages(body.clone()).await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["stop_reason"], "tool_use", "{v}");
    let blocks = v["content"].as_array().unwrap();
    let uses: Vec<&Value> = blocks.iter().filter(|b| b["type"] == "tool_use").collect();
    assert_eq!(uses.len(), 1, "{v}");
    assert!(uses[0]["id"].as_str().unwrap().starts_with("toolu_") && uses[0]["name"] == "get_weather", "{v}");
    check_weather(&uses[0]["input"]);

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (status, text) = post_messages(streamed).await;
    assert_eq!(status, 200, "{text}");
    let events: Vec<Value> = text.lines().filter_map(|l| l.strip_prefix("data: ")).map(|d| serde_json::from_str(d).unwrap()).collect();
    let start = events.iter().find(|e| e["type"] == "content_block_start" && e["content_block"]["type"] == "tool_use").expect("a tool_use block");
    let index = &start["index"];
    let input: String = events
        .iter()
        .filter(|e| e["type"] == "content_block_delta" && &e["index"] == index)
        .map(|e| e["delta"]["partial_json"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(serde_json::from_str::<Value>(&input).unwrap(), uses[0]["input"], "streamed and whole calls agree");
    assert_eq!(events.iter().find(|e| e["type"] == "message_delta").unwrap()["delta"]["stop_reason"], "tool_use");

    let round_trip = json!({
        "messages": [
            { "role": "user", "content": "What is the weather in Paris?" },
            { "role": "assistant", "content": [uses[0].clone()] },
            { "role": "user", "content": [{ "type": "tool_result", "tool_use_id": uses[0]["id"], "content": "18 degrees, sunny" }] }
        ],
        "max_tokens": 24, "temperature": 0, "tools": body["tools"], "tool_choice": { "type": "none" },
    });
    let (status, text) = post_messages(round_trip).await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["content"][0]["type"], "text", "{v}");
    assert!(!v["content"][0]["text"].as_str().unwrap().is_empty(), "{v}");
}

#[tokio::test]
async fn responses_answer_function_call_items_streamed_and_not_and_take_outputs() {
    let _turn = engine_lock().await;
    let server = serve().await;
    let flat: Vec<Value> = tools()
        .as_array()
        .unwrap()
        .iter()
        .map(|t| json!({ "type": "function", "name": t["function"]["name"], "parameters": t["function"]["parameters"], "strict": true }))
        .collect();
    let body = json!({
        "input": "What is the weather in Paris?", "max_output_tokens": 120, "temperature": 0,
        "tools": flat, "tool_choice": "required", "parallel_tool_calls": false,
    });
    let post_responses = |body: Value| post_to(&server, "/v1/responses", body);
    let (status, text) = post_responses(body.clone()).await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(v["tool_choice"], "required");
    let calls: Vec<&Value> = v["output"].as_array().unwrap().iter().filter(|i| i["type"] == "function_call").collect();
    assert_eq!(calls.len(), 1, "{v}");
    assert!(calls[0]["call_id"].as_str().unwrap().starts_with("call_") && calls[0]["id"].as_str().unwrap().starts_with("fc_"), "{v}");
    let args: Value = serde_json::from_str(calls[0]["arguments"].as_str().unwrap()).unwrap();
    match calls[0]["name"].as_str().unwrap() {
        "get_weather" => check_weather(&args),
        _ => assert!(args["zone"].is_string(), "{args}"),
    }

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (status, text) = post_responses(streamed).await;
    assert_eq!(status, 200, "{text}");
    let events: Vec<Value> = text.lines().filter_map(|l| l.strip_prefix("data: ")).map(|d| serde_json::from_str(d).unwrap()).collect();
    let done = events.iter().find(|e| e["type"] == "response.function_call_arguments.done").expect("the call's arguments");
    assert_eq!(serde_json::from_str::<Value>(done["arguments"].as_str().unwrap()).unwrap(), args, "streamed and whole calls agree");
    let last = events.last().unwrap();
    assert_eq!(last["type"], "response.completed");
    assert!(last["response"]["output"].as_array().unwrap().iter().any(|i| i["type"] == "function_call"), "{last}");
    let numbers: Vec<u64> = events.iter().map(|e| e["sequence_number"].as_u64().unwrap()).collect();
    assert_eq!(numbers, (0..events.len() as u64).collect::<Vec<_>>());

    let round_trip = json!({
        "input": [
            { "role": "user", "content": "What is the weather in Paris?" },
            { "type": "function_call", "call_id": calls[0]["call_id"], "name": calls[0]["name"], "arguments": calls[0]["arguments"] },
            { "type": "function_call_output", "call_id": calls[0]["call_id"], "output": "18 degrees, sunny" }
        ],
        "max_output_tokens": 24, "temperature": 0, "tools": body["tools"], "tool_choice": "none",
    });
    let (status, text) = post_responses(round_trip).await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["output"][0]["type"], "message", "{v}");
}
