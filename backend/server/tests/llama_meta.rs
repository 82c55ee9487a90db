//! llama-server's description routes on the default model over real HTTP: `/props`
//! describes the model and the defaults, `/apply-template` gives the exact prompt the
//! chat route feeds the model (its token count is the chat answer's prompt_tokens).

mod common;

use common::{dist_with_index, engine_lock, real_engine, start, Server};
use peregrine_server::app::AppState;
use serde_json::{json, Value};

const MODEL_ID: &str = "SmolLM2-135M-Instruct.Q4_1";

async fn serve() -> Server {
    start(AppState::new(dist_with_index()).with_engine(real_engine(), MODEL_ID)).await
}

async fn post(server: &Server, path: &str, body: Value) -> (u16, Value) {
    let res = reqwest::Client::new().post(server.url(path)).json(&body).send().await.unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn props_describe_the_model_and_the_defaults() {
    let _turn = engine_lock().await;
    let server = serve().await;
    let props: Value = reqwest::get(server.url("/props")).await.unwrap().json().await.unwrap();
    let info: Value = reqwest::get(server.url("/api/info")).await.unwrap().json().await.unwrap();
    assert_eq!(props["model_alias"], MODEL_ID);
    assert_eq!(props["default_generation_settings"]["n_ctx"], info["context_length"], "{props}");
    assert_eq!(props["total_slots"], info["limits"]["max_batch"], "{props}");
    assert_eq!(props["default_generation_settings"]["params"]["temperature"], 1.0);
    let template = props["chat_template"].as_str().unwrap_or_default();
    assert!(template.contains("<|im_start|>"), "SmolLM2's template is ChatML: {template}");
    assert_eq!(props["eos_token"], "<|im_end|>", "{props}");
    assert_eq!(props["modalities"], json!({ "vision": false, "audio": false }));
}

#[tokio::test]
async fn apply_template_gives_the_prompt_the_chat_route_runs() {
    let _turn = engine_lock().await;
    let server = serve().await;
    let messages = json!([{ "role": "system", "content": "Be brief." }, { "role": "user", "content": "Name a prime." }]);
    let (status, rendered) = post(&server, "/apply-template", json!({ "messages": messages })).await;
    assert_eq!(status, 200, "{rendered}");
    let prompt = rendered["prompt"].as_str().unwrap_or_default().to_string();
    assert!(prompt.contains("<|im_start|>user\nName a prime.<|im_end|>"), "{prompt}");
    assert!(prompt.ends_with("<|im_start|>assistant\n"), "the generation prompt closes it: {prompt}");
    // The same conversation through the chat route: its prompt is this text's tokens.
    let (_, tokens) = post(&server, "/tokenize", json!({ "content": prompt })).await;
    let (status, chat) = post(&server, "/v1/chat/completions", json!({ "messages": messages, "max_tokens": 1 })).await;
    assert_eq!(status, 200, "{chat}");
    assert_eq!(chat["usage"]["prompt_tokens"].as_u64(), tokens["tokens"].as_array().map(|t| t.len() as u64), "{chat}");
    // Tools are told to the model as the chat route tells them.
    let tools = json!([{ "type": "function", "function": { "name": "get_weather", "parameters": { "type": "object", "properties": {} } } }]);
    let (status, with_tools) = post(&server, "/apply-template", json!({ "messages": messages, "tools": tools })).await;
    assert_eq!(status, 200, "{with_tools}");
    assert!(with_tools["prompt"].as_str().unwrap_or_default().contains("get_weather"), "{with_tools}");
    // Client mistakes are named.
    let (status, err) = post(&server, "/apply-template", json!({ "messages": messages, "temperature": 0.5 })).await;
    assert!(status == 400 && err["message"].as_str().unwrap_or_default().contains("temperature"), "{err}");
    let (status, err) = post(&server, "/apply-template", json!({ "messages": [] })).await;
    assert_eq!(status, 400, "{err}");
    let (status, err) = post(&server, "/apply-template", json!({ "messages": messages, "model": "gpt-4" })).await;
    assert_eq!(status, 404, "{err}");
}
