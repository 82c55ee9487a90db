//! The built playground, from the binary (default) or a `--dist` folder: index.html
//! for client-side routes (`/s/{id}`), long-lived caching for content-hashed assets
//! and none for the page. `ServeDir` rejects `..` and absolute paths, so nothing
//! outside the folder is served.

use std::path::PathBuf;

use axum::extract::Request;
use axum::http::{header, HeaderValue};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::Router;
use tower_http::services::{ServeDir, ServeFile};

/// Cache-Control of content-hashed assets: their name changes when they do.
const HASHED_CACHE_CONTROL: &str = "public, max-age=31536000, immutable";
/// Cache-Control of everything else (index.html must be revalidated to pick up new asset names).
const DEFAULT_CACHE_CONTROL: &str = "no-cache";
/// Shortest hex run that marks a Trunk content hash (`app-3c2a1f0e9b8d7c6a.js`).
const MIN_HASH_HEX: usize = 8;

/// Where the playground's files come from.
#[derive(Debug, Clone)]
pub enum PlaygroundFiles {
    /// The bundle built into the binary.
    Embedded,
    /// A Trunk `dist` folder (`--dist`).
    Dir(PathBuf),
}

impl PlaygroundFiles {
    /// The page's HTML, if there is one.
    pub fn index_html(&self) -> Option<String> {
        match self {
            PlaygroundFiles::Embedded => crate::embedded_playground::embedded().index_html().map(str::to_string),
            PlaygroundFiles::Dir(dir) => std::fs::read_to_string(dir.join("index.html")).ok(),
        }
    }
}

/// The static-file service with the SPA fallback and cache headers.
pub fn service(files: &PlaygroundFiles) -> Router {
    let router = match files {
        PlaygroundFiles::Embedded => Router::new().fallback(crate::embedded_playground::serve),
        PlaygroundFiles::Dir(dist) => Router::new().fallback_service(ServeDir::new(dist).fallback(ServeFile::new(dist.join("index.html")))),
    };
    router.layer(middleware::from_fn(cache_headers))
}

async fn cache_headers(request: Request, next: Next) -> Response {
    let hashed = is_hashed_asset(request.uri().path());
    let mut response = next.run(request).await;
    if response.status().is_success() {
        let value = if hashed { HASHED_CACHE_CONTROL } else { DEFAULT_CACHE_CONTROL };
        response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static(value));
    }
    response
}

/// Whether the file name carries a content hash: `name-<hex ≥ 8>[_bg].ext`.
pub fn is_hashed_asset(path: &str) -> bool {
    let file = path.rsplit('/').next().unwrap_or("");
    let stem = file.split('.').next().unwrap_or("");
    let stem = stem.strip_suffix("_bg").unwrap_or(stem);
    match stem.rsplit_once('-') {
        Some((_, hash)) => hash.len() >= MIN_HASH_HEX && hash.bytes().all(|b| b.is_ascii_hexdigit()),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::is_hashed_asset;

    #[test]
    fn trunk_hashed_names_are_recognised() {
        assert!(is_hashed_asset("/frontend-3c2a1f0e9b8d7c6a.js"));
        assert!(is_hashed_asset("/frontend-3c2a1f0e9b8d7c6a_bg.wasm"));
        assert!(is_hashed_asset("/style-0123456789abcdef.css"));
        assert!(!is_hashed_asset("/index.html"));
        assert!(!is_hashed_asset("/s/abc"));
        assert!(!is_hashed_asset("/app-abc123.js"));
    }
}
