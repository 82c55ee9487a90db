//! A throwaway PostgreSQL server for tests: `initdb` in a fresh folder under /tmp
//! (which a non-root user can reach, unlike root's cache), `postgres` on a free
//! loopback port with its unix socket in the same folder, stopped and removed when
//! dropped. PostgreSQL refuses to run as root, so as root it runs as the `postgres`
//! user (else `nobody`). Where the binaries are missing, `start` says so and the test
//! returns (`scripts/setup.sh test` installs them).

use std::ffi::CString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a fresh server may take to accept connections.
const READY_WITHIN: Duration = Duration::from_secs(30);

/// A running PostgreSQL server; user `peregrine`, trust authentication, loopback only.
pub struct Postgres {
    child: Option<Child>,
    bin: PathBuf,
    dir: PathBuf,
    user: Option<(u32, u32)>,
    pub port: u16,
}

/// The folder with `initdb` and `postgres`: `$PEREGRINE_PG_BIN`, else Debian's newest
/// `/usr/lib/postgresql/*/bin`.
fn bin_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("PEREGRINE_PG_BIN").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, bin): &(u32, PathBuf)| bin.join("initdb").exists() && bin.join("postgres").exists())
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// The uid and gid to run as when we are root.
fn unprivileged_user() -> Option<(u32, u32)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    for name in ["postgres", "nobody"] {
        let c = CString::new(name).ok()?;
        // SAFETY: `c` is a valid C string; the returned record is read at once, before
        // any other getpw* call can overwrite it.
        let pw = unsafe { libc::getpwnam(c.as_ptr()) };
        if !pw.is_null() {
            // SAFETY: `pw` is non-null and points to libc's static passwd record.
            return Some(unsafe { ((*pw).pw_uid, (*pw).pw_gid) });
        }
    }
    None
}

/// A command that runs as `user` (when set) and gets SIGINT — PostgreSQL's fast
/// shutdown — if the test's thread dies without dropping its server.
fn command(program: &Path, user: Option<(u32, u32)>) -> Command {
    let mut cmd = Command::new(program);
    // SAFETY: the closure runs in the forked child before exec and calls only
    // async-signal-safe functions (setgroups, setgid, setuid, prctl).
    unsafe {
        cmd.pre_exec(move || {
            if let Some((uid, gid)) = user {
                if libc::setgroups(0, std::ptr::null()) != 0 || libc::setgid(gid) != 0 || libc::setuid(uid) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            // After the user change, which clears the parent-death signal.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGINT);
            Ok(())
        });
    }
    cmd
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

impl Postgres {
    /// Creates and starts a server, or prints why it cannot and returns `None`.
    pub async fn start() -> Option<Postgres> {
        let Some(bin) = bin_dir() else {
            println!("PostgreSQL tests did not run: no initdb/postgres under /usr/lib/postgresql/*/bin (set PEREGRINE_PG_BIN, or run scripts/setup.sh test)");
            return None;
        };
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("peregrine-pg-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the PostgreSQL folder");
        let user = unprivileged_user();
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).expect("hand the PostgreSQL folder to its user");
        }
        let init = command(&bin.join("initdb"), user)
            .arg("-D")
            .arg(dir.join("data"))
            .args(["-U", "peregrine", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"])
            .stdout(Stdio::null())
            .output()
            .expect("run initdb");
        assert!(init.status.success(), "initdb failed: {}", String::from_utf8_lossy(&init.stderr));
        let mut pg = Postgres { child: None, bin, dir, user, port: free_port() };
        pg.resume().await;
        Some(pg)
    }

    /// Starts the server on its folder and port (again, after `pause`).
    pub async fn resume(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join("postgres.log")).expect("open the log");
        let child = command(&self.bin.join("postgres"), self.user)
            .arg("-D")
            .arg(self.dir.join("data"))
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-k")
            .arg(&self.dir)
            // Throwaway data: nothing needs to survive a crash.
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn postgres");
        self.child = Some(child);
        let started = Instant::now();
        while tokio_postgres::connect(&self.url("postgres"), tokio_postgres::NoTls).await.is_err() {
            assert!(started.elapsed() < READY_WITHIN, "PostgreSQL did not start within {READY_WITHIN:?}: {}", self.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops the server (fast shutdown), keeping its data for `resume`.
    pub fn pause(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill on our own child's pid.
            unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
            let started = Instant::now();
            while matches!(child.try_wait(), Ok(None)) && started.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The URL of database `db` as user `peregrine`.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://peregrine@127.0.0.1:{}/{db}", self.port)
    }

    /// A new empty database; its URL.
    pub async fn database(&self, name: &str) -> String {
        let (client, conn) = tokio_postgres::connect(&self.url("postgres"), tokio_postgres::NoTls).await.expect("connect");
        tokio::spawn(conn);
        client.batch_execute(&format!("CREATE DATABASE {name}")).await.expect("create database");
        self.url(name)
    }

    /// The server's log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("postgres.log")).unwrap_or_default()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.pause();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
