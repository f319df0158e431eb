//! Runs the built `droid-pool` binary for integration tests.
//!
//! stdout is piped and collected line by line (the `[POOL] ...` lines are the
//! pooler's test-visible events); stderr goes to a file whose tail is printed
//! when a wait fails or a test panics while the pooler is alive.

use std::fs::{self, File};
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use super::pg::PgServer;
use super::{conn_string, conn_string_pw, free_port, tail_file, try_connect};

/// Path of the binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_droid-pool");
/// Prefix of the line the pooler prints once it accepts connections.
pub const LISTENING_PREFIX: &str = "[POOL] listening on";
/// Prefix of the test-visible event lines.
pub const POOL_PREFIX: &str = "[POOL]";
/// The admin token the harness gives every pooler it starts (`--admin-token-file`) unless
/// the test's config sets `admin.token` or `admin.token_file` itself; the admin request
/// helpers send it. Tests of the control routes' refusals use [`http_raw`].
pub const ADMIN_TOKEN: &str = "harness-admin-token-0123456789";
/// How long [`Pooler::start`] waits for the listening line.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Default)]
struct Output {
    /// Every stdout line.
    all: Vec<String>,
    /// Only the lines starting with `[POOL]`.
    pool: Vec<String>,
    /// stdout reached EOF (the process exited or closed it).
    eof: bool,
}

#[derive(Default)]
struct Shared {
    out: Mutex<Output>,
    changed: Condvar,
}

pub struct Pooler {
    child: Mutex<Child>,
    pid: u32,
    port: u16,
    admin_port: u16,
    shared: Arc<Shared>,
    stderr_path: PathBuf,
    config_path: Option<PathBuf>,
    // Holds the stderr file and the config file; removed on drop.
    _dir: tempfile::TempDir,
}

impl Pooler {
    /// Spawns `droid-pool --port <free> --server-port <pg.port> ARGS...` and
    /// waits (up to 10 s) for `[POOL] listening on`. Panics, printing stdout
    /// and the stderr tail, if it does not come. Retries with another port if
    /// the chosen one turned out to be taken.
    pub fn start(pg: &PgServer, args: &[&str]) -> Pooler {
        Pooler::start_inner(pg, None, args)
    }

    /// Like [`Pooler::start`], with `yaml` written to a temp file passed as
    /// `--config FILE` (before `extra_args`).
    pub fn start_with_config(pg: &PgServer, yaml: &str, extra_args: &[&str]) -> Pooler {
        Pooler::start_inner(pg, Some(yaml), extra_args)
    }

    /// Like [`Pooler::start_with_config`], logging in to servers on `server_port` instead of
    /// a harness PostgreSQL (a scripted peer, say).
    pub fn start_for_server(server_port: u16, yaml: &str) -> Pooler {
        Pooler::start_on(Some(server_port), Some(yaml), &[], &[])
    }

    /// Like [`Pooler::start_with_config`] without `--server-port`: the YAML names the
    /// servers (`server.hosts`, `databases:`).
    pub fn start_with_hosts(yaml: &str) -> Pooler {
        Pooler::start_on(None, Some(yaml), &[], &[])
    }

    fn start_inner(pg: &PgServer, yaml: Option<&str>, args: &[&str]) -> Pooler {
        Pooler::start_on(Some(pg.port), yaml, args, &[])
    }

    /// [`Pooler::start_with_config`] with `env` set for the pooler's process.
    pub fn start_with_env(pg: &PgServer, yaml: &str, env: &[(&str, &str)]) -> Pooler {
        Pooler::start_on(Some(pg.port), Some(yaml), &[], env)
    }

    fn start_on(
        server_port: Option<u16>,
        yaml: Option<&str>,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Pooler {
        let mut attempt = 1;
        loop {
            let pooler = Pooler::spawn_on(server_port, yaml, args, env);
            if pooler.wait_for_prefix_quiet(LISTENING_PREFIX, START_TIMEOUT) {
                return pooler;
            }
            let exited = pooler.wait_exit(Duration::from_millis(200));
            let stderr = pooler.stderr();
            let in_use = stderr.contains("in use") || stderr.contains("os error 98");
            if exited.is_some() && in_use && attempt < 3 {
                attempt += 1;
                continue;
            }
            pooler.dump(&format!(
                "droid-pool did not print `{LISTENING_PREFIX}` within {START_TIMEOUT:?} \
                 (exit status: {exited:?})"
            ));
            let port = pooler.port;
            drop(pooler);
            panic!(
                "droid-pool failed to start (port {port}, exit status {exited:?}); \
                 output printed above"
            );
        }
    }

    /// Spawns like [`Pooler::start`] but does not wait for anything: for
    /// tests that expect a startup failure (use [`Pooler::wait_exit`]).
    pub fn spawn(pg: &PgServer, args: &[&str]) -> Pooler {
        Pooler::spawn_inner(pg, None, args)
    }

    /// [`Pooler::spawn`] with `--config FILE` holding `yaml`.
    pub fn spawn_with_config(pg: &PgServer, yaml: &str, extra_args: &[&str]) -> Pooler {
        Pooler::spawn_inner(pg, Some(yaml), extra_args)
    }

    fn spawn_inner(pg: &PgServer, yaml: Option<&str>, args: &[&str]) -> Pooler {
        Pooler::spawn_on(Some(pg.port), yaml, args, &[])
    }

    fn spawn_on(
        server_port: Option<u16>,
        yaml: Option<&str>,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Pooler {
        let port = free_port();
        let admin_port = free_port();
        let mut full: Vec<String> = vec![
            "--port".into(),
            port.to_string(),
            "--admin-port".into(),
            admin_port.to_string(),
        ];
        if let Some(p) = server_port {
            full.extend(["--server-port".into(), p.to_string()]);
        }
        let dir = new_dir();
        if !yaml.is_some_and(|y| y.contains("token")) {
            let path = dir.path().join("admin-token");
            fs::write(&path, format!("{ADMIN_TOKEN}\n")).expect("write the admin token");
            full.push("--admin-token-file".into());
            full.push(path.display().to_string());
        }
        let config_path = yaml.map(|yaml| {
            let path = dir.path().join("droid-pool.yaml");
            fs::write(&path, yaml).expect("write pooler config");
            full.push("--config".into());
            full.push(path.display().to_string());
            path
        });
        full.extend(args.iter().map(|a| a.to_string()));
        let mut p = Pooler::launch(dir, port, config_path, &full, env);
        p.admin_port = admin_port;
        p
    }

    /// Spawns the binary with exactly `args` (nothing added) without waiting;
    /// `port` is only what [`Pooler::port`] and the connect helpers use.
    pub fn spawn_raw(port: u16, args: &[&str]) -> Pooler {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        Pooler::launch(new_dir(), port, None, &args, &[])
    }

    fn launch(
        dir: tempfile::TempDir,
        port: u16,
        config_path: Option<PathBuf>,
        args: &[String],
        env: &[(&str, &str)],
    ) -> Pooler {
        let stderr_path = dir.path().join("stderr.log");
        let stderr = File::create(&stderr_path).expect("create pooler stderr file");
        let mut child = Command::new(BIN)
            .args(args)
            .env("RUST_BACKTRACE", "1")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {BIN} {args:?}: {e}"));
        let pid = child.id();
        spawn_watchdog(pid, dir.path());
        let stdout = child.stdout.take().expect("piped stdout");
        let shared = Arc::new(Shared::default());
        let reader_shared = Arc::clone(&shared);
        thread::Builder::new()
            .name(format!("droid-pool-{pid}-stdout"))
            .spawn(move || read_lines(stdout, &reader_shared))
            .expect("spawn stdout reader thread");
        Pooler {
            child: Mutex::new(child),
            pid,
            port,
            admin_port: 0,
            shared,
            stderr_path,
            config_path,
            _dir: dir,
        }
    }

    /// The admin HTTP port (0 for `spawn_raw`, which passes only the given arguments).
    pub fn admin_port(&self) -> u16 {
        self.admin_port
    }

    /// `GET`s an admin path; returns the status code and body.
    pub fn admin_get(&self, path: &str) -> (u16, String) {
        http_request(self.admin_port, "GET", path)
    }

    /// `GET /status`, parsed.
    pub fn status(&self) -> serde_json::Value {
        let (code, body) = self.admin_get("/status");
        assert_eq!(code, 200, "GET /status: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("/status is not JSON ({e}): {body}"))
    }

    /// Server connections checked out by clients, over all pools (from `/status`).
    pub fn servers_active(&self) -> i64 {
        let s = self.status();
        s["pools"]
            .as_array()
            .unwrap_or_else(|| panic!("/status pools is not an array: {s}"))
            .iter()
            .map(|p| p["servers_active"].as_i64().expect("servers_active"))
            .sum()
    }

    /// `POST`s to an admin path; returns the status code and body.
    pub fn admin_post(&self, path: &str) -> (u16, String) {
        http_request(self.admin_port, "POST", path)
    }

    /// The pooler's client port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The `[POOL] ...` lines printed so far.
    pub fn lines(&self) -> Vec<String> {
        self.out().pool.clone()
    }

    /// Every stdout line printed so far.
    pub fn all_lines(&self) -> Vec<String> {
        self.out().all.clone()
    }

    /// Everything written to stderr so far.
    pub fn stderr(&self) -> String {
        fs::read(&self.stderr_path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    pub fn stderr_path(&self) -> &Path {
        &self.stderr_path
    }

    /// The `--config` file, if started with one. Rewriting it and sending a
    /// signal is how a reload test would change the config.
    pub fn config_path(&self) -> Option<&Path> {
        self.config_path.as_deref()
    }

    /// Writes `yaml` as the pooler's configuration file and asks for a reload (`POST
    /// /reload`), which must be accepted (202).
    pub fn reload_with(&self, yaml: &str) {
        let path = self
            .config_path()
            .expect("the pooler was started with a config file");
        std::fs::write(path, yaml).expect("config file written");
        let (code, body) = self.admin_post("/reload");
        assert_eq!(code, 202, "reload: {body}");
    }

    /// Waits until `pred` holds for the `[POOL]` lines so far. Returns false
    /// on timeout or when stdout closed without it holding (and then prints
    /// stdout and the stderr tail to the test's output).
    pub fn wait_for(&self, pred: impl FnMut(&[String]) -> bool, timeout: Duration) -> bool {
        let ok = self.wait_quiet(pred, timeout);
        if !ok {
            self.dump(&format!("wait_for: condition not met within {timeout:?}"));
        }
        ok
    }

    /// Waits for a `[POOL]` line equal to `exact`.
    pub fn wait_for_line(&self, exact: &str, timeout: Duration) -> bool {
        let ok = self.wait_quiet(|lines| lines.iter().any(|l| l == exact), timeout);
        if !ok {
            self.dump(&format!(
                "wait_for_line: no line `{exact}` within {timeout:?}"
            ));
        }
        ok
    }

    /// Waits for a `[POOL]` line starting with `prefix`; returns the first.
    pub fn wait_for_prefix(&self, prefix: &str, timeout: Duration) -> Option<String> {
        let mut found = None;
        let ok = self.wait_quiet(
            |lines| {
                found = lines.iter().find(|l| l.starts_with(prefix)).cloned();
                found.is_some()
            },
            timeout,
        );
        if !ok {
            self.dump(&format!(
                "wait_for_prefix: no line starting `{prefix}` within {timeout:?}"
            ));
        }
        found
    }

    fn wait_for_prefix_quiet(&self, prefix: &str, timeout: Duration) -> bool {
        self.wait_quiet(|lines| lines.iter().any(|l| l.starts_with(prefix)), timeout)
    }

    fn wait_quiet(&self, mut pred: impl FnMut(&[String]) -> bool, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut out = self.out();
        loop {
            if pred(&out.pool) {
                return true;
            }
            let now = Instant::now();
            if out.eof || now >= deadline {
                return false;
            }
            out = self
                .shared
                .changed
                .wait_timeout(out, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn out(&self) -> MutexGuard<'_, Output> {
        self.shared.out.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn child(&self) -> MutexGuard<'_, Child> {
        self.child.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Prints what the pooler said (stdout and the tail of stderr).
    fn dump(&self, why: &str) {
        let stdout = self.all_lines().join("\n");
        eprintln!(
            "=== {why}\n--- droid-pool pid {} port {} stdout ---\n{stdout}\n\
             --- stderr tail ({}) ---\n{}\n=== end droid-pool output",
            self.pid,
            self.port,
            self.stderr_path.display(),
            tail_file(&self.stderr_path, 40),
        );
    }

    /// `host=127.0.0.1 port=<pooler> user=.. dbname=..`
    pub fn conn_string(&self, user: &str, db: &str) -> String {
        conn_string(self.port, user, db)
    }

    /// Same, with `password=..`.
    pub fn conn_string_pw(&self, user: &str, password: &str, db: &str) -> String {
        conn_string_pw(self.port, user, password, db)
    }

    /// Connects through the pooler; panics (printing the pooler's output)
    /// on failure.
    pub async fn connect(&self, user: &str, db: &str) -> tokio_postgres::Client {
        let conn = self.conn_string(user, db);
        match try_connect(&conn).await {
            Ok(client) => client,
            Err(e) => {
                self.dump(&format!("connect `{conn}` failed: {e}"));
                panic!("connect through droid-pool `{conn}`: {e}");
            }
        }
    }

    /// Connects through the pooler, returning the error (for auth tests).
    pub async fn try_connect(
        &self,
        user: &str,
        db: &str,
    ) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
        try_connect(&self.conn_string(user, db)).await
    }

    /// Whether the process has exited (reaping it if so).
    pub fn has_exited(&self) -> bool {
        matches!(self.child().try_wait(), Ok(Some(_)))
    }

    /// Sends a signal by name (`HUP`, `TERM`, `INT`, `USR1`, ...) with the
    /// `kill` command. Panics if the process already exited.
    pub fn signal(&self, name: &str) {
        let mut child = self.child();
        if let Ok(Some(status)) = child.try_wait() {
            drop(child);
            self.dump(&format!("signal {name}: already exited"));
            panic!("signal {name}: droid-pool already exited with {status}");
        }
        // Holding the lock while signalling: nobody reaps the pid meanwhile,
        // so it cannot have been reused.
        let status = Command::new("kill")
            .args(["-s", name, &self.pid.to_string()])
            .stdin(Stdio::null())
            .status()
            .expect("run kill");
        assert!(
            status.success(),
            "kill -s {name} {} failed: {status}",
            self.pid
        );
    }

    /// SIGKILL (via the `kill` command) and reap. No-op if already exited.
    pub fn kill(&self) {
        let mut child = self.child();
        if let Ok(None) = child.try_wait() {
            let _ = Command::new("kill")
                .args(["-s", "KILL", &self.pid.to_string()])
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let _ = child.wait();
        }
    }

    /// Waits up to `timeout` for the process to exit.
    pub fn wait_exit(&self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child().try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Pooler {
    fn drop(&mut self) {
        if thread::panicking() {
            self.dump("test panicked while droid-pool was running");
        }
        self.kill();
    }
}

/// Drop does not run if the test process is killed (or aborts): a detached
/// shell SIGKILLs the pooler and removes its temp dir once the test process
/// is gone. It exits by itself as soon as the pooler has exited, so it never
/// outlives the pid.
fn spawn_watchdog(pooler_pid: u32, dir: &Path) {
    let dir = dir.display().to_string().replace('\'', r"'\''");
    let script = format!(
        "while kill -0 {pooler_pid} 2>/dev/null; do \
           if ! kill -0 {test_pid} 2>/dev/null; then \
             kill -9 {pooler_pid}; rm -rf '{dir}'; exit 0; \
           fi; \
           sleep 1; \
         done",
        test_pid = std::process::id(),
    );
    let spawned = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn();
    if let Err(e) = spawned {
        eprintln!("warning: no watchdog for droid-pool pid {pooler_pid}: {e}");
    }
}

fn new_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("droid-pool-it-")
        .tempdir()
        .expect("create pooler temp dir")
}

fn read_lines(stdout: ChildStdout, shared: &Shared) {
    let mut reader = BufReader::new(stdout);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                let line = String::from_utf8_lossy(&buf)
                    .trim_end_matches(['\n', '\r'])
                    .to_string();
                let mut out = shared.out.lock().unwrap_or_else(|e| e.into_inner());
                if line.starts_with(POOL_PREFIX) {
                    out.pool.push(line.clone());
                }
                out.all.push(line);
                drop(out);
                shared.changed.notify_all();
            }
        }
    }
    shared.out.lock().unwrap_or_else(|e| e.into_inner()).eof = true;
    shared.changed.notify_all();
}

/// A minimal blocking HTTP/1.1 request (no client crate needed); `(0, error)` when the
/// connection fails.
pub fn http_request(port: u16, method: &str, path: &str) -> (u16, String) {
    http_request_body(port, method, path, "")
}

/// [`http_request`] with a request body (sent as `text/plain`), and the harness's admin
/// token.
pub fn http_request_body(port: u16, method: &str, path: &str, body: &str) -> (u16, String) {
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
         Authorization: Bearer {ADMIN_TOKEN}\r\nContent-Type: text/plain\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    http_raw(([127, 0, 0, 1], 0).into(), port, &req)
}

/// Sends `request` (a whole HTTP/1.1 request) from `from` (port 0: any) to the admin port on
/// 127.0.0.1; returns the status code and body, `(0, error)` when the connection fails.
pub fn http_raw(from: std::net::SocketAddr, port: u16, request: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let connect = || -> std::io::Result<std::net::TcpStream> {
        let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
        sock.bind(&from.into())?;
        sock.connect(&std::net::SocketAddr::from(([127, 0, 0, 1], port)).into())?;
        Ok(sock.into())
    };
    let mut s = match connect() {
        Ok(s) => s,
        Err(e) => return (0, e.to_string()),
    };
    let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(5)));
    if let Err(e) = s.write_all(request.as_bytes()) {
        return (0, e.to_string());
    }
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    let code = resp
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = resp
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (code, body)
}
