//! The real `peregrine serve` binary on the default model (CPU, loopback, a free
//! port), as a user starts it: its address, its process id for memory readings, and
//! a kill when dropped.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use super::{dist_with_index, model_path, temp_dir};

/// How long the binary may take to bind and load the default model.
const STARTUP: Duration = Duration::from_secs(120);

/// A running `peregrine serve` child process.
pub struct Served {
    child: Child,
    pub base: String,
    pub pid: u32,
    /// Every stderr line so far (startup messages, the log).
    log: Arc<Mutex<Vec<String>>>,
}

impl Served {
    /// Starts the binary with `extra` flags and waits until `/health` says ok. The
    /// process gets a soft limit of `descriptors` open files, like a default shell's
    /// 1024, so floods meet the limit a user's server meets. Shares go to a fresh data
    /// dir unless `extra` names a `--share-store`.
    pub async fn start(descriptors: u32, extra: &[&str]) -> Served {
        Self::start_with_env(descriptors, extra, &[]).await
    }

    /// [`Served::start`] with these environment variables set.
    pub async fn start_with_env(descriptors: u32, extra: &[&str], env: &[(&str, &str)]) -> Served {
        let dist = dist_with_index();
        let dist = dist.to_str().expect("a UTF-8 temp path");
        Self::launch(descriptors, &[&["--dist", dist], extra].concat(), env).await
    }

    /// [`Served::start`] serving the playground built into the binary (no `--dist`).
    pub async fn start_embedded(extra: &[&str]) -> Served {
        Self::launch(1024, extra, &[]).await
    }

    async fn launch(descriptors: u32, extra: &[&str], env: &[(&str, &str)]) -> Served {
        let mut store = vec!["--data-dir".to_string(), temp_dir("served-data").display().to_string()];
        if extra.contains(&"--share-store") {
            store.clear();
        }
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(format!("ulimit -n {descriptors} && exec \"$0\" \"$@\""))
            .arg(env!("CARGO_BIN_EXE_peregrine"))
            .args(["serve", "--device", "cpu", "--port", "0"])
            .arg("--model")
            .arg(model_path())
            .args(&store)
            .args(extra)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn peregrine serve");
        let pid = child.id();
        // The address comes from the "listening on" line; stderr is drained after it.
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = mpsc::channel();
        let log = Arc::new(Mutex::new(Vec::new()));
        let lines = log.clone();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
                lines.lock().unwrap().push(line.clone());
                if let Some(rest) = line.split("listening on ").nth(1) {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(rest.split_whitespace().next().unwrap_or_default().to_string());
                    }
                }
            }
        });
        let base = rx.recv_timeout(STARTUP).expect("peregrine serve prints its address");
        let served = Served { child, base, pid, log };
        let started = Instant::now();
        loop {
            let ok = reqwest::get(served.url("/health")).await.is_ok_and(|r| r.status() == 200);
            if ok {
                return served;
            }
            assert!(started.elapsed() < STARTUP, "the default model did not load within {STARTUP:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The stderr lines so far.
    pub fn log_lines(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// Waits up to `within` for a stderr line that `matches`.
    pub async fn wait_for_line(&self, within: Duration, matches: impl Fn(&str) -> bool) -> Option<String> {
        let started = Instant::now();
        while started.elapsed() < within {
            if let Some(l) = self.log_lines().into_iter().find(|l| matches(l)) {
                return Some(l);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// `host:port` of the server.
    pub fn addr(&self) -> &str {
        self.base.trim_start_matches("http://")
    }

    /// A field of /proc/PID/status in MiB (VmRSS now, VmHWM the peak so far).
    pub fn memory_mib(&self, field: &str) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).expect("read /proc status");
        let line = status.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("{field} missing from /proc status"));
        let kib: f64 = line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("a kB figure");
        kib / 1024.0
    }

    /// Kills the process at once (a replica that dies).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Whether the process is still running (it must never exit under abuse).
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
