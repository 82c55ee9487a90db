//! Prometheus metrics in the text exposition format (hand-written: a few
//! histograms and counters do not need a metrics crate). Names follow vLLM's, and
//! every series carries the served model's name as `model_name`, as vLLM's do.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Bucket bounds (seconds) of time to first token.
const TTFT_BUCKETS: &[f64] = &[0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];
/// Bucket bounds (seconds) of the gap between two streamed tokens.
const ITL_BUCKETS: &[f64] = &[0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];
/// Bucket bounds (seconds) of whole requests and of queue waits.
const LATENCY_BUCKETS: &[f64] = &[0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0];
/// Bucket bounds (tokens) of one request's prompt or generation length.
const TOKEN_BUCKETS: &[f64] =
    &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0, 20000.0, 50000.0, 131072.0];

/// A fixed-bucket histogram, lock-free.
pub struct Histogram {
    bounds: &'static [f64],
    /// Per-bucket (not cumulative) counts; the last entry is +Inf.
    counts: Vec<AtomicU64>,
    sum_micros: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_micros: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    /// Records one value in seconds.
    pub fn observe(&self, secs: f64) {
        if !secs.is_finite() || secs < 0.0 {
            return;
        }
        let i = self.bounds.iter().position(|&b| secs <= b).unwrap_or(self.bounds.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add((secs * 1e6) as u64, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Mean of the recorded values, if any.
    pub fn mean(&self) -> Option<f64> {
        let n = self.count.load(Ordering::Relaxed);
        (n > 0).then(|| self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6 / n as f64)
    }

    /// The histogram's series; `labels` is `key="value"` pairs without braces.
    fn render(&self, out: &mut String, name: &str, help: &str, labels: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (i, c) in self.counts.iter().enumerate() {
            cumulative += c.load(Ordering::Relaxed);
            let le = self.bounds.get(i).map(|b| b.to_string()).unwrap_or_else(|| "+Inf".into());
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
        }
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6);
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", self.count.load(Ordering::Relaxed));
    }
}

/// Everything `/metrics` reports besides the live gauges.
pub struct Metrics {
    /// The `model_name` label: the first served name.
    model_name: String,
    /// From arrival to the first token (queue and prompt included).
    pub time_to_first_token: Histogram,
    pub inter_token_latency: Histogram,
    /// From arrival to the last event.
    pub e2e_latency: Histogram,
    /// From admission to the engine starting the request.
    pub queue_time: Histogram,
    pub request_prompt_tokens: Histogram,
    pub request_generation_tokens: Histogram,
    pub prompt_tokens: AtomicU64,
    pub generation_tokens: AtomicU64,
    /// Tokens drafted by speculative decoding and verified.
    pub draft_tokens: AtomicU64,
    /// Drafted tokens the model accepted.
    pub draft_accepted: AtomicU64,
    /// Finished requests by finish reason (`stop`, `length`, `cancelled`, `error`, `timeout`).
    finished: Mutex<BTreeMap<&'static str, u64>>,
    /// Refused requests by reason (`queue_full`, `client_limit`).
    rejected: Mutex<BTreeMap<&'static str, u64>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::for_model("")
    }
}

impl Metrics {
    /// Metrics labelled with this model name.
    pub fn for_model(model_name: &str) -> Self {
        Metrics {
            model_name: model_name.to_string(),
            time_to_first_token: Histogram::new(TTFT_BUCKETS),
            inter_token_latency: Histogram::new(ITL_BUCKETS),
            e2e_latency: Histogram::new(LATENCY_BUCKETS),
            queue_time: Histogram::new(LATENCY_BUCKETS),
            request_prompt_tokens: Histogram::new(TOKEN_BUCKETS),
            request_generation_tokens: Histogram::new(TOKEN_BUCKETS),
            prompt_tokens: AtomicU64::new(0),
            generation_tokens: AtomicU64::new(0),
            draft_tokens: AtomicU64::new(0),
            draft_accepted: AtomicU64::new(0),
            finished: Mutex::default(),
            rejected: Mutex::default(),
        }
    }

    /// Counts a finished request.
    pub fn finished(&self, reason: &'static str) {
        if let Ok(mut m) = self.finished.lock() {
            *m.entry(reason).or_insert(0) += 1;
        }
    }

    /// Counts a refused request.
    pub fn rejected(&self, reason: &'static str) {
        if let Ok(mut m) = self.rejected.lock() {
            *m.entry(reason).or_insert(0) += 1;
        }
    }

    /// The Prometheus text, with the engine's live gauges.
    pub fn render(&self, running: usize, waiting: usize) -> String {
        let mut out = String::new();
        let model = format!("model_name=\"{}\"", label_value(&self.model_name));
        let histograms = [
            (
                &self.time_to_first_token,
                "time_to_first_token_seconds",
                "Time from a request's arrival to its first token (queue included).",
            ),
            (&self.inter_token_latency, "inter_token_latency_seconds", "Time between two consecutive generated tokens."),
            (&self.e2e_latency, "e2e_request_latency_seconds", "Time from a request's arrival to its last event."),
            (&self.queue_time, "request_queue_time_seconds", "Time a request waited in the queue before the engine started it."),
            (&self.request_prompt_tokens, "request_prompt_tokens", "Prompt tokens of each finished request."),
            (&self.request_generation_tokens, "request_generation_tokens", "Tokens generated by each finished request."),
        ];
        for (h, name, help) in histograms {
            h.render(&mut out, &format!("peregrine_{name}"), help, &model);
        }
        let series = |out: &mut String, kind: &str, name: &str, help: &str, v: u64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{{model}}} {v}");
        };
        series(
            &mut out,
            "counter",
            "peregrine_prompt_tokens_total",
            "Prompt tokens processed.",
            self.prompt_tokens.load(Ordering::Relaxed),
        );
        series(
            &mut out,
            "counter",
            "peregrine_generation_tokens_total",
            "Tokens generated.",
            self.generation_tokens.load(Ordering::Relaxed),
        );
        series(
            &mut out,
            "counter",
            "peregrine_draft_tokens_total",
            "Tokens drafted by speculative decoding and verified.",
            self.draft_tokens.load(Ordering::Relaxed),
        );
        series(
            &mut out,
            "counter",
            "peregrine_draft_accepted_total",
            "Drafted tokens the model accepted.",
            self.draft_accepted.load(Ordering::Relaxed),
        );
        let labelled =
            |out: &mut String, name: &str, help: &str, label: &str, known: &[&'static str], map: &Mutex<BTreeMap<&'static str, u64>>| {
                let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
                let map = map.lock().map(|m| m.clone()).unwrap_or_default();
                let mut keys: Vec<&str> = known.to_vec();
                keys.extend(map.keys().filter(|k| !known.contains(k)));
                for k in keys {
                    let _ = writeln!(out, "{name}{{{model},{label}=\"{k}\"}} {}", map.get(k).copied().unwrap_or(0));
                }
            };
        labelled(
            &mut out,
            "peregrine_requests_total",
            "Finished requests by finish reason.",
            "finish_reason",
            &["stop", "length", "cancelled", "error", "timeout"],
            &self.finished,
        );
        labelled(
            &mut out,
            "peregrine_requests_rejected_total",
            "Requests refused with 429.",
            "reason",
            &["queue_full", "client_limit"],
            &self.rejected,
        );
        series(&mut out, "gauge", "peregrine_requests_running", "Requests the engine is running.", running as u64);
        series(&mut out, "gauge", "peregrine_requests_waiting", "Requests waiting in the queue.", waiting as u64);
        out
    }
}

/// A label value with `\`, `"` and newlines escaped as the text format wants.
fn label_value(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let m = Metrics::for_model("tiny");
        m.time_to_first_token.observe(0.02);
        m.time_to_first_token.observe(0.3);
        m.finished("stop");
        let text = m.render(1, 2);
        assert!(text.contains("peregrine_time_to_first_token_seconds_bucket{model_name=\"tiny\",le=\"0.025\"} 1"), "{text}");
        assert!(text.contains("peregrine_time_to_first_token_seconds_bucket{model_name=\"tiny\",le=\"+Inf\"} 2"));
        assert!(text.contains("peregrine_time_to_first_token_seconds_count{model_name=\"tiny\"} 2"));
        assert!(text.contains("peregrine_requests_total{model_name=\"tiny\",finish_reason=\"stop\"} 1"));
        assert!(text.contains("peregrine_requests_total{model_name=\"tiny\",finish_reason=\"length\"} 0"));
        assert!(text.contains("peregrine_requests_running{model_name=\"tiny\"} 1"));
        assert!(text.contains("peregrine_requests_waiting{model_name=\"tiny\"} 2"));
        m.draft_tokens.fetch_add(9, Ordering::Relaxed);
        m.draft_accepted.fetch_add(4, Ordering::Relaxed);
        let text = m.render(1, 2);
        assert!(text.contains("peregrine_draft_tokens_total{model_name=\"tiny\"} 9"), "{text}");
        assert!(text.contains("peregrine_draft_accepted_total{model_name=\"tiny\"} 4"), "{text}");
        let unlabelled: Vec<&str> = text.lines().filter(|l| !l.starts_with('#') && !l.contains("{model_name=\"tiny\"")).collect();
        assert!(unlabelled.is_empty(), "{unlabelled:?}");
        m.request_prompt_tokens.observe(7.0);
        assert!(m.render(0, 0).contains("peregrine_request_prompt_tokens_bucket{model_name=\"tiny\",le=\"10\"} 1"));
        assert_eq!(label_value("a\"b\\c"), "a\\\"b\\\\c");
    }
}
