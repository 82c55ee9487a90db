//! The files in `deploy/` held to the real server: every `--flag` they pass is one
//! the real binary's `serve --help` lists, and their whole command lines parse; every
//! probe and scrape path answers 200 on a running server; the Kubernetes manifests
//! ask for a GPU and point the Service and Prometheus at the container's port; the
//! nginx file passes events unbuffered.

mod common;

use std::collections::BTreeSet;
use std::process::Command;

use clap::Parser;
use common::served::Served;
use peregrine_server::cli::Cli;
use serde::Deserialize;
use serde_yaml::Value;

const DEPLOYMENT: &str = include_str!("../../../deploy/k8s/deployment.yaml");
const UNIT: &str = include_str!("../../../deploy/peregrine.service");

/// The long flags `peregrine serve --help` lists.
fn serve_flags() -> BTreeSet<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_peregrine")).args(["serve", "--help"]).output().expect("run peregrine serve --help");
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    help.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(String::from)
        .collect()
}

/// Every document of a multi-document YAML file.
fn documents(yaml: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(yaml).map(|d| Value::deserialize(d).expect("valid YAML")).collect()
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter().find(|d| d["kind"] == kind).unwrap_or_else(|| panic!("no {kind} in deploy/k8s/deployment.yaml"))
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        other => panic!("expected a string or number, got {other:?}"),
    }
}

/// The container's command line: `command` then `args`.
fn container_argv(deployment: &Value) -> Vec<String> {
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let mut argv: Vec<String> = container["command"].as_sequence().expect("command").iter().map(text).collect();
    argv.extend(container["args"].as_sequence().expect("args").iter().map(text));
    argv
}

/// `ExecStart=` of the systemd unit, split as systemd splits an unquoted line.
fn unit_argv() -> Vec<String> {
    let line = UNIT.lines().find_map(|l| l.strip_prefix("ExecStart=")).expect("ExecStart= in deploy/peregrine.service");
    assert!(!line.contains('"') && !line.contains('\''), "keep ExecStart unquoted so this test splits it as systemd does");
    line.split_whitespace().map(String::from).collect()
}

/// The argument vector parses as the real CLI parses it, and each of its flags is in
/// `serve --help`.
fn check_command_line(source: &str, argv: &[String], flags: &BTreeSet<String>) {
    assert!(argv[0].ends_with("/peregrine") && argv[1] == "serve", "{source}: {argv:?}");
    for flag in argv.iter().filter(|a| a.starts_with("--")) {
        let name = flag.split('=').next().unwrap();
        assert!(flags.contains(name), "{source} passes {name}, which `peregrine serve --help` does not list");
    }
    if let Err(e) = Cli::try_parse_from(argv) {
        panic!("{source}: the command line does not parse: {e}");
    }
}

#[test]
fn every_flag_in_the_deploy_files_is_one_serve_accepts() {
    let flags = serve_flags();
    assert!(flags.contains("--share-store") && flags.contains("--model"), "{flags:?}");
    let docs = documents(DEPLOYMENT);
    check_command_line("deploy/k8s/deployment.yaml", &container_argv(of_kind(&docs, "Deployment")), &flags);
    check_command_line("deploy/peregrine.service", &unit_argv(), &flags);
}

#[test]
fn the_manifests_ask_for_a_gpu_and_point_service_and_prometheus_at_the_server() {
    let docs = documents(DEPLOYMENT);
    let deployment = of_kind(&docs, "Deployment");
    let pod = &deployment["spec"]["template"];
    let container = &pod["spec"]["containers"][0];
    let port = &container["ports"][0];
    let argv = container_argv(deployment);
    let port_flag = argv.iter().position(|a| a == "--port").map(|i| argv[i + 1].clone()).expect("--port");
    assert_eq!(text(&port["containerPort"]), port_flag, "the container port is the one serve binds");
    for probe in ["startupProbe", "readinessProbe", "livenessProbe"] {
        assert_eq!(container[probe]["httpGet"]["path"], "/health", "{probe}");
        assert_eq!(container[probe]["httpGet"]["port"], port["name"], "{probe}");
    }
    for side in ["requests", "limits"] {
        assert_eq!(text(&container["resources"][side]["nvidia.com/gpu"]), "1", "{side}");
    }
    let notes = &pod["metadata"]["annotations"];
    assert_eq!(notes["prometheus.io/scrape"], "true");
    assert_eq!(notes["prometheus.io/path"], "/metrics");
    assert_eq!(text(&notes["prometheus.io/port"]), port_flag);
    assert!(argv.iter().any(|a| a == "--shutdown-grace"));
    let grace: u64 = argv[argv.iter().position(|a| a == "--shutdown-grace").unwrap() + 1].parse().unwrap();
    assert!(pod["spec"]["terminationGracePeriodSeconds"].as_u64().unwrap() > grace, "Kubernetes would kill a finishing request");

    let service = of_kind(&docs, "Service");
    assert_eq!(service["spec"]["selector"], pod["metadata"]["labels"]);
    assert_eq!(service["spec"]["ports"][0]["targetPort"], port["name"]);
}

#[test]
fn the_nginx_file_streams_unbuffered_and_retries_a_dead_replica() {
    let conf = common::nginx::fill("10.0.0.11:8080", "10.0.0.12:8080", "80");
    let directives: Vec<&str> = conf.lines().map(str::trim).filter(|l| !l.starts_with('#')).collect();
    for wanted in ["proxy_buffering off;", "proxy_http_version 1.1;", "proxy_next_upstream error timeout http_502 http_503;"] {
        assert!(directives.contains(&wanted), "deploy/nginx.conf lacks `{wanted}`");
    }
    assert_eq!(directives.iter().filter(|l| l.starts_with("server ") && l.contains("max_fails=")).count(), 2);
}

#[tokio::test]
async fn every_probe_and_scrape_path_answers_200() {
    let docs = documents(DEPLOYMENT);
    let deployment = of_kind(&docs, "Deployment");
    let pod = &deployment["spec"]["template"];
    let container = &pod["spec"]["containers"][0];
    let mut paths: BTreeSet<String> =
        ["startupProbe", "readinessProbe", "livenessProbe"].iter().map(|p| text(&container[*p]["httpGet"]["path"])).collect();
    paths.insert(text(&pod["metadata"]["annotations"]["prometheus.io/path"]));
    let server = Served::start(1024, &[]).await;
    for path in &paths {
        let res = reqwest::get(server.url(path)).await.unwrap();
        assert_eq!(res.status(), 200, "{path} on a running server");
    }
    assert_eq!(paths.len(), 2, "{paths:?}");
}
