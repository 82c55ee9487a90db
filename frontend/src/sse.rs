//! Server-sent events framing for `POST /api/generate` (read through `fetch`, since
//! `EventSource` cannot POST). Follows the WHATWG "event stream" parsing rules that
//! matter here: `event:`/`data:` fields, multi-line data, `:` comments (keep-alive),
//! frames ended by a blank line, LF or CRLF line ends, chunks split anywhere
//! (including inside a UTF-8 sequence).

use peregrine_api::playground::StreamEvent;

/// One dispatched frame: its `event:` name (if any) and its joined `data:` lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub event: Option<String>,
    pub data: String,
}

impl Frame {
    /// The payload as a stream event; the `type` tag inside the JSON is authoritative.
    pub fn decode(&self) -> Result<StreamEvent, String> {
        serde_json::from_str(&self.data)
            .map_err(|e| format!("bad {} event from the server: {e}", self.event.as_deref().unwrap_or("unnamed")))
    }
}

/// Incremental parser: feed it byte chunks as they arrive, get whole frames back.
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of the current, unfinished line.
    line: Vec<u8>,
    event: Option<String>,
    data: Vec<String>,
    /// The previous chunk ended on CR, so a leading LF belongs to that line end.
    after_cr: bool,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Consumes a chunk and returns every frame it completed, in order.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<Frame> {
        let mut frames = Vec::new();
        for &b in chunk {
            let after_cr = std::mem::replace(&mut self.after_cr, false);
            match b {
                b'\n' if after_cr => {}
                b'\n' | b'\r' => {
                    self.after_cr = b == b'\r';
                    let line = std::mem::take(&mut self.line);
                    if let Some(frame) = self.end_line(&line) {
                        frames.push(frame);
                    }
                }
                _ => self.line.push(b),
            }
        }
        frames
    }

    fn end_line(&mut self, line: &[u8]) -> Option<Frame> {
        if line.is_empty() {
            let event = self.event.take();
            if self.data.is_empty() {
                return None;
            }
            let data = std::mem::take(&mut self.data).join("\n");
            return Some(Frame { event, data });
        }
        let line = String::from_utf8_lossy(line);
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line.as_ref(), ""),
        };
        match field {
            "event" => self.event = Some(value.to_string()),
            "data" => self.data.push(value.to_string()),
            _ => {} // `id` and `retry` do not apply to a one-shot POST stream.
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use peregrine_api::playground::StreamEvent;

    #[test]
    fn frames_split_anywhere_including_inside_utf8() {
        let wire = "event: token\ndata: {\"type\":\"token\",\"text\":\"h\u{e9}\u{1f600}\",\"tokens\":2}\n\n: keep-alive\n\nevent: queued\r\ndata: {\"type\":\"queued\",\"position\":3}\r\n\r\n".as_bytes();
        for cut in 0..wire.len() {
            let mut p = SseParser::new();
            let mut frames = p.push(&wire[..cut]);
            frames.extend(p.push(&wire[cut..]));
            assert_eq!(frames.len(), 2, "cut at {cut}");
            assert_eq!(frames[0].event.as_deref(), Some("token"));
            assert_eq!(frames[0].decode().unwrap(), StreamEvent::Token { text: "h\u{e9}\u{1f600}".into(), tokens: 2 });
            assert_eq!(frames[1].decode().unwrap(), StreamEvent::Queued { position: 3 });
        }
    }

    #[test]
    fn multi_line_data_is_joined_and_incomplete_frames_wait() {
        let mut p = SseParser::new();
        assert!(p.push(b"data: a\ndata:b\n").is_empty());
        assert_eq!(p.push(b"\n"), vec![Frame { event: None, data: "a\nb".into() }]);
        assert!(p.push(b"event: x\n\n").is_empty(), "a frame without data dispatches nothing");
        assert_eq!(p.push(b"data: c\n\n")[0].event, None, "the event name does not leak into the next frame");
    }

    #[test]
    fn malformed_json_is_an_error_not_a_panic() {
        let f = Frame { event: Some("stats".into()), data: "{nope".into() };
        assert!(f.decode().unwrap_err().contains("bad stats event"));
    }

    #[test]
    fn round_trips_the_servers_encoding() {
        let ev = StreamEvent::Error { code: "busy".into(), message: "queue full".into(), retry_after_ms: Some(1500) };
        let wire = format!("event: {}\ndata: {}\n\n", ev.name(), serde_json::to_string(&ev).unwrap());
        assert_eq!(SseParser::new().push(wire.as_bytes())[0].decode().unwrap(), ev);
    }
}
