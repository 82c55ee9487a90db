//! The real binary without `--dist` serves the playground it was built with (the
//! committed frontend/bundle): gzip'd as stored to browsers, unpacked for clients
//! without gzip, index.html for client-side routes, the CSP hashing the embedded
//! page's loader, hashed assets cached for good.

mod common;

use std::io::Read;

use common::served::Served;

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes).read_to_end(&mut out).expect("gzip body");
    out
}

/// A committed bundle file, unpacked.
fn committed(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../frontend/bundle").join(format!("{name}.gz"));
    gunzip(&std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

async fn get(server: &Served, path: &str, gzip: bool) -> reqwest::Response {
    let mut req = reqwest::Client::new().get(server.url(path));
    if gzip {
        req = req.header("accept-encoding", "gzip, deflate, br");
    }
    req.send().await.expect("GET")
}

#[tokio::test]
async fn the_binary_serves_its_own_playground() {
    let server = Served::start_embedded(&[]).await;
    let page = committed("index.html");
    let text = String::from_utf8(page.clone()).unwrap();

    let r = get(&server, "/", true).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-encoding"], "gzip");
    assert_eq!(r.headers()["content-type"], "text/html; charset=utf-8");
    assert_eq!(r.headers()["cache-control"], "no-cache");
    let csp = r.headers()["content-security-policy"].to_str().unwrap().to_string();
    assert!(csp.contains("'sha256-"), "the loader script of the embedded page is allowed by hash: {csp}");
    assert_eq!(gunzip(&r.bytes().await.unwrap()), page);

    // A share page without gzip: the same page, unpacked.
    let r = get(&server, "/s/AAAAAAAAAAAA", false).await;
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("content-encoding").is_none());
    assert_eq!(r.bytes().await.unwrap(), page);

    let wasm = text.split("module_or_path: '/").nth(1).and_then(|s| s.split('\'').next()).expect("the page names its wasm");
    let r = get(&server, &format!("/{wasm}"), true).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/wasm");
    assert_eq!(r.headers()["cache-control"], "public, max-age=31536000, immutable");
    let module = gunzip(&r.bytes().await.unwrap());
    assert_eq!(&module[..4], b"\0asm");
    assert_eq!(module, committed(wasm));

    let r = reqwest::Client::new().post(server.url("/")).send().await.unwrap();
    assert_eq!(r.status(), 405);
}
