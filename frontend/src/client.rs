//! Browser glue: `fetch` for the JSON endpoints, the streamed `POST /api/generate`
//! read through a `ReadableStream` reader (EventSource cannot POST), the API key
//! every request carries once the user gave one, localStorage and the clipboard.

use std::cell::RefCell;

use js_sys::{Reflect, Uint8Array};
use peregrine_api::playground::ApiError;
use peregrine_api::playground::{GenerateRequest, StreamEvent};
use peregrine_frontend::run::RunError;
use peregrine_frontend::sse::SseParser;
use serde::de::DeserializeOwned;
use serde::Serialize;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{AbortSignal, ReadableStreamDefaultReader, Request, RequestInit, Response};

/// Why a request gave no answer.
#[derive(Debug, Clone, PartialEq)]
pub enum FetchError {
    /// We aborted it (Stop, or a newer run).
    Aborted,
    /// The server answered with an error status.
    Status { status: u16, error: ApiError, retry_after_ms: Option<u64> },
    /// No answer: the connection failed or dropped.
    Network(String),
}

impl FetchError {
    /// The run error to show, or `None` for our own abort.
    pub fn into_run_error(self) -> Option<RunError> {
        match self {
            FetchError::Aborted => None,
            FetchError::Status { status, error, retry_after_ms } if status == 429 || status == 503 || error.code == "busy" => {
                Some(RunError::Busy { message: error.message, retry_after_ms })
            }
            FetchError::Status { error, .. } => Some(RunError::Server { code: error.code, message: error.message }),
            FetchError::Network(message) => Some(RunError::Network { message }),
        }
    }
}

/// localStorage key of the API key the user gave (sent as `Authorization: Bearer`).
pub const API_KEY_STORAGE: &str = "peregrine.api_key";

thread_local! {
    /// Told the server's message when it answers 401 (the key is missing or refused).
    static ON_UNAUTHORIZED: RefCell<Option<Box<dyn Fn(String)>>> = const { RefCell::new(None) };
}

/// Calls `f` with the server's message whenever a request is refused for its key.
pub fn on_unauthorized(f: impl Fn(String) + 'static) {
    ON_UNAUTHORIZED.with(|h| *h.borrow_mut() = Some(Box::new(f)));
}

/// The API key the user saved, if any.
pub fn api_key() -> Option<String> {
    load(API_KEY_STORAGE).map(|k| k.trim().to_string()).filter(|k| !k.is_empty())
}

fn js_message(e: &JsValue) -> String {
    e.dyn_ref::<js_sys::Error>().map(|e| String::from(e.message())).or_else(|| e.as_string()).unwrap_or_else(|| "the request failed".into())
}

fn classify(e: JsValue, signal: Option<&AbortSignal>) -> FetchError {
    if signal.is_some_and(|s| s.aborted()) {
        FetchError::Aborted
    } else {
        FetchError::Network(js_message(&e))
    }
}

async fn send(method: &str, url: &str, body: Option<String>, signal: Option<&AbortSignal>) -> Result<Response, FetchError> {
    let init = RequestInit::new();
    init.set_method(method);
    if let Some(body) = &body {
        init.set_body(&JsValue::from_str(body));
    }
    init.set_signal(signal);
    let request = Request::new_with_str_and_init(url, &init).map_err(|e| FetchError::Network(js_message(&e)))?;
    if body.is_some() {
        let _ = request.headers().set("content-type", "application/json");
    }
    if let Some(key) = api_key() {
        let _ = request.headers().set("authorization", &format!("Bearer {key}"));
    }
    let window = web_sys::window().ok_or_else(|| FetchError::Network("no window".into()))?;
    let response = JsFuture::from(window.fetch_with_request(&request)).await.map_err(|e| classify(e, signal))?;
    let response: Response = response.unchecked_into();
    if response.ok() {
        return Ok(response);
    }
    let status = response.status();
    let retry_after_ms = response.headers().get("retry-after").ok().flatten().and_then(|s| s.trim().parse::<u64>().ok()).map(|s| s * 1000);
    let text = text_of(&response, signal).await.unwrap_or_default();
    // The server adds `retry_after_ms` to busy answers; the header says the same in seconds.
    let retry_after_ms = retry_after_ms
        .or_else(|| serde_json::from_str::<serde_json::Value>(&text).ok().and_then(|v| v.get("retry_after_ms").and_then(|m| m.as_u64())));
    let error = serde_json::from_str::<ApiError>(&text).unwrap_or_else(|_| ApiError {
        code: format!("http_{status}"),
        message: if text.trim().is_empty() { response.status_text() } else { text.trim().chars().take(200).collect() },
    });
    if status == 401 {
        ON_UNAUTHORIZED.with(|h| h.borrow().as_ref().map(|f| f(error.message.clone())));
    }
    Err(FetchError::Status { status, error, retry_after_ms })
}

async fn text_of(response: &Response, signal: Option<&AbortSignal>) -> Result<String, FetchError> {
    let promise = response.text().map_err(|e| classify(e, signal))?;
    let text = JsFuture::from(promise).await.map_err(|e| classify(e, signal))?;
    Ok(text.as_string().unwrap_or_default())
}

/// `GET url` as JSON.
pub async fn get_json<T: DeserializeOwned>(url: &str) -> Result<T, FetchError> {
    let response = send("GET", url, None, None).await?;
    let text = text_of(&response, None).await?;
    serde_json::from_str(&text).map_err(|e| FetchError::Network(format!("unexpected answer from {url}: {e}")))
}

/// `POST url` with a JSON body, answered with JSON.
pub async fn post_json<B: Serialize, T: DeserializeOwned>(url: &str, body: &B) -> Result<T, FetchError> {
    let body = serde_json::to_string(body).map_err(|e| FetchError::Network(e.to_string()))?;
    let response = send("POST", url, Some(body), None).await?;
    let text = text_of(&response, None).await?;
    serde_json::from_str(&text).map_err(|e| FetchError::Network(format!("unexpected answer from {url}: {e}")))
}

/// Runs `request`, calling `on_events` with the events of each received chunk
/// (batched, so the page re-renders once per chunk). Returns when the stream ends.
pub async fn generate(
    request: &GenerateRequest,
    signal: &AbortSignal,
    mut on_events: impl FnMut(Vec<Result<StreamEvent, String>>),
) -> Result<(), FetchError> {
    let body = serde_json::to_string(request).map_err(|e| FetchError::Network(e.to_string()))?;
    let response = send("POST", "/api/generate", Some(body), Some(signal)).await?;
    let stream = response.body().ok_or_else(|| FetchError::Network("the response has no body".into()))?;
    let reader: ReadableStreamDefaultReader = stream.get_reader().unchecked_into();
    let mut parser = SseParser::new();
    loop {
        let chunk = JsFuture::from(reader.read()).await.map_err(|e| classify(e, Some(signal)))?;
        if signal.aborted() {
            return Err(FetchError::Aborted);
        }
        let done = Reflect::get(&chunk, &JsValue::from_str("done")).ok().and_then(|d| d.as_bool()).unwrap_or(true);
        if done {
            return Ok(());
        }
        let value = Reflect::get(&chunk, &JsValue::from_str("value")).map_err(|e| classify(e, Some(signal)))?;
        let bytes = value.dyn_into::<Uint8Array>().map(|a| a.to_vec()).unwrap_or_default();
        let events: Vec<_> = parser.push(&bytes).iter().map(|f| f.decode()).collect();
        if !events.is_empty() {
            on_events(events);
        }
    }
}

fn local_storage() -> Option<web_sys::Storage> {
    web_sys::window()?.local_storage().ok().flatten()
}

/// A localStorage value (none when storage is unavailable, e.g. disabled).
pub fn load(key: &str) -> Option<String> {
    local_storage()?.get_item(key).ok().flatten()
}

/// Stores a localStorage value; a full or disabled storage is not an error worth showing.
pub fn save(key: &str, value: &str) {
    if let Some(s) = local_storage() {
        let _ = s.set_item(key, value);
    }
}

/// Copies text to the clipboard; false when the browser refuses.
pub async fn copy_text(text: &str) -> bool {
    let Some(window) = web_sys::window() else { return false };
    let clipboard = window.navigator().clipboard();
    if clipboard.is_undefined() {
        return false;
    }
    JsFuture::from(clipboard.write_text(text)).await.is_ok()
}

/// `Date.now()`.
pub fn now_ms() -> f64 {
    js_sys::Date::now()
}

/// The page's path, e.g. "/s/abc".
pub fn path() -> String {
    web_sys::window().and_then(|w| w.location().pathname().ok()).unwrap_or_default()
}

/// The page's origin, e.g. "http://127.0.0.1:8080".
pub fn origin() -> String {
    web_sys::window().and_then(|w| w.location().origin().ok()).unwrap_or_default()
}
