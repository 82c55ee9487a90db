//! nginx in the foreground for tests: `deploy/nginx.conf` with its placeholders filled,
//! wrapped in a main config whose pid, logs and temp folders live in a fresh folder
//! under /tmp (nginx's workers run as `nobody` when we are root, and must reach them),
//! on a free loopback port; stopped when dropped. Where nginx is missing, `start`
//! says so and the test returns (`scripts/setup.sh test` installs nginx-light).

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The balancer's configuration as deployed.
pub const TEMPLATE: &str = include_str!("../../../../deploy/nginx.conf");

/// A running nginx.
pub struct Nginx {
    child: Child,
    dir: PathBuf,
    pub base: String,
}

fn binary() -> Option<PathBuf> {
    ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"].iter().map(PathBuf::from).find(|p| p.exists())
}

/// `TEMPLATE` with the replicas' and the listener's addresses in place.
pub fn fill(a: &str, b: &str, listen: &str) -> String {
    let conf = TEMPLATE.replace("${PEREGRINE_REPLICA_A}", a).replace("${PEREGRINE_REPLICA_B}", b).replace("${NGINX_LISTEN}", listen);
    // Only the comments may still name a placeholder.
    for line in conf.lines().filter(|l| !l.trim_start().starts_with('#')) {
        assert!(!line.contains("${"), "an unfilled placeholder in deploy/nginx.conf: {line}");
    }
    conf
}

impl Nginx {
    /// Balances over the replicas at `a` and `b` (`host:port`).
    pub async fn start(a: &str, b: &str) -> Option<Nginx> {
        let Some(bin) = binary() else {
            println!("nginx tests did not run: no nginx binary (run scripts/setup.sh test, which installs nginx-light)");
            return None;
        };
        let dir = std::env::temp_dir().join(format!("peregrine-nginx-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the nginx folder");
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port");
        let listen = format!("127.0.0.1:{port}");
        std::fs::write(dir.join("peregrine.conf"), fill(a, b, &listen)).unwrap();
        let d = dir.display();
        let main = format!(
            "worker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\nevents {{ worker_connections 256; }}\n\
             http {{\n  access_log {d}/access.log;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
             fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  include {d}/peregrine.conf;\n}}\n"
        );
        std::fs::write(dir.join("nginx.conf"), main).unwrap();
        let mut cmd = Command::new(bin);
        cmd.arg("-p").arg(&dir).arg("-c").arg(dir.join("nginx.conf")).arg("-e").arg(dir.join("error.log")).args(["-g", "daemon off;"]);
        // SAFETY: prctl is async-signal-safe; it runs in the child before exec. SIGTERM
        // (nginx's fast shutdown, which also stops the workers) if the test's thread dies.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("spawn nginx");
        let nginx = Nginx { child, dir, base: format!("http://{listen}") };
        let started = Instant::now();
        while tokio::net::TcpStream::connect(&listen).await.is_err() {
            assert!(started.elapsed() < Duration::from_secs(10), "nginx did not start: {}", nginx.log());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Some(nginx)
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// nginx's error log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SAFETY: kill on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let started = Instant::now();
        while matches!(self.child.try_wait(), Ok(None)) && started.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
