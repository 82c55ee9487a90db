//! Browser-facing defences: every response says how a browser may use it (no MIME
//! sniffing, no framing, no referrer, a content security policy the playground passes),
//! and requests whose `Host` is not one this server answers for are refused, so a web
//! page that rebinds its own DNS name to this machine cannot read the API (the JSON
//! routes' `Content-Type` check in extract.rs keeps it from writing through forms).

use std::sync::Arc;

use axum::extract::Request;
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use sha2::{Digest, Sha256};

use crate::error::Error;

/// The hosts a loopback-bound server answers for by default (any port).
pub const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// The content security policy of every response: same-origin everything, the
/// playground's WebAssembly, and its inline loader script by hash.
pub fn content_security_policy(index_html: Option<&str>) -> HeaderValue {
    let hashes: String =
        index_html.map(inline_scripts).unwrap_or_default().iter().map(|s| format!(" 'sha256-{}'", sha256_base64(s))).collect();
    let policy = format!(
        "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'{hashes}; style-src 'self'; img-src 'self' data:; \
         connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    );
    HeaderValue::from_str(&policy).unwrap_or(HeaderValue::from_static("default-src 'self'; frame-ancestors 'none'"))
}

/// The bodies of the `<script>` elements of `html` that have no `src` (Trunk's loader).
fn inline_scripts(html: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(open) = rest.find("<script") {
        let Some(tag_end) = rest[open..].find('>') else { break };
        let tag = &rest[open..open + tag_end];
        let body_start = open + tag_end + 1;
        let Some(close) = rest[body_start..].find("</script>") else { break };
        if !tag.contains("src=") {
            out.push(&rest[body_start..body_start + close]);
        }
        rest = &rest[body_start + close..];
    }
    out
}

fn sha256_base64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(Sha256::digest(text.as_bytes()))
}

/// Adds the security headers to every response (a route's own value wins).
pub async fn add_headers(csp: HeaderValue, request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let h = response.headers_mut();
    h.entry(header::X_CONTENT_TYPE_OPTIONS).or_insert(HeaderValue::from_static("nosniff"));
    h.entry(header::X_FRAME_OPTIONS).or_insert(HeaderValue::from_static("DENY"));
    h.entry(header::REFERRER_POLICY).or_insert(HeaderValue::from_static("no-referrer"));
    h.entry(header::CONTENT_SECURITY_POLICY).or_insert(csp);
    response
}

/// The host part of a `Host` header value: without the port, lower case.
pub fn host_of(value: &str) -> String {
    let v = value.trim().to_ascii_lowercase();
    if v.starts_with('[') {
        return v.split_inclusive(']').next().unwrap_or(&v).to_string();
    }
    v.rsplit_once(':').filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit())).map_or(v.clone(), |(h, _)| h.to_string())
}

/// Refuses (421) a request whose `Host` is not in `allowed`; `/health` answers any
/// host (probes address a machine by IP).
pub async fn check_host(allowed: Arc<Vec<String>>, request: Request, next: Next) -> Response {
    if request.uri().path() != "/health" {
        let host = request.headers().get(header::HOST).and_then(|v| v.to_str().ok()).map(host_of).unwrap_or_default();
        if !allowed.iter().any(|a| *a == host) {
            let shown = crate::error::shorten(&host);
            return Error::MisdirectedHost(format!(
                "this server does not answer for the host `{shown}` (start it with --allowed-host {shown} to allow it)"
            ))
            .into_response();
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_lose_their_port() {
        assert_eq!(host_of("127.0.0.1:8080"), "127.0.0.1");
        assert_eq!(host_of("LocalHost"), "localhost");
        assert_eq!(host_of("[::1]:80"), "[::1]");
        assert_eq!(host_of("[::1]"), "[::1]");
        assert_eq!(host_of("example.com:443"), "example.com");
    }

    #[test]
    fn inline_scripts_are_hashed_and_external_ones_are_not() {
        let html = "<script src=\"/a.js\"></script><script type=\"module\">\nimport x;\n</script>";
        assert_eq!(inline_scripts(html), vec!["\nimport x;\n"]);
        let csp = content_security_policy(Some(html));
        let csp = csp.to_str().unwrap();
        assert!(csp.contains(&format!("'sha256-{}'", sha256_base64("\nimport x;\n"))), "{csp}");
        assert!(csp.contains("frame-ancestors 'none'"));
    }
}
