//! Tool use on `/v1/messages`, in Anthropic's shapes over the chat route's machinery
//! (`openai/tools.rs`, `openai/tool_output.rs`): `tools` (`{name, description,
//! input_schema}`), `tool_choice` (`auto`, `any`, `tool` with its `name`, `none`;
//! `disable_parallel_tool_use`), `tool_use` blocks in assistant turns and `tool_result`
//! blocks in user turns; calls answered as `tool_use` content blocks.

use peregrine_engine::ChatMessage;
use serde_json::{json, Value};

use crate::error::{Error, Result};
use crate::openai::tool_output::Call;
use crate::openai::tools::{history_calls, Choice, Tool, Tools};

/// The request's tools; `None` without tools or with `tool_choice` `none`.
pub fn tools_of(tools: Option<&Value>, choice: Option<&Value>) -> Result<Option<Tools>> {
    let list = match tools {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items.iter().enumerate().map(|(i, t)| tool(i, t)).collect::<Result<Vec<_>>>()?,
        Some(_) => return Err(Error::bad("tools", "tools: must be a list of {name, description, input_schema}")),
    };
    let (choice, parallel) = match choice {
        None | Some(Value::Null) => (Some(Choice::Auto), true),
        Some(Value::Object(o)) => {
            if let Some(key) = o.keys().find(|k| !matches!(k.as_str(), "type" | "name" | "disable_parallel_tool_use")) {
                return Err(Error::bad(&format!("tool_choice.{key}"), format!("tool_choice.{key}: Extra inputs are not permitted")));
            }
            let parallel = !o.get("disable_parallel_tool_use").and_then(Value::as_bool).unwrap_or(false);
            let choice = match o.get("type").and_then(Value::as_str) {
                Some("auto") => Some(Choice::Auto),
                Some("any") => Some(Choice::Required),
                Some("none") => None,
                Some("tool") => {
                    let name = o.get("name").and_then(Value::as_str).unwrap_or_default();
                    if !list.iter().any(|t| t.name == name) {
                        return Err(Error::bad("tool_choice.name", format!("tool_choice.name: `{}` is not one of the tools", crate::error::shorten(name))));
                    }
                    Some(Choice::Named(name.to_string()))
                }
                _ => return Err(Error::bad("tool_choice.type", "tool_choice.type: must be auto, any, tool or none")),
            };
            (choice, parallel)
        }
        Some(_) => return Err(Error::bad("tool_choice", "tool_choice: must be an object such as {\"type\": \"auto\"}")),
    };
    Tools::of(list, choice, parallel)
}

/// Tool `i`: `{name, description, input_schema}` (`type: "custom"` and `cache_control` too).
fn tool(i: usize, value: &Value) -> Result<Tool> {
    let at = format!("tools[{i}]");
    let Some(object) = value.as_object() else { return Err(Error::bad(&at, format!("{at}: must be an object"))) };
    if let Some(key) = object.keys().find(|k| !matches!(k.as_str(), "name" | "description" | "input_schema" | "type" | "cache_control")) {
        return Err(Error::bad(&format!("{at}.{key}"), format!("{at}.{key}: Extra inputs are not permitted")));
    }
    if object.get("type").is_some_and(|t| t.as_str() != Some("custom")) {
        return Err(Error::bad(&format!("{at}.type"), format!("{at}.type: only custom tools are supported")));
    }
    let name = object.get("name").and_then(Value::as_str).unwrap_or_default();
    if name.is_empty() || name.len() > 64 || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return Err(Error::bad(&format!("{at}.name"), format!("{at}.name: must be 1 to 64 letters, digits, underscores or dashes")));
    }
    let parameters = match object.get("input_schema") {
        Some(s) if s.is_object() => s.clone(),
        _ => return Err(Error::bad(&format!("{at}.input_schema"), format!("{at}.input_schema: a JSON schema object is required"))),
    };
    let description = object.get("description").and_then(Value::as_str).map(str::to_string);
    Ok(Tool { name: name.to_string(), description, parameters })
}

/// Whether a turn's content holds tool blocks (it is then read by [`turn`]).
pub fn has_tool_blocks(content: &Value) -> bool {
    content.as_array().is_some_and(|blocks| {
        blocks.iter().any(|b| matches!(b.get("type").and_then(Value::as_str), Some("tool_use" | "tool_result")))
    })
}

/// A turn with tool blocks as chat messages: an assistant's text and `tool_use` blocks
/// as one message with its calls written out; a user's `tool_result` blocks as `tool`
/// messages, then its text.
pub fn turn(role: &str, blocks: &[Value], at: &str) -> Result<Vec<ChatMessage>> {
    let (mut text, mut calls, mut results) = (String::new(), Vec::new(), Vec::new());
    for (j, block) in blocks.iter().enumerate() {
        let at = format!("{at}[{j}]");
        let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
        match (role, kind) {
            (_, "text") => text.push_str(block.get("text").and_then(Value::as_str).unwrap_or_default()),
            ("assistant", "tool_use") => {
                let name = block.get("name").and_then(Value::as_str);
                let id = block.get("id").and_then(Value::as_str).unwrap_or_default();
                let Some(name) = name else { return Err(Error::bad(&format!("{at}.name"), format!("{at}.name: Field required"))) };
                let input = block.get("input").cloned().unwrap_or_else(|| json!({}));
                calls.push(json!({ "id": id, "type": "function", "function": { "name": name, "arguments": input } }));
            }
            ("user", "tool_result") => {
                let content = match block.get("content") {
                    None | Some(Value::Null) => String::new(),
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Array(parts)) => parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect(),
                    Some(_) => return Err(Error::bad(&format!("{at}.content"), format!("{at}.content: must be a string or text blocks"))),
                };
                results.push(ChatMessage::new("tool", content));
            }
            _ => {
                return Err(Error::bad(
                    &format!("{at}.type"),
                    format!("{at}.type: `{}` blocks are not supported in a {role} turn", crate::error::shorten(kind)),
                ))
            }
        }
    }
    if role == "assistant" {
        return Ok(vec![ChatMessage::new("assistant", history_calls(0, &text, &calls)?)]);
    }
    if !text.is_empty() {
        results.push(ChatMessage::new("user", text));
    }
    Ok(results)
}

/// A call as a `tool_use` content block.
pub fn block(call: &Call) -> Value {
    let input: Value = serde_json::from_str(&call.arguments).unwrap_or_else(|_| json!({}));
    let id = format!("toolu_{}", call.id.trim_start_matches("call_"));
    json!({ "type": "tool_use", "id": id, "name": call.name, "input": input })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anthropic_tools_and_choices_read() {
        let tools = json!([{ "name": "get_weather", "input_schema": { "type": "object", "properties": { "city": { "type": "string" } } } }]);
        let read = |choice: Value| tools_of(Some(&tools), Some(&choice)).unwrap().map(|t| (t.choice, t.parallel));
        assert_eq!(read(json!({ "type": "any" })), Some((Choice::Required, true)));
        assert_eq!(read(json!({ "type": "tool", "name": "get_weather", "disable_parallel_tool_use": true })), Some((Choice::Named("get_weather".into()), false)));
        assert_eq!(read(json!({ "type": "none" })), None);
        let param = |t: Value, c: Value| tools_of(Some(&t), Some(&c)).unwrap_err().param().unwrap().to_string();
        assert_eq!(param(json!([{ "name": "f" }]), json!({ "type": "auto" })), "tools[0].input_schema");
        assert_eq!(param(tools.clone(), json!({ "type": "tool", "name": "x" })), "tool_choice.name");
        assert_eq!(param(tools, json!({ "type": "sometimes" })), "tool_choice.type");
    }

    #[test]
    fn tool_turns_become_messages() {
        let assistant = [json!({ "type": "text", "text": "Checking." }), json!({ "type": "tool_use", "id": "toolu_1", "name": "f", "input": { "a": 1 } })];
        let m = turn("assistant", &assistant, "messages[1].content").unwrap();
        assert_eq!(m.len(), 1);
        assert!(m[0].content.starts_with("Checking.\n<tool_call>\n") && m[0].content.contains("\"name\":\"f\""), "{}", m[0].content);
        let user = [json!({ "type": "tool_result", "tool_use_id": "toolu_1", "content": "42" }), json!({ "type": "text", "text": "Thanks" })];
        let m = turn("user", &user, "messages[2].content").unwrap();
        assert_eq!(m, [ChatMessage::new("tool", "42"), ChatMessage::new("user", "Thanks")]);
        let call = Call { id: "call_abc".into(), name: "f".into(), arguments: "{\"a\":1}".into() };
        assert_eq!(block(&call), json!({ "type": "tool_use", "id": "toolu_abc", "name": "f", "input": { "a": 1 } }));
    }
}
