//! A streaming pair for the failover tests: a primary (initdb, the harness's roles) and a
//! standby made with `pg_basebackup -R` from it, each on its own free port. A switchover stops
//! the primary (fast), promotes the standby (`pg_ctl promote`) and then rebuilds the old
//! primary as the new one's standby, so the pair is a streaming pair again with the roles
//! swapped: tests ask the pair which node is which.

use std::fs;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::{append, free_port, is_root, run, PgServer, OS_USER};

/// Two servers, one of them the primary.
pub struct Pair {
    nodes: [PgServer; 2],
    primary: usize,
}

static PAIR: OnceLock<tokio::sync::Mutex<Pair>> = OnceLock::new();

/// The per-process pair, made on first use. Tests hold the lock for their whole run: they
/// stop, promote and rebuild its nodes.
pub fn shared_pair() -> &'static tokio::sync::Mutex<Pair> {
    PAIR.get_or_init(|| tokio::sync::Mutex::new(Pair::start()))
}

impl Pair {
    /// A primary and its streaming standby. Panics if either does not start.
    pub fn start() -> Pair {
        let primary = PgServer::start_new();
        let standby = PgServer::standby_of(&primary)
            .unwrap_or_else(|e| panic!("the standby did not start:\n{e}"));
        let pair = Pair {
            nodes: [primary, standby],
            primary: 0,
        };
        pair.wait_streaming();
        pair
    }

    pub fn primary(&self) -> &PgServer {
        &self.nodes[self.primary]
    }

    pub fn standby(&self) -> &PgServer {
        &self.nodes[1 - self.primary]
    }

    /// Stops the primary (`pg_ctl stop -m fast`).
    pub fn stop_primary(&self) {
        self.primary().stop_mode("fast");
    }

    /// Promotes the standby (`pg_ctl promote -w`: returns once it takes writes); it is the
    /// primary from here on. Returns when the promotion completed.
    pub fn promote_standby(&mut self) -> Instant {
        let standby = self.standby();
        run(
            standby
                .server_cmd("pg_ctl")
                .arg("-D")
                .arg(&standby.data)
                .args(["-w", "-t", "60", "promote"]),
            "pg_ctl promote",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        self.primary = 1 - self.primary;
        Instant::now()
    }

    /// Makes the node that is not the primary (stopped, or a diverged old primary) a fresh
    /// streaming standby of the primary, on its old port.
    pub fn rebuild_standby(&self) {
        let standby = self.standby();
        standby.stop();
        fs::remove_dir_all(&standby.data).unwrap_or_else(|e| panic!("remove old data: {e}"));
        standby
            .basebackup_from(self.primary().port)
            .unwrap_or_else(|e| panic!("{e}"));
        standby.start();
        self.wait_streaming();
    }

    /// Waits until the primary sees its standby streaming, so a test starts with a pair.
    pub fn wait_streaming(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self
            .primary()
            .psql("select count(*) from pg_stat_replication where state = 'streaming'")
            != "1"
        {
            assert!(Instant::now() < deadline, "the standby is not streaming");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl PgServer {
    /// A standby of `primary`, from `pg_basebackup -R`, started on a free port.
    fn standby_of(primary: &PgServer) -> Result<PgServer, String> {
        let tmp = tempfile::Builder::new()
            .prefix("droid-pg-standby-")
            .tempdir_in("/tmp")
            .map_err(|e| format!("create temp dir: {e}"))?;
        let dir = tmp.path().to_path_buf();
        let as_postgres = is_root();
        if as_postgres {
            run(
                std::process::Command::new("chown")
                    .arg(format!("{OS_USER}:"))
                    .arg(&dir),
                "chown the temp dir to postgres",
            )?;
        }
        let mut pg = PgServer {
            port: 0,
            data: dir.join("data"),
            dir,
            server_bin: primary.server_bin.clone(),
            as_postgres,
            pg_stat_statements: primary.pg_stat_statements,
            _tmp: tmp,
        };
        pg.basebackup_from(primary.port)?;
        let mut last = String::new();
        for _ in 0..5 {
            pg.port = free_port();
            match pg.try_start() {
                Ok(()) => {
                    pg.spawn_watchdog()?;
                    return Ok(pg);
                }
                Err(e) if e.contains("already in use") || e.contains("could not bind") => last = e,
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    /// `pg_basebackup -R` of the server on `port` into this server's (absent) data dir,
    /// with this server's socket directory.
    fn basebackup_from(&self, port: u16) -> Result<(), String> {
        run(
            self.server_cmd("pg_basebackup")
                .arg("-D")
                .arg(&self.data)
                .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres"])
                .args(["-R", "-X", "stream", "-c", "fast", "--no-sync"]),
            "pg_basebackup",
        )?;
        // The copied postgresql.conf names the source's socket directory; a later line wins.
        append(
            &self.data.join("postgresql.conf"),
            &format!("unix_socket_directories = '{}'\n", self.dir.display()),
        )
    }

    /// `pg_ctl stop` in `mode` (smart, fast, immediate); errors ignored.
    pub fn stop_mode(&self, mode: &str) {
        let _ = self
            .server_cmd("pg_ctl")
            .arg("-D")
            .arg(&self.data)
            .args(["-w", "-t", "60", "stop", "-m", mode])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }

    /// `pg_is_in_recovery()`, asked directly.
    pub fn in_recovery(&self) -> bool {
        self.psql("select pg_is_in_recovery()") == "t"
    }
}
