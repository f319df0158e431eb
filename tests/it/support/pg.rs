//! Throwaway PostgreSQL servers for integration tests.
//!
//! Each server lives in its own temp dir (data dir `DIR/data`, unix socket in
//! `DIR`, server log `DIR/data/postgres.log`), listens on 127.0.0.1 on a free
//! port and has these roles (see [`PgServer::start_new`]):
//!
//! | role         | password     | stored as | pg_hba method  |
//! |--------------|--------------|-----------|----------------|
//! | `postgres`   | -            | -         | trust          |
//! | `droid`      | -            | -         | trust (superuser, owns db `droid`) |
//! | `scram_user` | `scram_pass` | SCRAM     | scram-sha-256  |
//! | `md5_user`   | `md5_pass`   | md5       | md5            |
//! | `clear_user` | `clear_pass` | SCRAM     | password (cleartext) |
//! | members of `droid_scram` | set by the test | SCRAM | scram-sha-256 |
//!
//! A test that needs roles of its own which must prove a SCRAM password (SCRAM passthrough)
//! creates them `IN ROLE droid_scram` ([`SCRAM_GROUP`]).
//!
//! initdb, pg_ctl and postgres refuse to run as root: when the test process
//! is root they run as the OS user `postgres` via `runuser`.
//!
//! A server is stopped by `Drop`, and in any case by a small detached
//! watchdog shell that waits for the test process to exit, then runs
//! `pg_ctl stop -m immediate` and removes the temp dir (statics never drop).

use std::env;
use std::fmt::Write as _;
use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use super::{conn_string, free_port, tail_file, try_connect, DB};

mod pair;
pub use pair::{shared_pair, Pair};

/// Bootstrap superuser (`initdb -U postgres`).
pub const SUPERUSER: &str = "postgres";
/// OS user that runs the server when the tests run as root.
const OS_USER: &str = "postgres";
/// Test roles with passwords: (role, password, pg_hba method).
pub const PASSWORD_USERS: &[(&str, &str, &str)] = &[
    ("scram_user", "scram_pass", "scram-sha-256"),
    ("md5_user", "md5_pass", "md5"),
    ("clear_user", "clear_pass", "password"),
];

/// Roles in this group log in over TCP with scram-sha-256 only (tests create them).
pub const SCRAM_GROUP: &str = "droid_scram";

/// Environment variables that would redirect libpq tools elsewhere.
pub(crate) const PG_ENV: &[&str] = &[
    "PGHOST",
    "PGHOSTADDR",
    "PGPORT",
    "PGUSER",
    "PGDATABASE",
    "PGPASSWORD",
    "PGPASSFILE",
    "PGSERVICE",
    "PGSERVICEFILE",
    "PGOPTIONS",
    "PGSSLMODE",
    "PGDATA",
    "PGCLUSTER",
];

pub struct PgServer {
    /// TCP port on 127.0.0.1.
    pub port: u16,
    /// Temp dir root; also the unix socket directory.
    dir: PathBuf,
    data: PathBuf,
    /// Directory holding initdb, pg_ctl, postgres.
    server_bin: PathBuf,
    /// Run server binaries via `runuser -u postgres --`.
    as_postgres: bool,
    pg_stat_statements: bool,
    // Last: removed after `Drop::drop` has stopped the server.
    _tmp: tempfile::TempDir,
}

static SHARED: OnceLock<Result<PgServer, String>> = OnceLock::new();

/// The per-process shared server, started on first use.
pub fn shared() -> &'static PgServer {
    PgServer::shared()
}

impl PgServer {
    /// The per-process shared server, started on first use. A failed start
    /// is remembered: every later caller panics with the same message.
    pub fn shared() -> &'static PgServer {
        match SHARED.get_or_init(PgServer::create) {
            Ok(pg) => pg,
            Err(e) => panic!("shared PostgreSQL failed to start:\n{e}"),
        }
    }

    /// A private server, stopped (and its dir removed) on drop.
    pub fn start_new() -> PgServer {
        PgServer::create().unwrap_or_else(|e| panic!("PostgreSQL failed to start:\n{e}"))
    }

    fn create() -> Result<PgServer, String> {
        let as_postgres = is_root();
        if as_postgres {
            run(
                Command::new("id").args(["-u", OS_USER]),
                "look up the OS user `postgres`",
            )
            .map_err(|e| {
                format!(
                    "running as root, so PostgreSQL must run as OS user `{OS_USER}`, \
                     which does not exist (scripts/ensure-deps.sh creates it): {e}"
                )
            })?;
        }
        let initdb = try_bin("initdb").ok_or_else(|| {
            "initdb not found on PATH nor in /usr/lib/postgresql/*/bin; \
             run scripts/ensure-deps.sh"
                .to_string()
        })?;
        let initdb = fs::canonicalize(&initdb).unwrap_or(initdb);
        let server_bin = initdb
            .parent()
            .ok_or("initdb has no parent dir")?
            .to_path_buf();

        let base = if Path::new("/tmp").is_dir() {
            PathBuf::from("/tmp")
        } else {
            env::temp_dir()
        };
        let tmp = tempfile::Builder::new()
            .prefix("droid-pg-")
            .tempdir_in(&base)
            .map_err(|e| format!("create temp dir in {}: {e}", base.display()))?;
        let dir = tmp.path().to_path_buf();
        let data = dir.join("data");
        if as_postgres {
            run(
                Command::new("chown").arg(format!("{OS_USER}:")).arg(&dir),
                "chown the temp dir to postgres",
            )?;
        }
        let pg_stat_statements = pg_stat_statements_available(&server_bin);
        let mut pg = PgServer {
            port: 0,
            dir,
            data,
            server_bin,
            as_postgres,
            pg_stat_statements,
            _tmp: tmp,
        };
        pg.initdb()?;
        // The chosen port may be taken by someone else before postgres binds it.
        let mut last_err = String::new();
        for _ in 0..5 {
            pg.port = free_port();
            match pg.try_start() {
                Ok(()) => {
                    last_err.clear();
                    break;
                }
                Err(e) => {
                    let in_use = e.contains("already in use") || e.contains("could not bind");
                    last_err = e;
                    if !in_use {
                        break;
                    }
                }
            }
        }
        if !last_err.is_empty() {
            return Err(last_err);
        }
        pg.spawn_watchdog()?;
        pg.setup_roles()?;
        Ok(pg)
    }

    /// A command running `prog` as the server's OS user, cwd = the temp dir.
    fn server_cmd(&self, prog: &str) -> Command {
        let prog = self.server_bin.join(prog);
        let mut cmd = if self.as_postgres {
            let mut c = Command::new(runuser());
            c.args(["-u", OS_USER, "--"]).arg(prog);
            c
        } else {
            Command::new(prog)
        };
        cmd.current_dir(&self.dir).stdin(Stdio::null());
        for var in PG_ENV {
            cmd.env_remove(var);
        }
        cmd
    }

    fn initdb(&self) -> Result<(), String> {
        run(
            self.server_cmd("initdb")
                .arg("-D")
                .arg(&self.data)
                .args(["-U", SUPERUSER, "-A", "trust", "-E", "UTF8", "--locale=C"])
                .arg("--no-sync"),
            "initdb",
        )?;

        let mut conf = String::from("\n# --- droid-pool test harness ---\n");
        conf.push_str("listen_addresses = '127.0.0.1'\n");
        let _ = writeln!(conf, "unix_socket_directories = '{}'", self.dir.display());
        conf.push_str(
            "max_connections = 300\n\
             fsync = off\n\
             synchronous_commit = off\n\
             full_page_writes = off\n\
             password_encryption = 'scram-sha-256'\n\
             log_line_prefix = '%m [%p] %q%u@%d '\n",
        );
        if self.pg_stat_statements {
            conf.push_str("shared_preload_libraries = 'pg_stat_statements'\n");
        }
        append(&self.data.join("postgresql.conf"), &conf)?;

        let mut hba = String::from("# droid-pool test harness\n");
        for (user, _, method) in PASSWORD_USERS {
            let _ = writeln!(hba, "host all {user} 127.0.0.1/32 {method}");
        }
        let _ = writeln!(hba, "host all +{SCRAM_GROUP} 127.0.0.1/32 scram-sha-256");
        hba.push_str(
            "host replication all 127.0.0.1/32 trust\n\
             host all all 127.0.0.1/32 trust\n\
             host all all ::1/128 trust\n\
             local all all trust\n",
        );
        // Truncating keeps the file's owner (postgres when run as root).
        fs::write(self.data.join("pg_hba.conf"), hba).map_err(|e| format!("write pg_hba.conf: {e}"))
    }

    fn try_start(&self) -> Result<(), String> {
        let log = self.log_path();
        let started = run(
            self.server_cmd("pg_ctl")
                .arg("-D")
                .arg(&self.data)
                .arg("-l")
                .arg(&log)
                .args(["-w", "-t", "60", "-o"])
                .arg(format!("-p {}", self.port))
                .arg("start"),
            "pg_ctl start",
        );
        started.map(drop).map_err(|e| {
            let tail = tail_file(&log, 30);
            // pg_ctl may have left a half-started postmaster behind.
            self.stop();
            format!("{e}\n--- {} (tail) ---\n{tail}", log.display())
        })
    }

    /// Starts a server stopped with [`PgServer::stop`] again, on the same port.
    pub fn start(&self) {
        if let Err(e) = self.try_start() {
            panic!("restart PostgreSQL on port {}: {e}", self.port);
        }
    }

    /// `pg_ctl stop -m immediate` (errors ignored: it may already be down).
    pub fn stop(&self) {
        let _ = self
            .server_cmd("pg_ctl")
            .arg("-D")
            .arg(&self.data)
            .args(["-w", "-t", "60", "stop", "-m", "immediate"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }

    /// Immediate stop, then start on the same port.
    pub fn restart(&self) {
        self.stop();
        self.start();
    }

    fn spawn_watchdog(&self) -> Result<(), String> {
        let prefix = if self.as_postgres {
            format!("{} -u {OS_USER} -- ", sh_quote(&runuser()))
        } else {
            String::new()
        };
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; \
             {prefix}{pg_ctl} -D {data} -w stop -m immediate >/dev/null 2>&1; \
             rm -rf {dir}",
            pid = std::process::id(),
            pg_ctl = sh_quote(&self.server_bin.join("pg_ctl")),
            data = sh_quote(&self.data),
            dir = sh_quote(&self.dir),
        );
        // Own process group: a Ctrl-C aimed at `cargo test` does not kill it.
        Command::new("sh")
            .arg("-c")
            .arg(script)
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map(drop)
            .map_err(|e| format!("spawn watchdog: {e}"))
    }

    fn setup_roles(&self) -> Result<(), String> {
        // Separate -c arguments run as separate statements (CREATE DATABASE
        // refuses to run inside the implicit transaction of a multi-statement
        // string).
        self.psql_socket(
            "postgres",
            &[
                "SET password_encryption = 'scram-sha-256'",
                "CREATE ROLE droid LOGIN SUPERUSER",
                "CREATE ROLE droid_scram NOLOGIN",
                "CREATE ROLE scram_user LOGIN PASSWORD 'scram_pass'",
                "CREATE ROLE clear_user LOGIN PASSWORD 'clear_pass'",
                "SET password_encryption = 'md5'",
                "CREATE ROLE md5_user LOGIN PASSWORD 'md5_pass'",
                "RESET password_encryption",
                "CREATE DATABASE droid OWNER droid",
            ],
        )?;
        let mut in_db = vec!["GRANT ALL ON SCHEMA public TO PUBLIC"];
        if self.pg_stat_statements {
            in_db.push("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
        }
        self.psql_socket(DB, &in_db)?;
        let stored = self.psql_socket(
            "postgres",
            &[
                "SELECT string_agg(rolname || '=' || CASE WHEN rolpassword LIKE 'md5%' \
               THEN 'md5' ELSE split_part(rolpassword, '$', 1) END, ',' ORDER BY rolname) \
               FROM pg_authid WHERE rolpassword IS NOT NULL",
            ],
        )?;
        let want = "clear_user=SCRAM-SHA-256,md5_user=md5,scram_user=SCRAM-SHA-256";
        if stored.trim() != want {
            return Err(format!(
                "unexpected stored password kinds: {stored:?}, want {want}"
            ));
        }
        Ok(())
    }

    /// psql as the superuser over the unix socket (setup only); each
    /// statement is its own `-c`, so each runs in its own transaction.
    fn psql_socket(&self, db: &str, statements: &[&str]) -> Result<String, String> {
        let mut cmd = psql_cmd();
        cmd.arg("-h").arg(&self.dir).args([
            "-p",
            &self.port.to_string(),
            "-U",
            SUPERUSER,
            "-d",
            db,
        ]);
        for sql in statements {
            cmd.args(["-c", sql]);
        }
        let out = run(&mut cmd, "psql setup")?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Runs `sql` with psql as the superuser over TCP, in database `droid`;
    /// returns unaligned, tuples-only output (`|`-separated columns) without
    /// the trailing newline. Panics on error. Several `;`-separated
    /// statements are sent as one query string (one implicit transaction).
    pub fn psql(&self, sql: &str) -> String {
        self.psql_db(DB, sql)
    }

    /// [`PgServer::psql`] in another database.
    pub fn psql_db(&self, db: &str, sql: &str) -> String {
        let mut cmd = psql_cmd();
        cmd.args([
            "-h",
            "127.0.0.1",
            "-p",
            &self.port.to_string(),
            "-U",
            SUPERUSER,
            "-d",
            db,
            "-c",
            sql,
        ]);
        match run(&mut cmd, "psql") {
            Ok(out) => {
                let s = String::from_utf8_lossy(&out.stdout);
                s.strip_suffix('\n').unwrap_or(&s).to_string()
            }
            Err(e) => panic!("psql on port {} failed for `{sql}`: {e}", self.port),
        }
    }

    /// `host=127.0.0.1 port=.. user=.. dbname=..`
    pub fn conn_string(&self, user: &str, db: &str) -> String {
        conn_string(self.port, user, db)
    }

    /// Connects directly (no pooler) and spawns the connection task. Panics
    /// on failure.
    pub async fn connect(&self, user: &str, db: &str) -> tokio_postgres::Client {
        let conn = self.conn_string(user, db);
        match try_connect(&conn).await {
            Ok(client) => client,
            Err(e) => panic!(
                "connect to PostgreSQL `{conn}`: {e}\n--- server log tail ---\n{}",
                self.log_tail(20)
            ),
        }
    }

    /// Whether pg_stat_statements is preloaded and created in db `droid`.
    pub fn has_pg_stat_statements(&self) -> bool {
        self.pg_stat_statements
    }

    /// Unix socket directory (also the temp dir root).
    pub fn socket_dir(&self) -> &Path {
        &self.dir
    }

    pub fn data_dir(&self) -> &Path {
        &self.data
    }

    pub fn log_path(&self) -> PathBuf {
        self.data.join("postgres.log")
    }

    pub fn log_tail(&self, lines: usize) -> String {
        tail_file(&self.log_path(), lines)
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn psql_cmd() -> Command {
    let mut cmd = Command::new(bin("psql"));
    cmd.args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
        .stdin(Stdio::null());
    for var in PG_ENV {
        cmd.env_remove(var);
    }
    cmd
}

/// Finds a PostgreSQL program (psql, pgbench, pg_ctl, ...): PATH first, else
/// the highest `/usr/lib/postgresql/<version>/bin`. Panics if missing.
pub fn bin(name: &str) -> PathBuf {
    try_bin(name).unwrap_or_else(|| {
        panic!(
            "{name} not found on PATH nor in /usr/lib/postgresql/*/bin; \
             run scripts/ensure-deps.sh"
        )
    })
}

fn try_bin(name: &str) -> Option<PathBuf> {
    try_in_path(name).or_else(|| {
        versioned_bin_dirs()
            .into_iter()
            .map(|dir| dir.join(name))
            .find(|p| is_executable(p))
    })
}

/// `/usr/lib/postgresql/*/bin`, highest version first.
fn versioned_bin_dirs() -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir("/usr/lib/postgresql") else {
        return Vec::new();
    };
    let mut dirs: Vec<(Vec<u32>, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let version = name
                .split('.')
                .map(|p| p.parse::<u32>().ok())
                .collect::<Option<Vec<u32>>>()?;
            Some((version, e.path().join("bin")))
        })
        .filter(|(_, p)| p.is_dir())
        .collect();
    dirs.sort();
    dirs.into_iter().rev().map(|(_, p)| p).collect()
}

fn is_executable(path: &Path) -> bool {
    fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

fn pg_stat_statements_available(server_bin: &Path) -> bool {
    let pg_config = server_bin.join("pg_config");
    let from_pg_config = Command::new(&pg_config)
        .arg("--pkglibdir")
        .stdin(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    let libdir = from_pg_config.unwrap_or_else(|| server_bin.join("../lib"));
    libdir.join("pg_stat_statements.so").is_file()
}

fn is_root() -> bool {
    static ROOT: OnceLock<bool> = OnceLock::new();
    *ROOT.get_or_init(|| {
        Command::new("id")
            .arg("-u")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
            .unwrap_or(false)
    })
}

fn runuser() -> PathBuf {
    try_in_path("runuser")
        .or_else(|| {
            ["/usr/sbin/runuser", "/sbin/runuser"]
                .iter()
                .map(PathBuf::from)
                .find(|p| is_executable(p))
        })
        .unwrap_or_else(|| PathBuf::from("runuser"))
}

fn try_in_path(name: &str) -> Option<PathBuf> {
    let path = env::var_os("PATH")?;
    env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

/// Runs to completion, capturing output; Err describes a failure.
fn run(cmd: &mut Command, what: &str) -> Result<Output, String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: cannot run {cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(format!(
            "{what} failed ({}): {cmd:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout).trim_end(),
            String::from_utf8_lossy(&out.stderr).trim_end(),
        ))
    }
}

fn append(path: &Path, text: &str) -> Result<(), String> {
    OpenOptions::new()
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| format!("append to {}: {e}", path.display()))
}

/// Single-quotes a path for `sh -c`.
fn sh_quote(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}
