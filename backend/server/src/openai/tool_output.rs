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

/// A piece of an answer with calls, in the order the model wrote them.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    /// Text outside the calls (trimmed, never empty).
    Text(String),
    Call(Call),
}

/// `answer` as its text and calls in order; `None` when it holds no well-formed call
/// (it is then plain text). A last call cut off by the length limit (no closing line) is
/// left out with whatever follows its opening.
pub fn read_parts(answer: &str) -> Option<Vec<Part>> {
    let mut parts = Vec::new();
    let text = |t: &str, parts: &mut Vec<Part>| {
        let t = t.trim();
        if !t.is_empty() {
            parts.push(Part::Text(t.to_string()));
        }
    };
    let mut rest = answer;
    let mut calls = 0;
    while let Some(open) = rest.find(CALL_OPEN) {
        let body = &rest[open + CALL_OPEN.len()..];
        let Some(close) = body.find(CALL_CLOSE) else {
            text(&rest[..open], &mut parts);
            rest = "";
            break;
        };
        let parsed: Value = serde_json::from_str(body[..close].trim()).ok()?;
        let name = parsed.get("name").and_then(Value::as_str)?.to_string();
        let arguments = match parsed.get("arguments") {
            Some(Value::String(s)) => s.clone(),
            Some(v) => v.to_string(),
            None => "{}".to_string(),
        };
        text(&rest[..open], &mut parts);
        parts.push(Part::Call(Call { id: item_id("call"), name, arguments }));
        calls += 1;
        rest = &body[close + CALL_CLOSE.len()..];
    }
    text(rest, &mut parts);
    (calls > 0).then_some(parts)
}

/// The text of `parts` as one string (paragraphs in order), for APIs whose answer has
/// one text beside its calls.
pub fn joined_text(parts: &[Part]) -> String {
    let texts: Vec<&str> = parts
        .iter()
        .filter_map(|p| match p {
            Part::Text(t) => Some(t.as_str()),
            Part::Call(_) => None,
        })
        .collect();
    texts.join("\n\n")
}

/// The calls of `parts`, in order.
pub fn calls_of(parts: &[Part]) -> Vec<Call> {
    parts
        .iter()
        .filter_map(|p| match p {
            Part::Call(c) => Some(c.clone()),
            Part::Text(_) => None,
        })
        .collect()
}

/// All the text of `answer` (before, between and after its calls) and its calls; `None`
/// when it holds no well-formed call.
pub fn read_calls(answer: &str) -> Option<(String, Vec<Call>)> {
    read_parts(answer).map(|parts| (joined_text(&parts), calls_of(&parts)))
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

    /// The text of `parts` (from [`Self::finish`]) as content that continues what went
    /// out: a paragraph break after it (none before the first text); empty without text.
    pub fn more_text(&self, parts: &[Part]) -> String {
        let more = joined_text(parts);
        let sent = &self.text[..self.sent];
        if more.is_empty() || sent.trim().is_empty() {
            return more;
        }
        let newlines = sent.len() - sent.trim_end_matches('\n').len();
        format!("{}{more}", "\n".repeat(2usize.saturating_sub(newlines)))
    }

    /// At the end: the held text's calls and the text between and after them, in order,
    /// if it holds any call; else the held text itself (content that must still go out).
    pub fn finish(&self) -> Result<Vec<Part>, String> {
        let held = &self.text[self.sent..];
        match read_parts(held) {
            Some(parts) if self.in_call => Ok(parts),
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
        let (text, calls) = read_calls(answer).unwrap();
        assert_eq!(text, "Let me check.");
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
        let calls = calls_of(&s.finish().unwrap());
        assert_eq!((calls[0].name.as_str(), calls[0].arguments.as_str()), ("f", "{\"a\":1}"));

        let mut plain = CallScanner::default();
        assert_eq!(plain.push("a <"), "a ");
        assert_eq!(plain.push(" b and <t"), "< b and ");
        assert_eq!(plain.finish(), Err("<t".to_string()));
    }

    #[test]
    fn text_between_and_after_calls_is_kept_in_order() {
        let answer = "First the weather.\n<tool_call>\n{\"name\": \"weather\", \"arguments\": {}}\n</tool_call>\nThen the time.\n<tool_call>\n{\"name\": \"time\", \"arguments\": {}}\n</tool_call>\nDone.";
        let parts = read_parts(answer).unwrap();
        let shape: Vec<String> = parts
            .iter()
            .map(|p| match p {
                Part::Text(t) => format!("text {t}"),
                Part::Call(c) => format!("call {}", c.name),
            })
            .collect();
        assert_eq!(shape, ["text First the weather.", "call weather", "text Then the time.", "call time", "text Done."]);
        assert_eq!(read_calls(answer).unwrap().0, "First the weather.\n\nThen the time.\n\nDone.");
        // Streamed: the text before the first call goes out live, the rest comes back in order.
        let mut s = CallScanner::default();
        let live: String = answer.split_inclusive(' ').map(|p| s.push(p)).collect();
        assert_eq!(live, "First the weather.\n");
        let held = s.finish().unwrap();
        assert_eq!(held.len(), 4);
        assert!(matches!(&held[1], Part::Text(t) if t == "Then the time."));
        assert!(matches!(&held[3], Part::Text(t) if t == "Done."));
        // A call cut off by the length limit goes, with what followed its opening.
        let cut = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\nand then\n<tool_call>\n{\"name\"";
        let parts = read_parts(cut).unwrap();
        assert_eq!(parts.len(), 2);
        assert!(matches!(&parts[1], Part::Text(t) if t == "and then"));
    }
}
