//! Test support: the default model (real engine, started once per test binary), a
//! scripted runtime with the real tokenizer (for queue, timing and load tests), a
//! server on an ephemeral port, and an SSE reader over reqwest's byte stream.
#![allow(dead_code)]

pub mod nginx;
pub mod postgres;
pub mod served;

use std::path::PathBuf;
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::Duration;

use futures_util::StreamExt;
use peregrine_engine::config::ModelConfig;
use peregrine_engine::generator::Generator;
use peregrine_engine::gguf::GgufFile;
use peregrine_engine::handle::{EngineHandle, EngineLimits};
use peregrine_engine::runtime::{BackendInfo, BatchDecode, DecodeJob, Flow, RunEnd, Runtime, SlotTokens};
use peregrine_engine::sampling::{Sampled, TokenLogprob};
use peregrine_engine::template::ChatTemplate;
use peregrine_engine::tokenizer::Tokenizer;
use peregrine_server::app::AppState;
use serde_json::Value;

/// The default model: `$PEREGRINE_DEFAULT_MODEL`, else the cached download.
pub fn model_path() -> PathBuf {
    let path = std::env::var_os("PEREGRINE_DEFAULT_MODEL").filter(|p| !p.is_empty()).map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var("HOME").expect("HOME")).join(".cache/peregrine/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    });
    assert!(path.exists(), "the default model is missing at {}; run scripts/fetch-model.sh", path.display());
    path
}

/// Queue length of the shared real engine.
pub const REAL_MAX_QUEUE: usize = 4;
/// Batch of the shared real engine: the server's tests run the batch scheduler.
pub const REAL_MAX_BATCH: usize = 4;

/// The real engine on the default model, loaded once per test binary.
pub fn real_engine() -> EngineHandle {
    static ENGINE: OnceLock<EngineHandle> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let path = model_path();
            EngineHandle::start(
                move || {
                    peregrine_engine::model::build_generator(
                        peregrine_engine::model::load_model(&path)?,
                        &peregrine_engine::EngineOptions::cpu(),
                    )
                },
                EngineLimits { max_queue: REAL_MAX_QUEUE, max_batch: Some(REAL_MAX_BATCH), kv_budget: None, speculative: Default::default() },
            )
            .expect("the default model loads")
        })
        .clone()
}

/// Serialises tests that share the real engine (it runs one request at a time, and
/// timing assertions need it to themselves). The turn starts once the engine is idle: a
/// request an earlier test abandoned (a client disconnect or timeout) can still be ending,
/// and the next test's first event would then be a queue position (seen once in a fresh
/// clone's `make test`: `queued` before `started`).
pub async fn engine_lock() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: OnceLock<tokio::sync::Mutex<()>> = OnceLock::new();
    let turn = LOCK.get_or_init(|| tokio::sync::Mutex::new(())).lock().await;
    let engine = real_engine();
    assert!(wait_for(Duration::from_secs(10), || !engine.busy()).await, "an earlier test's request still holds the engine after 10 s");
    turn
}

/// How the scripted runtime produces tokens.
#[derive(Clone)]
pub enum Pace {
    /// One token each time the test sends on the gate.
    Gated(Arc<Mutex<mpsc::Receiver<()>>>),
    /// One token every so often.
    Every(Duration),
}

/// A runtime that emits real token ids of the default model on a script, and records
/// the prompts it ran. With a batch, each step (one gate opening or one pause) gives
/// every running request its next token.
pub struct ScriptedRuntime {
    config: ModelConfig,
    pace: Pace,
    /// Token ids it cycles through.
    output: Vec<u32>,
    pub ran: Arc<Mutex<Vec<Vec<u32>>>>,
    /// Requests decoded together (1: no batch side).
    batch: usize,
    /// Per slot: steps it took part in since it opened.
    slot_steps: Vec<usize>,
    /// One logit row per entry of the last step.
    step_logits: Vec<Vec<f32>>,
}

impl ScriptedRuntime {
    /// Waits for the next token's turn; false once the gate closed.
    fn pace(&self) -> bool {
        match &self.pace {
            Pace::Gated(gate) => gate.lock().unwrap().recv().is_ok(),
            Pace::Every(d) => {
                std::thread::sleep(*d);
                true
            }
        }
    }
}

impl BatchDecode for ScriptedRuntime {
    fn capacity(&self) -> usize {
        self.batch
    }
    fn default_batch(&self) -> usize {
        self.batch
    }
    fn step_tokens(&self) -> usize {
        256
    }
    fn open(&mut self, slot: usize, _positions: usize, _prompt: &[u32], _reuse: bool) -> peregrine_engine::Result<usize> {
        if self.slot_steps.len() <= slot {
            self.slot_steps.resize(slot + 1, 0);
        }
        self.slot_steps[slot] = 0;
        Ok(0)
    }
    fn cached_prefix(&self, _slot: usize, _prompt: &[u32]) -> usize {
        0
    }
    fn step(&mut self, work: &[SlotTokens<'_>]) -> peregrine_engine::Result<()> {
        // A prompt counts as run when its step starts (before the gate).
        for w in work.iter().filter(|w| self.slot_steps[w.slot] == 0) {
            self.ran.lock().unwrap().push(w.tokens.to_vec());
        }
        if !self.pace() {
            return Err(peregrine_engine::Error::Unavailable("the test closed the gate".into()));
        }
        self.step_logits.clear();
        for w in work {
            let steps = &mut self.slot_steps[w.slot];
            // Greedy sampling picks the script's next token (prompts fit one chunk).
            let mut logits = vec![-30.0; self.config.vocab_size];
            logits[self.output[*steps % self.output.len()] as usize] = 0.0;
            self.step_logits.push(logits);
            *steps += 1;
        }
        Ok(())
    }
    fn logits(&self, i: usize) -> &[f32] {
        &self.step_logits[i]
    }
    fn rollback(&mut self, slot: usize, n: usize) {
        // The script's position stands for the cache: dropping rows steps it back.
        self.slot_steps[slot] = self.slot_steps[slot].saturating_sub(n);
    }
    fn close(&mut self, slot: usize) {
        self.slot_steps[slot] = 0;
    }
}

impl Runtime for ScriptedRuntime {
    fn config(&self) -> &ModelConfig {
        &self.config
    }
    fn backend(&self) -> BackendInfo {
        BackendInfo { kind: "cpu".into(), devices: vec!["scripted test runtime".into()] }
    }
    fn generate(&mut self, job: &DecodeJob<'_>, on_token: &mut dyn FnMut(&Sampled) -> Flow) -> peregrine_engine::Result<RunEnd> {
        self.ran.lock().unwrap().push(job.prompt.to_vec());
        for i in 0..job.max_tokens {
            if !self.pace() {
                return Ok(RunEnd::Stopped);
            }
            let id = self.output[i % self.output.len()];
            let s = Sampled {
                id,
                logprob: -0.25,
                top: (0..job.top_logprobs as u32)
                    .map(|k| TokenLogprob { id: self.output[k as usize % self.output.len()], logprob: -1.0 - k as f32 })
                    .collect(),
                accepted_draft: false,
            };
            if on_token(&s) == Flow::Stop {
                return Ok(RunEnd::Stopped);
            }
        }
        Ok(RunEnd::Length)
    }
    fn score(&mut self, tokens: &[u32]) -> peregrine_engine::Result<Vec<Vec<f32>>> {
        Ok(vec![vec![0.0; self.config.vocab_size]; tokens.len()])
    }
    fn batch(&mut self) -> Option<&mut dyn BatchDecode> {
        (self.batch > 1).then_some(self as &mut dyn BatchDecode)
    }
}

/// A scripted engine: the default model's tokenizer, template and shape, no weights.
pub struct Scripted {
    pub engine: EngineHandle,
    pub ran: Arc<Mutex<Vec<Vec<u32>>>>,
}

/// Starts a scripted engine with `pace` and a queue of `max_queue`, one request at a time.
pub fn scripted_engine(pace: Pace, max_queue: usize) -> Scripted {
    scripted_batch_engine(pace, max_queue, 1)
}

/// [`scripted_engine`] decoding up to `batch` requests together.
pub fn scripted_batch_engine(pace: Pace, max_queue: usize, batch: usize) -> Scripted {
    let ran = Arc::new(Mutex::new(Vec::new()));
    let thread_ran = ran.clone();
    let engine = EngineHandle::start(
        move || {
            let file = GgufFile::open(&model_path())?;
            let config = peregrine_engine::gguf::model_config(&file)?;
            let tokenizer = Tokenizer::from_gguf(&file)?;
            let text = |id: Option<u32>| id.and_then(|i| tokenizer.token_text(i)).unwrap_or_default();
            let template = tokenizer
                .chat_template()
                .map(|src| ChatTemplate::new(src, &text(tokenizer.bos_id()), &text(tokenizer.eos_id())))
                .transpose()?;
            // " hello world" repeated: ordinary text tokens.
            let output = tokenizer.encode(" hello world", false)?;
            let runtime = ScriptedRuntime { config, pace, output, ran: thread_ran, batch, slot_steps: Vec::new(), step_logits: Vec::new() };
            Ok(Generator::new(Box::new(runtime), Some(tokenizer), template))
        },
        EngineLimits { max_queue, max_batch: Some(batch), kv_budget: None, speculative: Default::default() },
    )
    .expect("scripted engine starts");
    Scripted { engine, ran }
}

/// A gated scripted engine and the gate's sender.
pub fn gated_engine(max_queue: usize) -> (Scripted, mpsc::Sender<()>) {
    gated_batch_engine(max_queue, 1)
}

/// A gated scripted engine decoding up to `batch` requests per gate opening.
pub fn gated_batch_engine(max_queue: usize, batch: usize) -> (Scripted, mpsc::Sender<()>) {
    let (tx, rx) = mpsc::channel();
    (scripted_batch_engine(Pace::Gated(Arc::new(Mutex::new(rx))), max_queue, batch), tx)
}

/// A server on a free loopback port; dropping it does not stop it (call `stop`).
pub struct Server {
    pub base: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    /// Triggers graceful shutdown and waits for the server to finish.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        tokio::time::timeout(Duration::from_secs(30), &mut self.task).await.expect("server stops in time").expect("join").expect("serve");
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

/// Serves `state` on an ephemeral loopback port, as `peregrine serve` does.
pub async fn start(state: AppState) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(peregrine_server::serve::serve_on(listener, state, async move {
        let _ = rx.await;
    }));
    Server { base: format!("http://{addr}"), stop: Some(tx), task }
}

/// A fresh empty folder under Cargo's scratch folder for integration tests
/// (`target/tmp`): scratch stays in the build folder (`cargo clean` clears it), not in /tmp.
pub fn temp_dir(name: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("peregrine-test-{name}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A dist folder with an index page and one hashed asset.
pub fn dist_with_index() -> PathBuf {
    let dir = temp_dir("dist");
    std::fs::write(dir.join("index.html"), "<title>Peregrine test page</title>").unwrap();
    std::fs::write(dir.join("app-abc123.js"), "console.log('asset')").unwrap();
    std::fs::write(dir.join("frontend-0123456789abcdef_bg.wasm"), "wasm").unwrap();
    dir
}

/// One server-sent event: its `event:` name (empty if none) and `data:` text.
#[derive(Debug, Clone)]
pub struct Sse {
    pub event: String,
    pub data: String,
}

impl Sse {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("event data is not JSON ({e}): {}", self.data))
    }
}

/// Reads server-sent events from a streaming response (comments skipped).
pub struct SseReader {
    stream: futures_util::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buf: String,
    /// Keep-alive comments seen.
    pub comments: usize,
}

impl SseReader {
    pub fn new(response: reqwest::Response) -> Self {
        let ct = response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        assert!(ct.starts_with("text/event-stream"), "expected an event stream, got {ct:?} ({})", response.status());
        SseReader { stream: response.bytes_stream().boxed(), buf: String::new(), comments: 0 }
    }

    /// The next event, or `None` when the stream ends. Panics after 60 s of silence.
    pub async fn next(&mut self) -> Option<Sse> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let (mut event, mut data) = (String::new(), Vec::new());
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        event = v.trim_start().to_string();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push(v.strip_prefix(' ').unwrap_or(v).to_string());
                    } else if line.starts_with(':') {
                        self.comments += 1;
                    }
                }
                if data.is_empty() {
                    continue;
                }
                return Some(Sse { event, data: data.join("\n") });
            }
            match tokio::time::timeout(Duration::from_secs(60), self.stream.next()).await.expect("stream silent for 60 s") {
                Some(Ok(chunk)) => self.buf.push_str(&String::from_utf8_lossy(&chunk)),
                Some(Err(e)) => panic!("stream failed: {e}"),
                None => return None,
            }
        }
    }

    /// Every remaining event.
    pub async fn collect(mut self) -> Vec<Sse> {
        let mut out = Vec::new();
        while let Some(e) = self.next().await {
            out.push(e);
        }
        out
    }
}

/// Waits until `f` is true, polling every 20 ms, for at most `within`.
pub async fn wait_for(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < within {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    f()
}

/// A `peregrine_*` value from the /metrics text.
/// `name` may carry labels (`x_total{reason="stop"}`); the `model_name` label every
/// series has is not part of the match.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (series, value) = l.rsplit_once(' ')?;
        (without_model_label(series) == name).then(|| value.parse().ok()).flatten()
    })
}

/// A series name with its `model_name="…"` label removed.
pub fn without_model_label(series: &str) -> String {
    let Some(start) = series.find("model_name=\"") else { return series.to_string() };
    let end = series[start + 12..].find('"').map_or(series.len(), |e| start + 12 + e + 1);
    let mut s = format!("{}{}", &series[..start], &series[end..]);
    for (from, to) in [("{,", "{"), (",}", "}"), ("{}", "")] {
        s = s.replace(from, to);
    }
    s
}

/// Reads a raw socket until the server closes it or `patience` after `since` passes:
/// what it sent, and how long after `since` it closed (None: still open).
pub async fn read_until_closed(
    s: &mut (impl tokio::io::AsyncRead + Unpin),
    since: std::time::Instant,
    patience: Duration,
) -> (String, Option<Duration>) {
    use tokio::io::AsyncReadExt;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(patience.saturating_sub(since.elapsed()), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (String::from_utf8_lossy(&got).into_owned(), Some(since.elapsed())),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => return (String::from_utf8_lossy(&got).into_owned(), None),
        }
    }
}

/// Runs `peregrine serve` on the default model with `flags` and expects it to stop
/// before it binds, its stderr saying `said`.
pub fn assert_refused_before_binding(flags: &[&str], said: &str) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_peregrine"))
        .args(["serve", "--device", "cpu", "--port", "0", "--model"])
        .arg(model_path())
        .args(flags)
        .output()
        .expect("run peregrine serve");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{flags:?} was accepted");
    assert!(stderr.contains(said), "{flags:?}: {stderr}");
    assert!(!stderr.contains("listening on"), "{flags:?}: bound before refusing: {stderr}");
}
