//! `peregrine serve` loads the model before it binds: a model that fails to load ends
//! the process, non-zero, with the load's error and without ever listening.

use std::process::Command;

#[test]
fn a_model_that_fails_to_load_stops_serve_before_it_binds() {
    let dir = std::env::temp_dir().join(format!("peregrine-load-failure-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let model = dir.join("broken.gguf");
    std::fs::write(&model, b"this is not a GGUF file").expect("write the broken model");
    let out = Command::new(env!("CARGO_BIN_EXE_peregrine"))
        .args(["serve", "--device", "cpu", "--port", "0", "--data-dir"])
        .arg(dir.join("data"))
        .arg("--model")
        .arg(&model)
        .output()
        .expect("run peregrine serve");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a broken model was served: {stderr}");
    assert!(stderr.contains("broken.gguf") && stderr.contains("error:"), "the error names the file: {stderr}");
    assert!(!stderr.contains("listening on"), "bound before the load failed: {stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
