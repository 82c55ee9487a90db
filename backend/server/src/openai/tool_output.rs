//! Tool calls in an answer, read back: the `<tool_call>` blocks (`tools.rs` writes the
//! format) become OpenAI's `tool_calls`, each with a fresh `call_…` id and its arguments
//! as a JSON string. While an answer streams, [`CallScanner`] passes text through until
//! a call may be starting, and holds the rest for the calls read at the end.

use serde_json::{json, Value};

use super::tools::{CALL_CLOSE, CALL_OPEN};
use crate::ids::item_id;

/// One call the model made.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub id: String,
    pub name: String,
    /// The arguments object, serialised (OpenAI sends a string).
    pub arguments: String,
}

impl Call {
    /// The call in a message's `tool_calls`.
    pub fn message_json(&self) -> Value {
        json!({ "id": self.id, "type": "function", "function": { "name": self.name, "arguments": self.arguments } })
    }

    /// The call as a streamed `tool_calls` delta entry (the whole call in one delta).
    pub fn delta_json(&self, index: usize) -> Value {
        json!({ "index": index, "id": self.id, "type": "function", "function": { "name": self.name, "arguments": self.arguments } })
    }
}

/// The text before the first call, and the calls of `answer`; `None` when it holds no
/// well-formed call (it is then plain text). A last call cut off by the length limit
/// (no closing line) is left out.
pub fn read_calls(answer: &str) -> Option<(String, Vec<Call>)> {
    let start = answer.find(CALL_OPEN)?;
    let mut rest = &answer[start..];
    let mut calls = Vec::new();
    while let Some(open) = rest.find(CALL_OPEN) {
        let body = &rest[open + CALL_OPEN.len()..];
        let Some(close) = body.find(CALL_CLOSE) else { break };
        let parsed: Value = serde_json::from_str(body[..close].trim()).ok()?;
        let name = parsed.get("name").and_then(Value::as_str)?.to_string();
        let arguments = match parsed.get("arguments") {
            Some(Value::String(s)) => s.clone(),
            Some(v) => v.to_string(),
            None => "{}".to_string(),
        };
        calls.push(Call { id: item_id("call"), name, arguments });
        rest = &body[close + CALL_CLOSE.len()..];
    }
    (!calls.is_empty()).then(|| (answer[..start].trim_end().to_string(), calls))
}

/// A streamed answer's text, split into what goes out as content now and what is held
/// (a call, or what may be the start of one).
#[derive(Debug, Default)]
pub struct CallScanner {
    /// Everything received.
    text: String,
    /// How much of `text` went out.
    sent: usize,
    /// A call started: nothing more goes out as content.
    in_call: bool,
}

impl CallScanner {
    /// Takes `piece` and returns the content that may go out now.
    pub fn push(&mut self, piece: &str) -> String {
        self.text.push_str(piece);
        if self.in_call {
            return String::new();
        }
        if let Some(at) = self.text[self.sent..].find(CALL_OPEN) {
            self.in_call = true;
            let out = self.text[self.sent..self.sent + at].to_string();
            self.sent += at;
            return out;
        }
        // Hold back a tail that could still grow into the opening line.
        let pending = &self.text[self.sent..];
        let hold = (1..CALL_OPEN.len()).rev().find(|&n| n <= pending.len() && pending.is_char_boundary(pending.len() - n) && CALL_OPEN.starts_with(&pending[pending.len() - n..])).unwrap_or(0);
        let out = pending[..pending.len() - hold].to_string();
        self.sent += out.len();
        out
    }

    /// At the end: the calls, if the held text holds any, else the held text itself
    /// (content that must still go out).
    pub fn finish(&self) -> Result<Vec<Call>, String> {
        let held = &self.text[self.sent..];
        match read_calls(held) {
            Some((_, calls)) if self.in_call => Ok(calls),
            _ => Err(held.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_read_with_the_text_before_them() {
        let answer = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\n";
        let (before, calls) = read_calls(answer).unwrap();
        assert_eq!(before, "Let me check.");
        assert_eq!(calls.iter().map(|c| (c.name.as_str(), c.arguments.as_str())).collect::<Vec<_>>(), [("get_weather", "{\"city\":\"Paris\"}"), ("get_time", "{}")]);
        assert!(calls[0].id.starts_with("call") && calls[0].id != calls[1].id);
        assert!(read_calls("no calls here").is_none());
        assert!(read_calls("<tool_call>\n{not json\n</tool_call>").is_none());
        let cut = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"f\", \"argu";
        assert_eq!(read_calls(cut).unwrap().1.len(), 1, "the cut-off call is left out");
        assert!(read_calls("<tool_call>\n{\"name\": \"f\"").is_none());
    }

    #[test]
    fn the_scanner_streams_text_and_holds_calls() {
        let mut s = CallScanner::default();
        let pieces = ["Sure", ", <to", "ol", "_call>\n{\"name\": \"f\", ", "\"arguments\": {\"a\": 1}}\n</tool_call>"];
        let out: Vec<String> = pieces.iter().map(|p| s.push(p)).collect();
        assert_eq!(out, ["Sure", ", ", "", "", ""]);
        let calls = s.finish().unwrap();
        assert_eq!((calls[0].name.as_str(), calls[0].arguments.as_str()), ("f", "{\"a\":1}"));

        let mut plain = CallScanner::default();
        assert_eq!(plain.push("a <"), "a ");
        assert_eq!(plain.push(" b and <t"), "< b and ");
        assert_eq!(plain.finish(), Err("<t".to_string()));
    }
}
