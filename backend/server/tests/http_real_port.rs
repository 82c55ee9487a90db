//! The application on a real TCP port, driven by a real HTTP client.

use std::path::PathBuf;

use peregrine_server::app::{app, AppState};

/// Starts the app on a free loopback port with a throwaway dist/ and returns its base URL.
async fn start(dist: PathBuf) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app(AppState { dist, engine: None })).await.expect("serve") });
    format!("http://{addr}")
}

fn dist_with_index() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("peregrine-dist-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("index.html"), "<title>Peregrine test page</title>").unwrap();
    std::fs::write(dir.join("app-abc123.js"), "console.log('asset')").unwrap();
    dir
}

#[tokio::test]
async fn health_answers_ok_json() {
    let base = start(dist_with_index()).await;
    let res = reqwest::get(format!("{base}/health")).await.unwrap();
    assert_eq!(res.status(), 200);
    let body: peregrine_api::Health = res.json().await.unwrap();
    assert_eq!(body.status, "ok");
}

#[tokio::test]
async fn static_files_and_spa_fallback() {
    let base = start(dist_with_index()).await;
    let asset = reqwest::get(format!("{base}/app-abc123.js")).await.unwrap();
    assert_eq!(asset.status(), 200);
    assert_eq!(asset.text().await.unwrap(), "console.log('asset')");
    let deep = reqwest::get(format!("{base}/s/unknown-share")).await.unwrap();
    assert_eq!(deep.status(), 200);
    assert!(deep.text().await.unwrap().contains("Peregrine test page"));
}
