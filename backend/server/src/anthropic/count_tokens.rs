//! `POST /v1/messages/count_tokens`: the tokens a Messages request's prompt takes
//! (`system`, the turns and the tools, rendered as `/v1/messages` renders them),
//! without running it: `{input_tokens}`.

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::AnthropicError;
use super::messages::conversation;
use super::tool_use;
use crate::app::AppState;
use crate::extract::JsonBody;
use crate::openai::tools::Tools;
use crate::request_context::Caller;

/// Body of `POST /v1/messages/count_tokens`: the prompt fields of a Messages request.
#[derive(Debug, Deserialize)]
pub struct CountRequest {
    pub model: Option<String>,
    pub messages: Vec<Value>,
    pub system: Option<Value>,
    pub tools: Option<Value>,
    pub tool_choice: Option<Value>,
}

impl crate::fields::Fields for CountRequest {
    const ROUTE: &'static str = "/v1/messages/count_tokens";
    const ACCEPTED: &'static [&'static [&'static str]] = &[&["model", "messages", "system", "tools", "tool_choice"], &["cache_control"]];
}

/// Counts the prompt's tokens on the tokenizer pool, within the client's in-flight limit.
pub async fn count_tokens(
    State(state): State<AppState>,
    caller: Caller,
    body: crate::error::Result<JsonBody<CountRequest>>,
) -> Result<Json<Value>, AnthropicError> {
    let JsonBody(req) = body?;
    let engine = state.engine.get()?;
    engine.check_model(req.model.as_deref())?;
    let tools = tool_use::tools_of(req.tools.as_ref(), req.tool_choice.as_ref())?;
    let turns = conversation(req.system.as_ref(), &req.messages)?;
    let input = Tools::prompt_of(tools.as_ref(), turns, engine.handle.text().native_tools());
    let _guard = crate::jobs::client_slot(&state, caller.client)?;
    let ids = crate::prompt::tokenize(&engine, input, "messages").await?;
    Ok(Json(json!({ "input_tokens": ids.len() })))
}
