//! llama-server's description routes: `GET /props` (the model, its chat template and
//! special tokens, the server's defaults and batch size) and `POST /apply-template`
//! (the prompt a chat request becomes, without running it).

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::app::AppState;
use crate::error::{Error, Result};
use crate::extract::JsonBody;
use crate::openai::chat::{messages, MessageIn};
use crate::openai::tools::Tools;
use crate::request_context::Caller;

/// Body of `POST /apply-template`: a chat request's conversation and tools.
#[derive(Deserialize)]
pub struct ApplyTemplateRequest {
    pub messages: Vec<MessageIn>,
    pub tools: Option<Value>,
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<Value>,
    /// Checked against the served names, as on the chat route.
    pub model: Option<String>,
}

impl crate::fields::Fields for ApplyTemplateRequest {
    const ROUTE: &'static str = "/apply-template";
    const ACCEPTED: &'static [&'static [&'static str]] = &[&["messages", "tools", "tool_choice", "parallel_tool_calls", "model"]];
}

/// `{prompt}`: the text `/v1/chat/completions` would give the model for these messages
/// and tools (the template's generation prompt included), rendered on the tokenizer pool.
pub async fn apply_template(
    State(state): State<AppState>,
    caller: Caller,
    body: Result<JsonBody<ApplyTemplateRequest>>,
) -> Result<Json<Value>> {
    let JsonBody(req) = body?;
    let engine = state.engine.get()?;
    engine.check_model(req.model.as_deref())?;
    let tools = Tools::from_request(req.tools.as_ref(), req.tool_choice.as_ref(), req.parallel_tool_calls.as_ref())?;
    let conversation = messages(&req.messages)?;
    let text = engine.handle.text().clone();
    let prompt = Tools::prompt_of(tools.as_ref(), conversation, text.native_tools());
    let _guard = crate::jobs::client_slot(&state, caller.client)?;
    let rendered = crate::blocking::tokenizer_task(move || text.prompt_text(&prompt)).await?.map_err(|e| Error::bad("messages", e.to_string()))?;
    Ok(Json(json!({ "prompt": rendered })))
}

/// The loaded model and the server's defaults, in llama-server's field names where they
/// mean the same (`default_generation_settings.params` are what a request gets for the
/// fields it leaves out; the seed is random per request, so it is null).
pub async fn props(State(state): State<AppState>) -> Result<Json<Value>> {
    let engine = state.engine.get()?;
    let info = engine.handle.info();
    let text = engine.handle.text();
    let special = |id: Option<u32>| id.map(|i| text.token_str(i));
    let tokenizer = text.tokenizer.as_ref();
    Ok(Json(json!({
        "model_alias": engine.model_id(),
        "model_name": info.model_name,
        "total_slots": info.max_batch,
        "default_generation_settings": {
            "n_ctx": info.context_length,
            "params": {
                "n_predict": state.settings.default_max_tokens,
                "temperature": crate::openai::params::DEFAULT_TEMPERATURE,
                "top_k": 0,
                "top_p": 1.0,
                "min_p": 0.0,
                "repeat_penalty": 1.0,
                "presence_penalty": 0.0,
                "frequency_penalty": 0.0,
                "seed": null,
            },
        },
        "chat_template": tokenizer.and_then(|t| t.chat_template()),
        "bos_token": special(tokenizer.and_then(|t| t.bos_id())),
        "eos_token": special(tokenizer.and_then(|t| t.eos_id())),
        "modalities": { "vision": false, "audio": false },
        "infill": peregrine_engine::infill::supported(text).is_ok(),
        "backend": info.backend,
        "build_info": format!("peregrine {}", env!("CARGO_PKG_VERSION")),
    })))
}
