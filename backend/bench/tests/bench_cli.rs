//! `peregrine-bench` end to end on the default model (tiny plan, Peregrine only):
//! the JSON report has the plan, one run per --runs and positive medians; the table
//! names both metrics. The llama.cpp side needs llama-cpp-python and is not run here.

use std::process::Command;

fn model() -> String {
    std::env::var("PEREGRINE_DEFAULT_MODEL")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| format!("{}/.cache/peregrine/models/SmolLM2-135M-Instruct.Q4_1.gguf", std::env::var("HOME").expect("HOME")))
}

fn bench(extra: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_peregrine-bench"))
        .args([
            "--device",
            "cpu",
            "--model",
            &model(),
            "--no-llamacpp",
            "--prompt-tokens",
            "16",
            "--gen-tokens",
            "4",
            "--short-prompt-tokens",
            "2",
        ])
        .args(extra)
        .output()
        .expect("runs the binary");
    assert!(out.status.success(), "bench failed: {}", String::from_utf8_lossy(&out.stderr));
    out
}

#[test]
fn json_report_has_the_plan_runs_and_medians() {
    let out = bench(&["--runs", "2", "--json", "--cpu-threads", "2"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(report["plan"]["prompt"].as_array().unwrap().len(), 16);
    assert_eq!(report["plan"]["short_prompt"].as_array().unwrap().len(), 2);
    assert_eq!(report["plan"]["gen_tokens"], 4);
    assert_eq!(report["runs"].as_array().unwrap().len(), 2);
    assert_eq!(report["threads"], 2);
    assert!(report["median"]["decode_tok_s"].as_f64().unwrap() > 0.0);
    assert!(report["median"]["prefill_tok_s"].as_f64().unwrap() > 0.0);
    assert!(report["llamacpp"].is_null());
}

#[test]
fn table_names_both_metrics() {
    let out = bench(&["--runs", "1"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("decode tok/s (4 tokens)") && text.contains("prefill tok/s (16-token prompt)"), "{text}");
}
