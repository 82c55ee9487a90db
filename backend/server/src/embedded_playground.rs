//! The playground built into the binary (the committed `frontend/bundle`): files are
//! kept gzip'd and sent as they are to clients that take gzip (every browser),
//! unpacked for the rest; unknown paths get index.html (client-side routes).

use std::collections::HashMap;
use std::io::Read;
use std::sync::OnceLock;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};

mod bundle {
    include!(concat!(env!("OUT_DIR"), "/playground_bundle.rs"));
}

/// The embedded files by name, and the page itself unpacked (for the CSP's hashes).
pub struct Embedded {
    files: HashMap<&'static str, &'static [u8]>,
    index_html: Option<String>,
}

fn gunzip(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes).read_to_end(&mut out).ok()?;
    Some(out)
}

/// The bundle of this binary (parsed once).
pub fn embedded() -> &'static Embedded {
    static BUNDLE: OnceLock<Embedded> = OnceLock::new();
    BUNDLE.get_or_init(|| {
        let files: HashMap<_, _> = bundle::FILES.iter().copied().collect();
        let index_html = files.get("index.html").and_then(|gz| gunzip(gz)).and_then(|b| String::from_utf8(b).ok());
        Embedded { files, index_html }
    })
}

impl Embedded {
    /// The page, when the binary carries one.
    pub fn index_html(&self) -> Option<&str> {
        self.index_html.as_deref()
    }
}

fn content_type(name: &str) -> &'static str {
    match name.rsplit('.').next().unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "wasm" => "application/wasm",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "json" => "application/json",
        _ => "application/octet-stream",
    }
}

/// Whether the request's `Accept-Encoding` takes gzip (not refused with `q=0`).
fn takes_gzip(request: &Request) -> bool {
    let Some(accept) = request.headers().get(header::ACCEPT_ENCODING).and_then(|v| v.to_str().ok()) else { return false };
    accept.split(',').any(|part| {
        let mut pieces = part.split(';').map(str::trim);
        let coding = pieces.next().unwrap_or("");
        let refused = pieces.any(|p| p.strip_prefix("q=").and_then(|q| q.parse::<f32>().ok()) == Some(0.0));
        (coding.eq_ignore_ascii_case("gzip") || coding == "*") && !refused
    })
}

/// Serves one embedded file (GET and HEAD).
pub async fn serve(request: Request) -> Response {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return (StatusCode::METHOD_NOT_ALLOWED, [(header::ALLOW, "GET, HEAD")]).into_response();
    }
    let bundle = embedded();
    let path = request.uri().path().trim_start_matches('/');
    let (name, gz) = match bundle.files.get_key_value(path) {
        Some((name, gz)) => (*name, *gz),
        None => match bundle.files.get_key_value("index.html") {
            Some((name, gz)) => (*name, *gz),
            None => {
                return (StatusCode::NOT_FOUND, "this peregrine binary was built without the playground; pass --dist DIR").into_response()
            }
        },
    };
    let mut response = if takes_gzip(&request) {
        let mut r = Response::new(Body::from(gz));
        r.headers_mut().insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        r
    } else {
        match gunzip(gz) {
            Some(bytes) => Response::new(Body::from(bytes)),
            None => return (StatusCode::INTERNAL_SERVER_ERROR, "the embedded playground is corrupt").into_response(),
        }
    };
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type(name)));
    h.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    if request.method() == Method::HEAD {
        *response.body_mut() = Body::empty();
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_accept(value: &str) -> Request {
        Request::builder().header(header::ACCEPT_ENCODING, value).body(Body::empty()).unwrap()
    }

    #[test]
    fn gzip_is_sent_only_to_clients_that_take_it() {
        assert!(takes_gzip(&with_accept("gzip, deflate, br")));
        assert!(takes_gzip(&with_accept("br;q=1.0, gzip;q=0.8")));
        assert!(takes_gzip(&with_accept("*")));
        assert!(!takes_gzip(&with_accept("gzip;q=0")));
        assert!(!takes_gzip(&with_accept("br")));
        assert!(!takes_gzip(&Request::new(Body::empty())));
    }

    #[test]
    fn the_committed_bundle_is_embedded_whole() {
        let b = embedded();
        let page = b.index_html().expect("the bundle has index.html");
        assert!(page.contains("<script"), "{page}");
        for name in b.files.keys() {
            assert!(gunzip(b.files[name]).is_some(), "{name} unpacks");
        }
        assert!(b.files.keys().any(|n| n.ends_with("_bg.wasm")), "the bundle has the wasm module");
    }
}
