//! Stop strings across token boundaries: text that could still become a stop string
//! is held back; a completed stop string ends generation and is never emitted.

/// Scans streamed text for any of the stop strings.
#[derive(Debug, Clone, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
}

/// What to do with a piece of streamed text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopScan {
    /// Text that is safe to emit now.
    pub emit: String,
    /// A stop string completed: emit `emit`, then finish.
    pub stopped: bool,
}

impl StopMatcher {
    /// A matcher for `stops` (empty strings are ignored).
    pub fn new(stops: &[String]) -> StopMatcher {
        StopMatcher { stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(), held: String::new() }
    }

    /// Feeds the next piece of text.
    pub fn push(&mut self, text: &str) -> StopScan {
        self.held.push_str(text);
        if self.stops.is_empty() {
            return StopScan { emit: std::mem::take(&mut self.held), stopped: false };
        }
        // The earliest complete stop string wins.
        if let Some(at) = self.stops.iter().filter_map(|s| self.held.find(s.as_str())).min() {
            let emit = self.held[..at].to_string();
            self.held.clear();
            return StopScan { emit, stopped: true };
        }
        // Hold back the longest suffix that is a proper prefix of some stop string.
        let keep = self
            .held
            .char_indices()
            .map(|(i, _)| i)
            .find(|&i| self.stops.iter().any(|s| s.starts_with(&self.held[i..])))
            .unwrap_or(self.held.len());
        let emit = self.held[..keep].to_string();
        self.held.drain(..keep);
        StopScan { emit, stopped: false }
    }

    /// Text still held back when generation ends for another reason.
    pub fn flush(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let mut m = StopMatcher::new(&stops.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let mut out = String::new();
        for p in pieces {
            let s = m.push(p);
            out.push_str(&s.emit);
            if s.stopped {
                return (out, true);
            }
        }
        out.push_str(&m.flush());
        (out, false)
    }

    #[test]
    fn stop_string_split_across_tokens_is_not_emitted() {
        assert_eq!(run(&["\n\n"], &["fn a() {}", "\n", "\nfn b"]), ("fn a() {}".into(), true));
        assert_eq!(run(&["END"], &["abc E", "N", "D more"]), ("abc ".into(), true));
    }

    #[test]
    fn a_false_start_is_released() {
        assert_eq!(run(&["END"], &["E", "N", "x"]), ("ENx".into(), false));
        assert_eq!(run(&["END"], &["abc", "EN"]), ("abcEN".into(), false));
    }

    #[test]
    fn no_stops_passes_through_and_unicode_is_safe() {
        assert_eq!(run(&[], &["héllo ", "wörld 🦀"]), ("héllo wörld 🦀".into(), false));
        assert_eq!(run(&["🦀"], &["a é", "🦀b"]), ("a é".into(), true));
    }
}
