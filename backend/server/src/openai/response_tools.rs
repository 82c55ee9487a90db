//! Function tools on `/v1/responses`, in the Responses API's shapes over the chat
//! route's machinery (`tools.rs`, `tool_output.rs`): `tools` (`{type: "function", name,
//! description, parameters, strict}`), `tool_choice` (`none`, `auto`, `required`,
//! `{type: "function", name}`), `parallel_tool_calls`; `function_call` and
//! `function_call_output` input items; calls answered as `function_call` output items.

use peregrine_engine::ChatMessage;
use serde_json::{json, Map, Value};

use super::tool_output::Call;
use super::tools::{function_tool, history_calls, keyword_choice, parallel_of, Choice, Tools};
use crate::error::{Error, Result};

/// The request's tools; `None` without tools or with `tool_choice` `none`.
pub fn tools_of(tools: Option<&Value>, choice: Option<&Value>, parallel: Option<&Value>) -> Result<Option<Tools>> {
    let list = match tools {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let at = format!("tools[{i}]");
                let object = t.as_object().ok_or_else(|| Error::bad(&at, format!("{at} must be an object")))?;
                if object.get("type").and_then(Value::as_str) != Some("function") {
                    let why = "only function tools are supported";
                    return Err(Error::bad(&format!("{at}.type"), format!("{at}.type: {why}")));
                }
                function_tool(object, &at, &["type"])
            })
            .collect::<Result<Vec<_>>>()?,
        Some(_) => return Err(Error::bad("tools", "tools must be an array of function tools")),
    };
    let parallel = parallel_of(parallel)?;
    let choice = match choice {
        None | Some(Value::Null) => Some(Choice::Auto),
        Some(Value::String(s)) => keyword_choice(s, "{type: \"function\", name}")?,
        Some(Value::Object(o)) if o.get("type").and_then(Value::as_str) == Some("function") => {
            let name = o.get("name").and_then(Value::as_str).unwrap_or_default();
            if !list.iter().any(|t| t.name == name) {
                return Err(Error::bad("tool_choice.name", format!("tool_choice.name: `{}` is not one of the tools", crate::error::shorten(name))));
            }
            Some(Choice::Named(name.to_string()))
        }
        Some(_) => return Err(Error::bad("tool_choice", "tool_choice must be none, auto, required or {type: \"function\", name}")),
    };
    Tools::of(list, choice, parallel)
}

/// An input item that is a call or its result, as a chat message; `None` for any other
/// item (the caller reads messages).
pub fn input_item(item: &Map<String, Value>, at: &str) -> Result<Option<ChatMessage>> {
    let known = |keys: &[&str]| -> Result<()> {
        match item.keys().find(|k| !keys.contains(&k.as_str())) {
            Some(key) => Err(Error::bad(&format!("{at}.{key}"), format!("Unrecognized request argument supplied: {at}.{key}"))),
            None => Ok(()),
        }
    };
    match item.get("type").and_then(Value::as_str) {
        Some("function_call") => {
            known(&["type", "id", "call_id", "name", "arguments", "status"])?;
            let call = json!({ "id": item.get("call_id"), "type": "function", "function": { "name": item.get("name"), "arguments": item.get("arguments") } });
            Ok(Some(ChatMessage::new("assistant", history_calls(0, "", &[call]).map_err(|e| rename(e, at))?)))
        }
        Some("function_call_output") => {
            known(&["type", "id", "call_id", "output", "status"])?;
            let output = item.get("output").and_then(Value::as_str).ok_or_else(|| Error::bad(&format!("{at}.output"), format!("{at}.output must be a string")))?;
            Ok(Some(ChatMessage::new("tool", output)))
        }
        _ => Ok(None),
    }
}

/// A history error about the call at `at` (the chat route's paths do not apply here).
fn rename(e: Error, at: &str) -> Error {
    Error::bad(at, format!("{at}: {e}"))
}

/// A call as a `function_call` output item.
pub fn output_item(call: &Call, status: &str) -> Value {
    let id = format!("fc_{}", call.id.trim_start_matches("call_"));
    json!({ "id": id, "type": "function_call", "status": status, "call_id": call.id, "name": call.name, "arguments": call.arguments })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn function_tools_choices_and_call_items_read() {
        let tools = json!([{ "type": "function", "name": "get_time", "parameters": { "type": "object" }, "strict": true }]);
        let t = tools_of(Some(&tools), Some(&json!({ "type": "function", "name": "get_time" })), Some(&json!(false))).unwrap().unwrap();
        assert_eq!((t.choice.clone(), t.parallel), (Choice::Named("get_time".into()), false));
        let param = |tools: Value, choice: Value| tools_of(Some(&tools), Some(&choice), None).unwrap_err().param().unwrap().to_string();
        assert_eq!(param(json!([{ "type": "web_search" }]), json!("auto")), "tools[0].type");
        assert_eq!(param(json!([{ "type": "function", "name": "f", "paramters": {} }]), json!("auto")), "tools[0].paramters");
        assert_eq!(param(tools, json!({ "type": "function", "name": "nope" })), "tool_choice.name");
        let call = json!({ "type": "function_call", "call_id": "call_1", "name": "get_time", "arguments": "{\"zone\":\"UTC\"}" });
        let m = input_item(call.as_object().unwrap(), "input[1]").unwrap().unwrap();
        assert!(m.role == "assistant" && m.content.contains("\"name\":\"get_time\""), "{m:?}");
        let out = json!({ "type": "function_call_output", "call_id": "call_1", "output": "12:00" });
        assert_eq!(input_item(out.as_object().unwrap(), "input[2]").unwrap(), Some(ChatMessage::new("tool", "12:00")));
        let c = Call { id: "call_x".into(), name: "get_time".into(), arguments: "{}".into() };
        assert_eq!(output_item(&c, "completed")["id"], "fc_x");
    }
}
