//! Tool calls on `/v1/chat/completions`, the request side: `tools` (functions with
//! JSON-schema `parameters`), `tool_choice` (`none`, `auto`, `required`, a named
//! function) and `parallel_tool_calls`, checked field by field; the tools told to the
//! model by the chat template where it lists tools and asks for `<tool_call>` blocks
//! (Qwen2.5's, Hermes'), else in a system message (the generic form); and the grammar of the answer: for `required` and a named function one
//! or more calls, for `auto` free text that may turn into calls at the opening line
//! (llguidance's lazy rule), every call's arguments following its tool's schema. Calls
//! are written as Qwen2.5 / Hermes write them, a JSON object between `<tool_call>`
//! lines; `tool_output.rs` reads them back.

use peregrine_engine::{ChatMessage, GrammarSource, Prompt};
use serde_json::{json, Value};

use crate::error::{Error, Result};

/// The line before each call.
pub const CALL_OPEN: &str = "<tool_call>";
/// The line after each call.
pub const CALL_CLOSE: &str = "</tool_call>";

/// One function the model may call.
#[derive(Debug, Clone)]
pub struct Tool {
    pub name: String,
    pub description: Option<String>,
    /// The JSON schema of its arguments.
    pub parameters: Value,
}

/// What `tool_choice` asks.
#[derive(Debug, Clone, PartialEq)]
pub enum Choice {
    /// The model decides between text and calls; a call, once opened, is constrained.
    Auto,
    /// One or more calls, constrained to the tools' schemas.
    Required,
    /// Calls of this function only, constrained to its schema.
    Named(String),
}

/// A request's tools and how they may be used.
#[derive(Debug, Clone)]
pub struct Tools {
    pub tools: Vec<Tool>,
    pub choice: Choice,
    /// More than one call in an answer (`parallel_tool_calls`, default true).
    pub parallel: bool,
}

impl Tools {
    /// The request's tool fields; `None` when there are no tools or `tool_choice` is
    /// `none` (the tools are then not shown to the model at all).
    pub fn from_request(tools: Option<&Value>, choice: Option<&Value>, parallel: Option<&Value>) -> Result<Option<Tools>> {
        let list = match tools {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items.iter().enumerate().map(|(i, t)| tool(i, t)).collect::<Result<Vec<_>>>()?,
            Some(_) => return Err(Error::bad("tools", "tools must be an array of {type: \"function\", function: {...}}")),
        };
        let parallel = parallel_of(parallel)?;
        let choice = match choice {
            None | Some(Value::Null) => Some(Choice::Auto),
            Some(Value::String(s)) => keyword_choice(s, "{type: \"function\", function: {name}}")?,
            Some(Value::Object(o)) => {
                let name = o.get("function").and_then(|f| f.get("name")).and_then(Value::as_str);
                if o.get("type").and_then(Value::as_str) != Some("function") || name.is_none() {
                    return Err(Error::bad("tool_choice", "a named tool_choice is {type: \"function\", function: {name}}"));
                }
                let name = name.unwrap_or_default().to_string();
                if !list.iter().any(|t| t.name == name) {
                    return Err(Error::bad("tool_choice.function.name", format!("tool_choice.function.name: `{}` is not one of the tools", crate::error::shorten(&name))));
                }
                Some(Choice::Named(name))
            }
            Some(_) => return Err(Error::bad("tool_choice", "tool_choice must be a string or an object")),
        };
        Tools::of(list, choice, parallel)
    }

    /// A request's checked tools and choice (`None`: `none`); `None` when there are no
    /// tools, and a 400 naming `tool_choice` when it asks for a call of none.
    pub fn of(tools: Vec<Tool>, choice: Option<Choice>, parallel: bool) -> Result<Option<Tools>> {
        if tools.is_empty() {
            return match choice {
                Some(Choice::Required | Choice::Named(_)) => Err(Error::bad("tool_choice", "tool_choice asks for a call but there are no tools")),
                _ => Ok(None),
            };
        }
        Ok(choice.map(|choice| Tools { tools, choice, parallel }))
    }

    /// The grammar the answer follows, as the field `tool_choice` asks it; `None` under
    /// `auto` on a runtime that applies no grammar (its calls are then read unchecked).
    pub fn asked(&self, follows_grammars: bool) -> Option<crate::structured::Asked> {
        (self.choice != Choice::Auto || follows_grammars).then(|| crate::structured::Asked { param: "tool_choice".into(), source: self.grammar() })
    }

    /// The prompt of `conversation` with these tools: listed by the chat template itself
    /// where it asks for the same call blocks (`native`), else in the generic system
    /// message (appended to the conversation's own, or added first).
    pub fn prompt(&self, mut conversation: Vec<ChatMessage>, native: bool) -> Prompt {
        if native {
            return Prompt::ChatWithTools { messages: conversation, tools: self.openai_json() };
        }
        match conversation.first_mut() {
            Some(first) if first.role == "system" => first.content = format!("{}\n\n{}", first.content, self.instructions()),
            _ => conversation.insert(0, ChatMessage::new("system", self.instructions())),
        }
        Prompt::Chat(conversation)
    }

    /// The prompt of `conversation` with `tools` if there are any ([`Tools::prompt`]), else
    /// the conversation alone: what every chat-shaped route feeds the model.
    pub fn prompt_of(tools: Option<&Tools>, conversation: Vec<ChatMessage>, native: bool) -> Prompt {
        match tools {
            Some(t) => t.prompt(conversation, native),
            None => Prompt::Chat(conversation),
        }
    }

    /// The tools as OpenAI's objects, for a chat template that lists them itself.
    pub fn openai_json(&self) -> Vec<Value> {
        self.tools
            .iter()
            .map(|t| json!({ "type": "function", "function": { "name": t.name, "description": t.description, "parameters": t.parameters } }))
            .collect()
    }

    /// The system text that tells the model its tools and how to call them (the generic
    /// form, for templates that do not list tools themselves).
    pub fn instructions(&self) -> String {
        let listed: Vec<Value> = self
            .tools
            .iter()
            .map(|t| json!({ "name": t.name, "description": t.description, "parameters": t.parameters }))
            .collect();
        let listed = listed.iter().map(Value::to_string).collect::<Vec<_>>().join("\n");
        let must = match &self.choice {
            Choice::Auto => "If a tool helps, call it; otherwise answer in text.".to_string(),
            Choice::Required => "Answer with tool calls only.".to_string(),
            Choice::Named(name) => format!("Answer by calling `{name}`."),
        };
        let how_many = if self.parallel { "one block per call" } else { "a single call" };
        format!(
            "You can call these tools (each with a JSON schema of its arguments):\n{listed}\n\
             To call a tool, write {how_many}:\n{CALL_OPEN}\n{{\"name\": <tool name>, \"arguments\": <arguments object>}}\n{CALL_CLOSE}\n{must}"
        )
    }

    /// The grammar of the answer: calls of the allowed tools for `required` and a named
    /// function; under `auto`, text or calls, each call's opening line ending a lazy
    /// stretch of text (the text stays free, a call follows its schema).
    pub fn grammar(&self) -> GrammarSource {
        let allowed: Vec<&Tool> = match &self.choice {
            Choice::Auto | Choice::Required => self.tools.iter().collect(),
            Choice::Named(name) => self.tools.iter().filter(|t| &t.name == name).collect(),
        };
        let calls: Vec<Value> = allowed
            .iter()
            .map(|t| {
                json!({
                    "type": "object",
                    "properties": { "name": { "const": t.name }, "arguments": t.parameters },
                    "required": ["name", "arguments"],
                    "additionalProperties": false
                })
            })
            .collect();
        let schema = peregrine_engine::bounded_json_whitespace(json!({ "anyOf": calls }));
        let repeat = if self.parallel { "+" } else { "" };
        let quote = |s: String| serde_json::to_string(&s).unwrap_or_default();
        let (open, close) = (quote(CALL_OPEN.to_string()), quote(format!("\n{CALL_CLOSE}\n")));
        let calls = format!("body: %json {schema}\n");
        GrammarSource::Lark(match self.choice {
            Choice::Auto => format!(
                "start: free | call{repeat}\nfree: TEXT\ncall: head \"\\n\" body {close}\nhead[lazy]: TEXT {open}\n{calls}TEXT: /(\\n|.)*/\n"
            ),
            _ => format!("start: call{repeat}\ncall: {open} \"\\n\" body {close}\n{calls}"),
        })
    }
}

/// `parallel_tool_calls`: true unless it says false.
pub fn parallel_of(value: Option<&Value>) -> Result<bool> {
    match value {
        None | Some(Value::Null) => Ok(true),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(Error::bad("parallel_tool_calls", "parallel_tool_calls must be true or false")),
    }
}

/// A `tool_choice` keyword (`None`: `none`); `named` spells the API's named form for the
/// message.
pub fn keyword_choice(keyword: &str, named: &str) -> Result<Option<Choice>> {
    match keyword {
        "none" => Ok(None),
        "auto" => Ok(Some(Choice::Auto)),
        "required" => Ok(Some(Choice::Required)),
        _ => Err(Error::bad("tool_choice", format!("tool_choice must be none, auto, required or {named}"))),
    }
}

/// An assistant turn of the history (message `i`, its text `content`) with its
/// `tool_calls` written as the model writes calls, so the next turn reads them back.
pub fn history_calls(i: usize, content: &str, calls: &[Value]) -> Result<String> {
    let mut out = content.to_string();
    for (j, call) in calls.iter().enumerate() {
        let at = format!("messages[{i}].tool_calls[{j}]");
        let function = call.get("function").and_then(Value::as_object);
        let name = function.and_then(|f| f.get("name")).and_then(Value::as_str);
        let (Some(function), Some(name)) = (function, name) else {
            return Err(Error::bad(&format!("{at}.function"), format!("{at} must be {{id, type: \"function\", function: {{name, arguments}}}}")));
        };
        // OpenAI sends the arguments as a JSON string; an object is taken as well.
        let arguments = match function.get("arguments") {
            Some(Value::String(s)) => serde_json::from_str::<Value>(s)
                .map_err(|e| Error::bad(&format!("{at}.function.arguments"), format!("{at}.function.arguments is not JSON: {e}")))?,
            Some(v) => v.clone(),
            None => json!({}),
        };
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&format!("{CALL_OPEN}\n{}\n{CALL_CLOSE}", json!({ "name": name, "arguments": arguments })));
    }
    Ok(out)
}

/// Tool `i` of `tools`: `{type: "function", function: {name, description, parameters, strict}}`.
fn tool(i: usize, value: &Value) -> Result<Tool> {
    let at = format!("tools[{i}]");
    let Some(object) = value.as_object() else { return Err(Error::bad(&at, format!("{at} must be an object"))) };
    if let Some(key) = object.keys().find(|k| !matches!(k.as_str(), "type" | "function")) {
        let field = format!("{at}.{key}");
        return Err(Error::bad(&field, format!("Unrecognized request argument supplied: {field}")));
    }
    if object.get("type").and_then(Value::as_str) != Some("function") {
        return Err(Error::bad(&format!("{at}.type"), format!("{at}.type must be \"function\"")));
    }
    let f_at = format!("{at}.function");
    let Some(function) = object.get("function").and_then(Value::as_object) else {
        return Err(Error::bad(&f_at, format!("{f_at} is required (an object)")));
    };
    function_tool(function, &f_at, &[])
}

/// A function's `{name, description, parameters, strict}` (and the `also` fields, which
/// the caller checked) at `f_at`.
pub fn function_tool(function: &serde_json::Map<String, Value>, f_at: &str, also: &[&str]) -> Result<Tool> {
    let known = |k: &str| matches!(k, "name" | "description" | "parameters" | "strict") || also.contains(&k);
    if let Some(key) = function.keys().find(|k| !known(k)) {
        let field = format!("{f_at}.{key}");
        return Err(Error::bad(&field, format!("Unrecognized request argument supplied: {field}")));
    }
    let name = function.get("name").and_then(Value::as_str).unwrap_or_default();
    let valid = !name.is_empty() && name.len() <= 64 && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !valid {
        return Err(Error::bad(&format!("{f_at}.name"), format!("{f_at}.name must be 1 to 64 letters, digits, underscores or dashes")));
    }
    let parameters = match function.get("parameters") {
        None | Some(Value::Null) => json!({ "type": "object", "properties": {} }),
        Some(p) if p.is_object() => p.clone(),
        Some(_) => return Err(Error::bad(&format!("{f_at}.parameters"), format!("{f_at}.parameters must be a JSON schema object"))),
    };
    let description = function.get("description").and_then(Value::as_str).map(str::to_string);
    Ok(Tool { name: name.to_string(), description, parameters })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weather() -> Value {
        json!([{ "type": "function", "function": { "name": "get_weather", "parameters": { "type": "object", "properties": { "city": { "type": "string" } }, "required": ["city"] } } }])
    }

    #[test]
    fn choices_read_and_none_hides_the_tools() {
        let tools = weather();
        let read = |choice: Value| Tools::from_request(Some(&tools), Some(&choice), None).unwrap().map(|t| t.choice);
        assert_eq!(read(json!("auto")), Some(Choice::Auto));
        assert_eq!(read(json!("required")), Some(Choice::Required));
        assert_eq!(read(json!("none")), None);
        assert_eq!(read(json!({ "type": "function", "function": { "name": "get_weather" } })), Some(Choice::Named("get_weather".into())));
        assert!(Tools::from_request(Some(&json!([])), None, None).unwrap().is_none());
        let t = Tools::from_request(Some(&tools), None, Some(&json!(false))).unwrap().unwrap();
        let GrammarSource::Lark(lark) = t.grammar() else { panic!("a Lark grammar") };
        assert!(!t.parallel && lark.starts_with("start: free | call\n") && lark.contains("head[lazy]: TEXT \"<tool_call>\""), "{lark}");
        assert!(t.instructions().contains("get_weather") && t.instructions().contains(CALL_OPEN));
    }

    #[test]
    fn required_calls_follow_the_tools_schemas() {
        let t = Tools::from_request(Some(&weather()), Some(&json!("required")), Some(&json!(false))).unwrap().unwrap();
        let GrammarSource::Lark(lark) = t.grammar() else { panic!("a Lark grammar") };
        assert!(lark.starts_with("start: call\n") && lark.contains("\"const\":\"get_weather\""), "{lark}");
    }

    #[test]
    fn mistakes_name_their_field() {
        let param = |tools: Value, choice: Value| {
            Tools::from_request(Some(&tools), Some(&choice), None).unwrap_err().param().unwrap().to_string()
        };
        assert_eq!(param(json!([{ "type": "function", "function": { "name": "a b" } }]), json!("auto")), "tools[0].function.name");
        assert_eq!(param(json!([{ "type": "retrieval" }]), json!("auto")), "tools[0].type");
        assert_eq!(param(json!([{ "type": "function", "function": { "name": "f", "parametres": {} } }]), json!("auto")), "tools[0].function.parametres");
        assert_eq!(param(weather(), json!({ "type": "function", "function": { "name": "other" } })), "tool_choice.function.name");
        assert_eq!(param(weather(), json!("sometimes")), "tool_choice");
        assert_eq!(param(json!([]), json!("required")), "tool_choice");
    }
}
