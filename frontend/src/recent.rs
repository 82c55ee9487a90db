//! Recent runs, kept in localStorage so a user can compare speeds across runs.

use serde::{Deserialize, Serialize};

/// localStorage key of the recent runs.
pub const STORAGE_KEY: &str = "peregrine.recent.v1";
/// How many runs are kept.
pub const DEFAULT_MAX_RECENT: usize = 10;
/// How much of a prompt a recent run shows.
const PROMPT_EXCERPT_CHARS: usize = 60;

/// One finished or stopped run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecentRun {
    /// Milliseconds since the Unix epoch.
    pub at_ms: f64,
    pub prompt: String,
    /// "complete" or "chat".
    pub mode: String,
    pub tokens: u32,
    pub tok_per_s: Option<f64>,
    pub ttft_ms: Option<f64>,
    pub elapsed_ms: f64,
    /// "stop", "length", "stopped", ...
    pub outcome: String,
    /// The backend badge at the time.
    pub backend: String,
}

/// First line of a prompt, shortened for a list.
pub fn excerpt(prompt: &str) -> String {
    let line = prompt.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
    let mut s: String = line.chars().take(PROMPT_EXCERPT_CHARS).collect();
    if line.chars().count() > PROMPT_EXCERPT_CHARS || prompt.trim().lines().count() > 1 {
        s.push('…');
    }
    s
}

/// Reads the stored list; anything unreadable is an empty list.
pub fn from_json(s: Option<&str>) -> Vec<RecentRun> {
    s.and_then(|s| serde_json::from_str(s).ok()).unwrap_or_default()
}

pub fn to_json(runs: &[RecentRun]) -> String {
    serde_json::to_string(runs).unwrap_or_else(|_| "[]".into())
}

/// Puts `run` first and keeps at most `DEFAULT_MAX_RECENT`.
pub fn push(runs: &mut Vec<RecentRun>, run: RecentRun) {
    runs.insert(0, run);
    runs.truncate(DEFAULT_MAX_RECENT);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(i: u32) -> RecentRun {
        RecentRun {
            at_ms: i as f64,
            prompt: format!("p{i}"),
            mode: "complete".into(),
            tokens: i,
            tok_per_s: Some(1.5),
            ttft_ms: None,
            elapsed_ms: 1.0,
            outcome: "length".into(),
            backend: "CPU".into(),
        }
    }

    #[test]
    fn newest_first_and_capped() {
        let mut runs = Vec::new();
        for i in 0..15 {
            push(&mut runs, run(i));
        }
        assert_eq!(runs.len(), DEFAULT_MAX_RECENT);
        assert_eq!(runs[0].tokens, 14);
        assert_eq!(from_json(Some(&to_json(&runs))), runs);
        assert_eq!(from_json(Some("[{\"bad\":1}]")), vec![]);
    }

    #[test]
    fn excerpts() {
        assert_eq!(excerpt("\n def f():\n  pass"), "def f():…");
        assert_eq!(excerpt("short"), "short");
        assert_eq!(excerpt(&"x".repeat(70)).chars().count(), PROMPT_EXCERPT_CHARS + 1);
    }
}
