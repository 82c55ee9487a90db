//! `--served-model-name` on the real binary: every name is listed and accepted as
//! `model`, answers report the first, other names are 404, and a bad name stops the
//! server before it binds.

mod common;

use std::process::Command;

use common::served::Served;
use serde_json::{json, Value};

async fn get(server: &Served, path: &str) -> (u16, Value) {
    let r = reqwest::get(server.url(path)).await.expect("GET");
    (r.status().as_u16(), r.json().await.expect("JSON body"))
}

async fn complete(server: &Served, model: &str) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(server.url("/v1/completions"))
        .json(&json!({"model": model, "prompt": "def add(a, b):", "max_tokens": 2, "temperature": 0}))
        .send()
        .await
        .expect("POST");
    (r.status().as_u16(), r.json().await.expect("JSON body"))
}

#[tokio::test]
async fn every_served_name_is_listed_and_accepted_and_answers_report_the_first() {
    let server = Served::start(1024, &["--served-model-name", "coder", "--served-model-name", "smol/135m"]).await;
    let (status, list) = get(&server, "/v1/models").await;
    assert_eq!(status, 200);
    let ids: Vec<&str> = list["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["coder", "smol/135m"]);

    for name in ["coder", "smol/135m"] {
        let (status, answer) = complete(&server, name).await;
        assert_eq!(status, 200, "model {name}: {answer}");
        assert_eq!(answer["model"], "coder", "answers report the first name");
    }
    let (status, one) = get(&server, "/v1/models/coder").await;
    assert_eq!((status, one["id"].as_str()), (200, Some("coder")));

    // The file's stem is no longer a name once names are given.
    let (status, answer) = complete(&server, "SmolLM2-135M-Instruct.Q4_1").await;
    assert_eq!(status, 404, "{answer}");
    assert_eq!(answer["error"]["code"], "model_not_found");
    let (status, info) = get(&server, "/api/info").await;
    assert_eq!((status, info["model_id"].as_str()), (200, Some("coder")));
}

#[tokio::test]
async fn a_bad_served_name_stops_the_server_with_a_message_naming_the_flag() {
    for bad in [vec!["two words"], vec!["same", "same"], vec![""]] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_peregrine"));
        cmd.args(["serve", "--device", "cpu", "--port", "0", "--model"]).arg(common::model_path());
        for name in &bad {
            cmd.args(["--served-model-name", name]);
        }
        let out = cmd.output().expect("run peregrine serve");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad:?} was accepted");
        assert!(stderr.contains("served-model-name"), "{bad:?}: {stderr}");
        assert!(!stderr.contains("listening on"), "{bad:?}: bound before refusing: {stderr}");
    }
}
