//! How figures are written on the page (one place, so counters, summaries, recent
//! runs and the shared-run panel agree digit for digit).

use peregrine_api::Info;

/// Placeholder for a figure that does not exist yet.
pub const NONE: &str = "—";

/// Decode tokens/s with one decimal.
pub fn tok_per_s(v: Option<f64>) -> String {
    v.filter(|v| v.is_finite()).map_or_else(|| NONE.into(), |v| format!("{v:.1}"))
}

/// Tokens per step with two decimals (1.00 without speculative decoding).
pub fn tokens_per_step(v: Option<f64>) -> String {
    v.filter(|v| v.is_finite()).map_or_else(|| NONE.into(), |v| format!("{v:.2}"))
}

/// Milliseconds, whole, with the unit.
pub fn ms(v: Option<f64>) -> String {
    v.filter(|v| v.is_finite()).map_or_else(|| NONE.into(), |v| format!("{v:.0} ms"))
}

/// Seconds with two decimals, with the unit.
pub fn seconds(ms: f64) -> String {
    format!("{:.2} s", ms.max(0.0) / 1000.0)
}

/// Whole seconds, rounded up, for "try again in".
pub fn seconds_rounded_up(ms: u64) -> String {
    format!("{} s", ms.div_ceil(1000).max(1))
}

/// Parameter count, e.g. 134_515_008 → "135M".
pub fn parameters(n: u64) -> String {
    match n {
        n if n >= 1_000_000_000 => format!("{:.1}B", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{:.0}M", n as f64 / 1e6),
        n => n.to_string(),
    }
}

/// The backend badge, e.g. "CPU · SmolLM2 135M Instruct" or "2× H200 · Qwen2.5 Coder 1.5B".
pub fn backend_badge(info: &Info) -> String {
    let hardware = if info.backend == "cpu" {
        "CPU".to_string()
    } else {
        let name = info.devices.first().map(|d| d.trim_start_matches("NVIDIA ").to_string()).unwrap_or_else(|| info.backend.to_uppercase());
        format!("{}× {name}", info.devices.len().max(1))
    };
    format!("{hardware} · {}", info.model)
}

/// The ratio of two speeds, e.g. "1.8× faster" / "2.0× slower" / "as fast".
pub fn speed_ratio(mine: f64, theirs: f64) -> Option<String> {
    if !(mine > 0.0 && theirs > 0.0 && mine.is_finite() && theirs.is_finite()) {
        return None;
    }
    let r = mine / theirs;
    Some(if (r - 1.0).abs() < 0.05 {
        "about as fast as".into()
    } else if r > 1.0 {
        format!("{r:.1}× faster than")
    } else {
        format!("{:.1}× slower than", 1.0 / r)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures() {
        assert_eq!((tok_per_s(Some(12.345)), tok_per_s(None), tok_per_s(Some(f64::NAN))), ("12.3".into(), NONE.into(), NONE.into()));
        assert_eq!(
            (ms(Some(99.6)), seconds(1234.0), seconds_rounded_up(2001), seconds_rounded_up(0)),
            ("100 ms".into(), "1.23 s".into(), "3 s".into(), "1 s".into())
        );
        assert_eq!((parameters(134_515_008), parameters(1_543_714_304)), ("135M".into(), "1.5B".into()));
        assert_eq!(speed_ratio(20.0, 10.0).unwrap(), "2.0× faster than");
        assert_eq!(speed_ratio(10.0, 20.0).unwrap(), "2.0× slower than");
        assert_eq!(speed_ratio(10.0, 0.0), None);
    }

    #[test]
    fn badges() {
        let mut info = Info {
            model: "SmolLM2 135M Instruct".into(),
            architecture: "llama".into(),
            parameters: 1,
            context_length: 8192,
            backend: "cpu".into(),
            devices: vec!["AMD EPYC".into()],
            max_queue: 8,
            infill: false,
        };
        assert_eq!(backend_badge(&info), "CPU · SmolLM2 135M Instruct");
        info.backend = "cuda".into();
        info.devices = vec!["NVIDIA H200".into(), "NVIDIA H200".into()];
        assert_eq!(backend_badge(&info), "2× H200 · SmolLM2 135M Instruct");
    }
}
