//! Issue 6, the sidecar lifecycle, end to end against the built binary: the probes through
//! startup and drain, liveness during a PostgreSQL outage, SIGTERM drains in both modes
//! (pgbench, and tokio-postgres clients that record which commits were acknowledged), the
//! drain deadline, `/metrics` (promtool, and counters that move when their events happen),
//! `/status` and `POST /drain`.
//!
//! Every test but one runs on a multi-threaded runtime: the harness's admin and exit helpers
//! block (briefly), so they are wrapped in `block_in_place` and the clients' connection tasks
//! keep running meanwhile. The exception pins its thread to one CPU and says why.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tokio::task::{block_in_place, JoinHandle};
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

use crate::core::create_db;
use crate::support::metrics::{metric, metric_value, scrape};
use crate::support::tools::{pg_tool, pgbench_processed, text};
use crate::support::{self, PgServer, Pooler, DB};

const USER: &str = "droid";

// ---------------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------------

fn get(p: &Pooler, path: &str) -> (u16, String) {
    block_in_place(|| p.admin_get(path))
}

fn post(p: &Pooler, path: &str) -> (u16, String) {
    block_in_place(|| p.admin_post(path))
}

fn wait_exit(p: &Pooler, timeout: Duration) -> Option<ExitStatus> {
    block_in_place(|| p.wait_exit(timeout))
}

fn start_with_config(pg: &PgServer, yaml: &str, args: &[&str]) -> Pooler {
    block_in_place(|| Pooler::start_with_config(pg, yaml, args))
}

async fn sleep_until(at: Instant) {
    tokio::time::sleep_until(at.into()).await;
}

/// The background task of a tokio-postgres connection: its result tells how the connection
/// ended (an ErrorResponse no request was waiting for ends it with that error).
type ConnTask = JoinHandle<Result<(), tokio_postgres::Error>>;

/// Connects through the pooler, keeping the connection task's result.
async fn connect_watched(p: &Pooler) -> (Client, ConnTask) {
    let conn = p.conn_string(USER, DB);
    match tokio_postgres::connect(&conn, NoTls).await {
        Ok((client, connection)) => (client, tokio::spawn(connection)),
        Err(e) => panic!("connect `{conn}` through droid-pool: {e}"),
    }
}

fn sqlstate(e: &tokio_postgres::Error) -> Option<String> {
    e.code().map(|c| c.code().to_owned())
}

/// How a connection task ended: `Ok(None)` cleanly, `Ok(Some(code))` with an error carrying
/// that SQLSTATE (`"-"` for an error without one), `Err` if it did not end within `wait`.
async fn conn_end(conn: ConnTask, wait: Duration) -> Result<Option<String>, String> {
    match tokio::time::timeout(wait, conn).await {
        Ok(Ok(Ok(()))) => Ok(None),
        Ok(Ok(Err(e))) => Ok(Some(sqlstate(&e).unwrap_or_else(|| format!("- ({e})")))),
        Ok(Err(join)) => Err(format!("connection task failed: {join}")),
        Err(_) => Err(format!("connection still open after {wait:?}")),
    }
}

/// The SQLSTATE a client was told when its connection ended: the failed call's own, or else
/// the one its connection task ended with.
async fn end_code(call: &tokio_postgres::Error, conn: ConnTask) -> Option<String> {
    if let Some(code) = sqlstate(call) {
        return Some(code);
    }
    conn_end(conn, Duration::from_secs(10)).await.ok().flatten()
}

/// The first column of the first row of a simple query.
async fn scalar(c: &Client, sql: &str) -> String {
    let msgs = c
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("`{sql}`: {e}"));
    msgs.iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
            _ => None,
        })
        .unwrap_or_else(|| panic!("`{sql}` returned no row"))
}

/// Connects to 127.0.0.1:`port`: Ok, refused, or another error.
fn tcp_probe(port: u16) -> std::io::Result<TcpStream> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    TcpStream::connect_timeout(&addr, Duration::from_secs(2))
}

/// The exit code, or a description of how the process ended.
fn exit_code(status: Option<ExitStatus>) -> Result<i32, String> {
    use std::os::unix::process::ExitStatusExt;
    match status {
        None => Err("still running".into()),
        Some(s) => s
            .code()
            .ok_or_else(|| format!("killed by signal {:?}", s.signal())),
    }
}

/// `[POOL] shutdown: accepted N, completed N, refused N, aborted N` as numbers.
fn parse_summary(line: &str) -> Option<[u64; 4]> {
    let rest = line.strip_prefix("[POOL] shutdown: ")?;
    let mut out = [0; 4];
    let names = ["accepted", "completed", "refused", "aborted"];
    let parts: Vec<&str> = rest.split(", ").collect();
    if parts.len() != 4 {
        return None;
    }
    for (i, (part, name)) in parts.iter().zip(names).enumerate() {
        out[i] = part.strip_prefix(name)?.trim().parse().ok()?;
    }
    Some(out)
}

/// After the pooler exited: its last `[POOL]` line must be the shutdown summary; returns
/// `[accepted, completed, refused, aborted]`.
fn final_summary(p: &Pooler) -> [u64; 4] {
    let found = block_in_place(|| p.wait_for_prefix("[POOL] shutdown:", Duration::from_secs(5)));
    assert!(found.is_some(), "no `[POOL] shutdown:` line");
    // The process has exited: give the reader thread a moment to take the rest of stdout.
    block_in_place(|| std::thread::sleep(Duration::from_millis(100)));
    let lines = p.lines();
    let last = lines.last().cloned().unwrap_or_default();
    parse_summary(&last).unwrap_or_else(|| {
        panic!(
            "the last [POOL] line is not the shutdown summary: `{last}`\nall lines:\n{}",
            lines.join("\n")
        )
    })
}

/// Polls /readyz until 200: the `listening` line the harness waits for comes just before
/// readiness is latched up.
fn wait_ready(p: &Pooler) {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let (code, body) = get(p, "/readyz");
        if code == 200 {
            return;
        }
        assert_eq!(code, 503, "/readyz: {body}");
        assert!(
            Instant::now() < until,
            "/readyz not 200 within 5 s of start"
        );
        block_in_place(|| std::thread::sleep(Duration::from_millis(10)));
    }
}

fn status_json(p: &Pooler) -> serde_json::Value {
    let (code, body) = get(p, "/status");
    assert_eq!(code, 200, "GET /status: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("/status is not JSON ({e}): {body}"))
}

fn drain_state(p: &Pooler) -> String {
    let s = status_json(p);
    s["drain"]["state"]
        .as_str()
        .unwrap_or_else(|| panic!("/status has no drain.state string: {s}"))
        .to_owned()
}

// ---------------------------------------------------------------------------------------------
// probes
// ---------------------------------------------------------------------------------------------

/// /startupz 503 (or no answer) until the listener is bound, then 200; /readyz 503 within
/// 100 ms of SIGTERM while /livez stays 200; new clients are served during the accept window;
/// then the listener is closed; /livez stays 200 while the drain waits for a client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_follow_startup_and_drain() {
    let pg = support::shared();
    let yaml = "drain:\n  mode: wait-for-clients\n  accept_window: 3s\n  timeout: 25s\n";
    let pooler = Pooler::spawn_with_config(pg, yaml, &[]);

    let start = Instant::now();
    let mut seen = BTreeSet::new();
    loop {
        let (code, body) = get(&pooler, "/startupz");
        if code == 200 {
            break;
        }
        assert!(
            code == 0 || code == 503,
            "/startupz before startup finished: {code} {body}"
        );
        seen.insert(code);
        assert!(!pooler.has_exited(), "droid-pool exited during startup");
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "/startupz not 200 within 10 s (codes seen: {seen:?})"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // 200 means the client listener is bound.
    drop(tcp_probe(pooler.port()).expect("client listener bound once /startupz says 200"));
    assert_eq!(get(&pooler, "/livez").0, 200, "/livez after start");
    assert_eq!(get(&pooler, "/readyz").0, 200, "/readyz after start");
    let early = pooler.connect(USER, DB).await;
    assert_eq!(scalar(&early, "select 1").await, "1");
    drop(early);

    block_in_place(|| pooler.signal("TERM"));
    let t0 = Instant::now();
    let ready_down = loop {
        let (code, body) = get(&pooler, "/readyz");
        if code == 503 {
            break t0.elapsed();
        }
        assert_eq!(code, 200, "/readyz during drain: {body}");
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "/readyz still 200 5 s after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(
        ready_down <= Duration::from_millis(100),
        "/readyz turned 503 {ready_down:?} after SIGTERM; the issue allows 100 ms"
    );
    assert_eq!(get(&pooler, "/livez").0, 200, "/livez right after SIGTERM");

    // The accept window (3 s): a client that connects 1 s in is served normally.
    sleep_until(t0 + Duration::from_secs(1)).await;
    let late = pooler.connect(USER, DB).await;
    assert_eq!(scalar(&late, "select 41 + 1").await, "42");
    assert_eq!(get(&pooler, "/livez").0, 200, "/livez during the window");
    assert_eq!(get(&pooler, "/readyz").0, 503, "/readyz during the window");
    sleep_until(t0 + Duration::from_millis(2500)).await;
    drop(tcp_probe(pooler.port()).expect("listener still open 2.5 s into a 3 s window"));

    // Then the listener closes.
    let closed_after = loop {
        match tcp_probe(pooler.port()) {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => break t0.elapsed(),
            Err(e) => panic!("connecting to the draining pooler: {e}"),
            Ok(s) => drop(s),
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "listener still accepting 10 s after SIGTERM (accept_window 3s)"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!("listener closed {closed_after:?} after SIGTERM");

    // wait-for-clients: the late client is still served, and the process stays live while the
    // drain waits for it (longer than the 5 s liveness window).
    let until = Instant::now() + Duration::from_secs(7);
    while Instant::now() < until {
        let (code, body) = get(&pooler, "/livez");
        assert_eq!(
            code,
            200,
            "/livez {:?} after SIGTERM, while the drain waits for a client: {body}",
            t0.elapsed()
        );
        assert_eq!(get(&pooler, "/readyz").0, 503);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(scalar(&late, "select 2 * 21").await, "42");
    drop(late);
    let status = wait_exit(&pooler, Duration::from_secs(10));
    assert_eq!(
        exit_code(status),
        Ok(0),
        "exit after the last client left a wait-for-clients drain"
    );
    let [_, _, refused, aborted] = final_summary(&pooler);
    assert_eq!((refused, aborted), (0, 0));
}

/// Liveness never looks at PostgreSQL; readiness does only when configured to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liveness_ignores_a_postgres_outage() {
    let pg = block_in_place(PgServer::start_new);
    let plain = block_in_place(|| Pooler::start(&pg, &[]));
    let checked = start_with_config(&pg, "admin:\n  readiness_checks_backend: true\n", &[]);
    for p in [&plain, &checked] {
        let c = p.connect(USER, DB).await;
        assert_eq!(scalar(&c, "select 1").await, "1");
        assert_eq!(get(p, "/readyz").0, 200);
        assert_eq!(get(p, "/livez").0, 200);
    }

    block_in_place(|| pg.stop());
    // Each pooler tries (and fails) a server login.
    for p in [&plain, &checked] {
        if let Ok(c) = p.try_connect(USER, DB).await {
            let r = c.simple_query("select 1").await;
            assert!(r.is_err(), "a query succeeded with PostgreSQL stopped");
        }
    }
    assert_eq!(
        get(&checked, "/readyz").0,
        503,
        "readiness_checks_backend: /readyz after a failed server login"
    );

    let until = Instant::now() + Duration::from_secs(6);
    while Instant::now() < until {
        for (p, which) in [(&plain, "default"), (&checked, "readiness_checks_backend")] {
            let (code, body) = get(p, "/livez");
            assert_eq!(code, 200, "{which}: /livez with PostgreSQL stopped: {body}");
        }
        let (code, body) = get(&plain, "/readyz");
        assert_eq!(
            code, 200,
            "default config: /readyz with PostgreSQL stopped: {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!plain.has_exited() && !checked.has_exited());

    // PostgreSQL back: a login succeeds and readiness returns.
    block_in_place(|| pg.start());
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(c) = checked.try_connect(USER, DB).await {
            if c.simple_query("select 1").await.is_ok() {
                break;
            }
        }
        assert!(
            Instant::now() < until,
            "no query through droid-pool within 15 s of PostgreSQL's restart"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        get(&checked, "/readyz").0,
        200,
        "readiness_checks_backend: /readyz after a successful login"
    );
}

// ---------------------------------------------------------------------------------------------
// drain
// ---------------------------------------------------------------------------------------------

/// wait-for-clients: pgbench running through the pooler when SIGTERM arrives loses no
/// transaction; the pooler exits 0 after pgbench is done, with the summary as its last line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_pgbench_loses_nothing() {
    let pg = support::shared();
    let db = "lifecycle_pgbench";
    block_in_place(|| create_db(pg, db));
    let pg_port = pg.port.to_string();
    let out = block_in_place(|| {
        pg_tool("pgbench")
            .args(["-i", "-s", "1", "-q", "-h", "127.0.0.1", "-p", &pg_port])
            .args(["-U", USER, db])
            .output()
            .expect("run pgbench -i")
    });
    assert!(out.status.success(), "pgbench -i: {:?}", text(&out));

    let yaml = "drain:\n  mode: wait-for-clients\n  accept_window: 1s\n  timeout: 20s\n";
    let pooler = start_with_config(pg, yaml, &[]);
    let port = pooler.port().to_string();
    let mut cmd = pg_tool("pgbench");
    cmd.args(["-h", "127.0.0.1", "-p", &port, "-U", USER])
        .args(["-c", "8", "-j", "2", "-T", "6", db]);
    let bench = std::thread::spawn(move || cmd.output().expect("run pgbench"));

    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !bench.is_finished(),
        "pgbench ended within 2 s of a 6 s run"
    );
    block_in_place(|| pooler.signal("TERM"));
    let t0 = Instant::now();
    while !bench.is_finished() {
        if pooler.has_exited() {
            // pgbench closes its connections a moment before its thread has collected the
            // output: the pooler may exit in between. Exiting while pgbench still runs shows
            // as pgbench not finishing at once (and as failures in its report below).
            let exited = t0.elapsed();
            tokio::time::sleep(Duration::from_secs(2)).await;
            assert!(
                bench.is_finished(),
                "droid-pool exited {exited:?} after SIGTERM while pgbench was still running"
            );
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "pgbench still running 30 s after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let bench_done = t0.elapsed();
    let out = bench.join().expect("pgbench thread");
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "pgbench failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let failed = stdout
        .lines()
        .find_map(|l| l.strip_prefix("number of failed transactions: "))
        .unwrap_or_else(|| panic!("no failed-transactions line in pgbench output:\n{stdout}"));
    assert!(
        failed.starts_with("0 "),
        "pgbench failed transactions: {failed}\n{stdout}\n{stderr}"
    );
    let processed = pgbench_processed(&stdout);
    assert!(processed > 0, "pgbench processed nothing:\n{stdout}");

    let status = wait_exit(&pooler, Duration::from_secs(15));
    assert_eq!(
        exit_code(status),
        Ok(0),
        "droid-pool's exit after pgbench finished ({bench_done:?} after SIGTERM)"
    );
    let [accepted, completed, refused, aborted] = final_summary(&pooler);
    assert!(
        accepted >= 8,
        "accepted {accepted}: pgbench opened 8 clients"
    );
    assert_eq!((completed, refused, aborted), (accepted, 0, 0));
}

/// What one looping client saw.
#[derive(Debug)]
struct TxClient {
    id: i32,
    /// Sequence numbers whose COMMIT was acknowledged.
    acked: Vec<i32>,
    /// The sequence number of the transaction it was at when the connection ended.
    last_seq: i32,
    /// The step that failed: `BEGIN`, `insert`, `pg_sleep` or `COMMIT` (`gave up`: none did).
    step: &'static str,
    code: Option<String>,
    error: String,
    ended: Instant,
}

/// Loops `BEGIN; insert; select pg_sleep(0.2); COMMIT` until a step fails.
async fn tx_loop(id: i32, table: &'static str, client: Client, conn: ConnTask) -> TxClient {
    let give_up = Instant::now() + Duration::from_secs(40);
    let mut acked = Vec::new();
    let mut seq = 0;
    let (step, err) = loop {
        if Instant::now() > give_up {
            break ("gave up", None);
        }
        seq += 1;
        if let Err(e) = client.batch_execute("BEGIN").await {
            break ("BEGIN", Some(e));
        }
        let insert = format!("insert into {table} (client, seq) values ({id}, {seq})");
        if let Err(e) = client.batch_execute(&insert).await {
            break ("insert", Some(e));
        }
        if let Err(e) = client.batch_execute("select pg_sleep(0.2)").await {
            break ("pg_sleep", Some(e));
        }
        if let Err(e) = client.batch_execute("COMMIT").await {
            break ("COMMIT", Some(e));
        }
        acked.push(seq);
    };
    let ended = Instant::now();
    let (code, error) = match &err {
        Some(e) => (end_code(e, conn).await, e.to_string()),
        None => (None, String::new()),
    };
    TxClient {
        id,
        acked,
        last_seq: seq,
        step,
        code,
        error,
        ended,
    }
}

/// transaction-boundary: every transaction that began completes; each client is then closed
/// with 57P01 between transactions; the committed rows are exactly the acknowledged commits;
/// the pooler exits 0 before the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_transaction_boundary_closes_between_transactions() {
    const TABLE: &str = "lifecycle_tx_boundary";
    let pg = support::shared();
    block_in_place(|| {
        pg.psql(&format!(
            "drop table if exists {TABLE}; \
             create table {TABLE} (client int not null, seq int not null, primary key (client, seq))"
        ))
    });
    let yaml = "drain:\n  mode: transaction-boundary\n  accept_window: 1s\n  timeout: 20s\n";
    let pooler = start_with_config(pg, yaml, &[]);
    let mut tasks = Vec::new();
    for id in 0..5 {
        let (client, conn) = connect_watched(&pooler).await;
        tasks.push(tokio::spawn(tx_loop(id, TABLE, client, conn)));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    block_in_place(|| pooler.signal("TERM"));
    let t0 = Instant::now();

    let mut clients = Vec::new();
    for t in tasks {
        clients.push(t.await.expect("client task"));
    }
    let status = wait_exit(&pooler, Duration::from_secs(25));
    let exited_after = t0.elapsed();

    for c in &clients {
        assert_eq!(
            (c.step, c.code.as_deref()),
            ("BEGIN", Some("57P01")),
            "client {} must be closed with 57P01 before its next BEGIN, never mid-transaction; \
             it failed at {} ({}) after {} acknowledged commits",
            c.id,
            c.step,
            c.error,
            c.acked.len()
        );
        assert!(
            c.ended >= t0 + Duration::from_millis(800),
            "client {} closed {:?} after SIGTERM, inside the 1 s accept window",
            c.id,
            c.ended.saturating_duration_since(t0)
        );
    }

    // The table holds exactly the acknowledged commits (the transaction a client was at when it
    // was closed may be either: its COMMIT may have been sent without an answer).
    let direct = pg.connect(USER, DB).await;
    let rows = direct
        .query(&format!("select client, seq from {TABLE}"), &[])
        .await
        .expect("read the table");
    let mut stored: BTreeMap<i32, BTreeSet<i32>> = BTreeMap::new();
    for r in rows {
        stored.entry(r.get(0)).or_default().insert(r.get(1));
    }
    for c in &clients {
        let have = stored.remove(&c.id).unwrap_or_default();
        let acked: BTreeSet<i32> = c.acked.iter().copied().collect();
        let missing: Vec<_> = acked.difference(&have).collect();
        assert!(
            missing.is_empty(),
            "client {}: acknowledged commits missing from the table: {missing:?}",
            c.id
        );
        let extra: Vec<_> = have
            .difference(&acked)
            .filter(|s| **s != c.last_seq)
            .collect();
        assert!(
            extra.is_empty(),
            "client {}: rows of unacknowledged transactions committed: {extra:?}",
            c.id
        );
        assert!(!c.acked.is_empty(), "client {} committed nothing", c.id);
    }
    assert!(stored.is_empty(), "rows of unknown clients: {stored:?}");

    assert_eq!(
        exit_code(status),
        Ok(0),
        "transaction-boundary drain exit ({exited_after:?} after SIGTERM)"
    );
    assert!(
        exited_after < Duration::from_secs(20),
        "exited {exited_after:?} after SIGTERM, past the 20 s deadline"
    );
    let [_, _, refused, aborted] = final_summary(&pooler);
    assert_eq!((refused, aborted), (0, 0));
}

/// A query running past the drain deadline is cancelled shortly before it (57014), or its
/// client closed at it (57P01); the exit code says the deadline forced something.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_deadline_cancels_a_long_query() {
    let pg = support::shared();
    let yaml = "drain:\n  mode: wait-for-clients\n  accept_window: 1s\n  timeout: 4s\n";
    let pooler = start_with_config(pg, yaml, &[]);
    let (client, conn) = connect_watched(&pooler).await;
    let query = tokio::spawn(async move {
        let r = client
            .simple_query("select pg_sleep(60), 'lifecycle_deadline_marker'")
            .await;
        (r.map(|_| ()), Instant::now(), client)
    });
    let direct = pg.connect(USER, DB).await;
    let running = "select count(*) from pg_stat_activity where state = 'active' \
                   and query like '%lifecycle_deadline_marker%' and pid <> pg_backend_pid()";
    let until = Instant::now() + Duration::from_secs(10);
    while scalar(&direct, running).await != "1" {
        assert!(
            Instant::now() < until,
            "pg_sleep(60) not running on PostgreSQL"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    block_in_place(|| pooler.signal("TERM"));
    let t0 = Instant::now();
    let (result, at, client) = tokio::time::timeout(Duration::from_secs(20), query)
        .await
        .expect("pg_sleep(60) still running 20 s after SIGTERM with a 4 s drain timeout")
        .expect("query task");
    let err = result.expect_err("pg_sleep(60) completed");
    let code = sqlstate(&err);
    let after = at.saturating_duration_since(t0);
    assert!(
        matches!(code.as_deref(), Some("57014") | Some("57P01")),
        "pg_sleep(60) ended with {code:?} ({err}); want 57014 (cancelled) or 57P01 (closed)"
    );
    assert!(
        after >= Duration::from_millis(900),
        "query ended {after:?} after SIGTERM, inside the 1 s accept window"
    );
    assert!(
        after <= Duration::from_secs(6),
        "query ended {after:?} after SIGTERM; the deadline was 4 s"
    );

    let status = wait_exit(&pooler, Duration::from_secs(10));
    let exited_after = t0.elapsed();
    assert_eq!(
        exit_code(status),
        Ok(1),
        "exit code after the deadline forced the drain"
    );
    assert!(
        exited_after <= Duration::from_secs(8),
        "exited {exited_after:?} after SIGTERM with a 4 s drain timeout"
    );
    let [_, _, _, aborted] = final_summary(&pooler);
    assert_eq!(aborted, 1, "the client still connected at the deadline");
    if code.as_deref() == Some("57014") {
        // Cancelled, then still connected: closed at the deadline with 57P01.
        let ended = conn_end(conn, Duration::from_secs(5)).await;
        assert_eq!(
            ended,
            Ok(Some("57P01".to_owned())),
            "how the client was closed"
        );
    }
    drop(client);
    // The server-side query was cancelled too, not left running.
    let until = Instant::now() + Duration::from_secs(5);
    while scalar(&direct, running).await != "0" {
        assert!(
            Instant::now() < until,
            "pg_sleep(60) still running on PostgreSQL after droid-pool exited"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Drain progress shows in /metrics and /status: the drain state gauge moves 0 → 1 → 2, a
/// client closed at its boundary is counted, a client inside a transaction is not closed
/// until the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_progress_in_metrics_and_status() {
    let pg = support::shared();
    let yaml = "drain:\n  mode: transaction-boundary\n  accept_window: 1s\n  timeout: 5s\n";
    let pooler = start_with_config(pg, yaml, &[]);
    let (idle, idle_conn) = connect_watched(&pooler).await;
    assert_eq!(scalar(&idle, "select 1").await, "1");
    let (tx, tx_conn) = connect_watched(&pooler).await;
    tx.batch_execute("BEGIN").await.expect("BEGIN");
    assert_eq!(
        metric_value(&scrape(&pooler), "droidpool_drain_state", &[]),
        0.0
    );
    assert_eq!(drain_state(&pooler), "serving");

    block_in_place(|| pooler.signal("TERM"));
    let t0 = Instant::now();
    let mut states = Vec::new();
    while t0.elapsed() < Duration::from_secs(3) {
        let s = metric_value(&scrape(&pooler), "droidpool_drain_state", &[]);
        if states.last() != Some(&s) {
            states.push(s);
        }
        if s == 2.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The idle client is closed at the window's end with 57P01.
    let idle_end = conn_end(idle_conn, Duration::from_secs(4)).await;
    drop(idle);
    let scraped = scrape(&pooler);
    let status = drain_state(&pooler);
    // The client inside a transaction is still served.
    assert_eq!(scalar(&tx, "select 2").await, "2", "inside a transaction");
    let tx_end = conn_end(tx_conn, Duration::from_secs(10)).await;
    let exit = wait_exit(&pooler, Duration::from_secs(10));
    let [_, _, _, aborted] = final_summary(&pooler);

    // A scrape right after the signal may still read 0; then 1 during the window, then 2.
    let moved: Vec<f64> = states.iter().copied().filter(|s| *s != 0.0).collect();
    assert_eq!(
        moved,
        [1.0, 2.0],
        "droidpool_drain_state values after SIGTERM: {states:?}; want 1 (window) then 2"
    );
    assert_eq!(
        idle_end,
        Ok(Some("57P01".to_owned())),
        "the idle client's end"
    );
    assert_eq!(
        status, "draining-closing",
        "/status drain.state after the window"
    );
    assert_eq!(
        tx_end,
        Ok(Some("57P01".to_owned())),
        "in-transaction client at the deadline"
    );
    assert_eq!(exit_code(exit), Ok(1), "the deadline closed a client");
    assert_eq!(aborted, 1);
    assert_eq!(
        metric(
            &scraped,
            "droidpool_drain_clients_total",
            &[("outcome", "closed_at_boundary")]
        ),
        Some(1.0),
        "droidpool_drain_clients_total{{outcome=\"closed_at_boundary\"}} after one client was \
         closed at its boundary; drain samples scraped:\n{}",
        scraped
            .lines()
            .filter(|l| l.contains("drain"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// /metrics, /status, POST /drain
// ---------------------------------------------------------------------------------------------

/// Runs `promtool check metrics` on `text`; panics with its output when it complains.
fn promtool_check(scraped: &str) {
    use std::io::Write;
    let mut child = match Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => panic!(
            "promtool is not available ({e}): run scripts/ensure-deps.sh, which installs \
             Debian's prometheus package (it ships promtool)"
        ),
    };
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(scraped.as_bytes())
        .expect("write to promtool");
    let out = child.wait_with_output().expect("wait for promtool");
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "promtool check metrics ({}):\n{stdout}{stderr}\n--- scraped ---\n{scraped}",
        out.status
    );
}

/// /metrics passes promtool; query and transaction counters move; pool gauges (ours and
/// pgbouncer_exporter's names) follow a client into and out of a transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_pass_promtool_and_counters_move() {
    let pg = support::shared();
    let pooler = block_in_place(|| Pooler::start(pg, &[]));
    let c = pooler.connect(USER, DB).await;
    assert_eq!(scalar(&c, "select 1").await, "1");
    let before = scrape(&pooler);
    for _ in 0..5 {
        assert_eq!(scalar(&c, "select 1").await, "1");
    }
    c.batch_execute("BEGIN").await.expect("BEGIN");
    assert_eq!(scalar(&c, "select 2").await, "2");
    let in_tx = scrape(&pooler);
    c.batch_execute("COMMIT").await.expect("COMMIT");
    let after = scrape(&pooler);

    let delta = |name: &str| metric_value(&after, name, &[]) - metric_value(&before, name, &[]);
    assert_eq!(
        delta("droidpool_queries_total"),
        8.0,
        "5 selects, BEGIN, select, COMMIT"
    );
    assert_eq!(
        delta("droidpool_transactions_total"),
        6.0,
        "5 single-statement transactions and one BEGIN..COMMIT"
    );
    assert!(
        metric_value(&after, "droidpool_client_bytes_received_total", &[])
            > metric_value(&before, "droidpool_client_bytes_received_total", &[])
    );

    let pool = [("database", DB), ("user", USER)];
    for name in [
        "pgbouncer_pools_client_active_connections",
        "pgbouncer_pools_client_waiting_connections",
        "pgbouncer_pools_server_active_connections",
        "pgbouncer_pools_server_idle_connections",
        "pgbouncer_pools_server_login_connections",
    ] {
        metric_value(&after, name, &pool);
    }
    let gauge = |text: &str, name: &str| metric_value(text, name, &pool);
    assert_eq!(
        gauge(&in_tx, "pgbouncer_pools_client_active_connections"),
        1.0
    );
    assert_eq!(
        gauge(&in_tx, "pgbouncer_pools_server_active_connections"),
        1.0
    );
    assert_eq!(
        gauge(&after, "pgbouncer_pools_client_active_connections"),
        0.0
    );
    assert_eq!(
        gauge(&after, "pgbouncer_pools_server_active_connections"),
        0.0
    );
    assert_eq!(
        gauge(&after, "pgbouncer_pools_server_idle_connections"),
        1.0
    );
    assert_eq!(
        metric_value(&after, "droidpool_clients", &[("state", "idle")]),
        1.0
    );
    assert_eq!(
        metric_value(&after, "droidpool_config_generation", &[]),
        1.0
    );

    block_in_place(|| {
        promtool_check(&in_tx);
        promtool_check(&after);
    });
}

/// A client that has its reply finds its transaction in `/metrics` and the server back in the
/// pool, though the admin server scrapes from another thread. The pooler, its admin thread and
/// this test share one CPU, and the pooler's data-plane thread runs as SCHED_IDLE: the reply's
/// wakeup of this thread preempts it right after its write, and the admin thread answers the
/// scrape before it runs again. Whatever the pooler did after writing the reply is then not
/// seen. (A current-thread runtime on the pinned test thread runs the client; the scrape
/// blocks it between queries, when no query is in flight.)
#[tokio::test(flavor = "current_thread")]
async fn a_reply_comes_after_its_transaction_is_counted() {
    let pg = support::shared();
    let pooler = Pooler::start(pg, &[]);
    let run = |program: &str, args: &[&str]| {
        let ok = Command::new(program)
            .args(args)
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "{program} {args:?}");
    };
    let me = std::fs::read_link("/proc/thread-self").expect("/proc/thread-self");
    let tid = me.file_name().expect("tid").to_string_lossy().into_owned();
    // The first CPU this thread may use (a container's cpuset need not include CPU 0).
    let out = Command::new("taskset")
        .args(["-c", "-p", &tid])
        .output()
        .expect("taskset");
    let list = String::from_utf8_lossy(&out.stdout);
    let cpu: String = list
        .rsplit(':')
        .next()
        .unwrap_or_default()
        .trim()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    assert!(!cpu.is_empty(), "taskset -c -p {tid}: {list}");
    let pid = pooler.pid().to_string();
    run("taskset", &["-a", "-p", "-c", &cpu, &pid]);
    run("chrt", &["-i", "-p", "0", &pid]);
    run("taskset", &["-p", "-c", &cpu, &tid]);

    let c = pooler.connect(USER, DB).await;
    assert_eq!(scalar(&c, "select 1").await, "1");
    let pool = [("database", DB), ("user", USER)];
    let (code, text) = pooler.admin_get("/metrics");
    assert_eq!(code, 200);
    let base = metric_value(&text, "droidpool_transactions_total", &[]);
    for i in 1..=100 {
        assert_eq!(scalar(&c, "select 1").await, "1");
        let (code, text) = pooler.admin_get("/metrics");
        assert_eq!(code, 200);
        assert_eq!(
            metric_value(&text, "droidpool_transactions_total", &[]) - base,
            f64::from(i),
            "transaction {i} not counted when its reply had arrived"
        );
        assert_eq!(
            metric_value(&text, "pgbouncer_pools_server_active_connections", &pool),
            0.0,
            "server still held after transaction {i}'s reply"
        );
    }
}

/// With --track-prepared, a statement parsed on one server and executed on another is
/// replayed there, and `droidpool_prepared_replays_total` counts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_prepared_replays() {
    let pg = support::shared();
    let yaml = "pool:\n  mode: transaction\n  size: 2\n  server_round_robin: true\n";
    let pooler = start_with_config(pg, yaml, &["--track-prepared"]);
    let c1 = pooler.connect(USER, DB).await;
    let c2 = pooler.connect(USER, DB).await;
    let stmt = c1
        .prepare("select $1::int4 * 2")
        .await
        .expect("prepare on server 1");
    let before = metric_value(&scrape(&pooler), "droidpool_prepared_replays_total", &[]);
    // Client 2 holds server 1 inside a transaction: client 1's execute runs on server 2.
    c2.batch_execute("BEGIN").await.expect("BEGIN");
    let row = c1
        .query_one(&stmt, &[&21i32])
        .await
        .expect("execute the statement on another server");
    assert_eq!(row.get::<_, i32>(0), 42);
    c2.batch_execute("COMMIT").await.expect("COMMIT");
    let after = scrape(&pooler);
    assert_eq!(
        metric_value(&after, "droidpool_prepared_replays_total", &[]) - before,
        1.0,
        "one replay on the second server; [POOL] lines:\n{}",
        pooler.lines().join("\n")
    );
    block_in_place(|| promtool_check(&after));
}

/// A client refused for too many clients is counted under reason="too_many_clients".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_clients_shed() {
    let pg = support::shared();
    let pooler = start_with_config(pg, "client:\n  max_connections: 1\n", &[]);
    let first = pooler.connect(USER, DB).await;
    assert_eq!(scalar(&first, "select 1").await, "1");
    let shed = |text: &str| {
        metric(
            text,
            "droidpool_clients_shed_total",
            &[("reason", "too_many_clients")],
        )
        .unwrap_or(0.0)
    };
    let before = shed(&scrape(&pooler));
    let refused = match pooler.try_connect(USER, DB).await {
        Ok(_) => panic!("a second client beyond client.max_connections: 1 was accepted"),
        Err(e) => e,
    };
    assert_eq!(sqlstate(&refused).as_deref(), Some("53300"), "{refused}");
    let after = scrape(&pooler);
    assert_eq!(shed(&after) - before, 1.0);
    assert_eq!(scalar(&first, "select 2").await, "2");
    block_in_place(|| promtool_check(&after));
}

/// /status: JSON with pools, drain.state and config_generation, following a drain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reports_pools_and_drain_state() {
    let pg = support::shared();
    let yaml = "drain:\n  mode: wait-for-clients\n  accept_window: 2s\n  timeout: 20s\n";
    let pooler = start_with_config(pg, yaml, &[]);
    let c = pooler.connect(USER, DB).await;
    assert_eq!(scalar(&c, "select 1").await, "1");

    let s = status_json(&pooler);
    assert_eq!(s["drain"]["state"], "serving", "{s}");
    assert_eq!(s["config_generation"], 1, "{s}");
    let pools = s["pools"]
        .as_array()
        .unwrap_or_else(|| panic!("/status pools is not an array: {s}"));
    assert_eq!(pools.len(), 1, "one pool after one client: {s}");
    assert_eq!(pools[0]["database"], DB, "{s}");
    assert_eq!(pools[0]["user"], USER, "{s}");

    block_in_place(|| pooler.signal("TERM"));
    let t0 = Instant::now();
    // The signal is handled asynchronously: the state leaves "serving" within moments.
    let mut first = drain_state(&pooler);
    while first == "serving" && t0.elapsed() < Duration::from_secs(1) {
        tokio::time::sleep(Duration::from_millis(10)).await;
        first = drain_state(&pooler);
    }
    assert_eq!(first, "draining-accepting", "drain.state after SIGTERM");
    let mut state = first;
    while state != "draining-closing" {
        assert!(
            t0.elapsed() < Duration::from_secs(8),
            "drain.state still `{state}` 8 s after SIGTERM (accept_window 2s)"
        );
        assert!(state.starts_with("draining-"), "drain.state `{state}`");
        tokio::time::sleep(Duration::from_millis(50)).await;
        state = drain_state(&pooler);
    }
    // Still waiting for the client, which is still served.
    assert_eq!(scalar(&c, "select 3").await, "3");
    let s = status_json(&pooler);
    assert_eq!(s["drain"]["state"], "draining-closing", "{s}");
    assert_eq!(s["config_generation"], 1, "{s}");
    drop(c);
    let status = wait_exit(&pooler, Duration::from_secs(10));
    assert_eq!(exit_code(status), Ok(0));
}

/// POST /drain from loopback is accepted (202) and starts a drain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_drain_starts_a_drain() {
    let pg = support::shared();
    let yaml = "drain:\n  mode: wait-for-clients\n  accept_window: 1s\n  timeout: 10s\n";
    let pooler = start_with_config(pg, yaml, &[]);
    wait_ready(&pooler);
    assert_eq!(
        metric_value(&scrape(&pooler), "droidpool_drain_state", &[]),
        0.0
    );
    let (code, body) = get(&pooler, "/drain");
    assert_eq!(code, 405, "GET /drain: {body}");
    assert_eq!(get(&pooler, "/readyz").0, 200, "after GET /drain");

    let (code, body) = post(&pooler, "/drain");
    assert_eq!(code, 202, "POST /drain: {body}");
    let t0 = Instant::now();
    assert_eq!(get(&pooler, "/readyz").0, 503, "/readyz after POST /drain");
    assert_eq!(get(&pooler, "/livez").0, 200, "/livez after POST /drain");
    assert!(drain_state(&pooler).starts_with("draining-"));
    // No client: the pooler exits 0 once the window is over.
    let status = wait_exit(&pooler, Duration::from_secs(10));
    assert_eq!(exit_code(status), Ok(0), "exit after POST /drain");
    assert!(
        t0.elapsed() >= Duration::from_millis(900),
        "exited {:?} after POST /drain, before the 1 s accept window ended",
        t0.elapsed()
    );
    final_summary(&pooler);
}

/// Transaction-boundary drain with pgbench running a multi-statement transaction: each pgbench
/// client is closed with 57P01 only where its next transaction would begin (command 0, the
/// BEGIN), never inside one; every transaction pgbench saw committed is in the table, and the
/// pooler exits 0 well before the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_transaction_boundary_with_pgbench() {
    const TABLE: &str = "lifecycle_tb_pgbench";
    let pg = support::shared();
    block_in_place(|| {
        pg.psql(&format!(
            "drop table if exists {TABLE}; create table {TABLE} (client int not null, step int not null)"
        ))
    });
    let dir = tempfile::tempdir().expect("temp dir");
    let script = dir.path().join("tx.sql");
    // Command 0 is BEGIN; a close inside the transaction would abort in commands 1-4.
    std::fs::write(
        &script,
        format!(
            "BEGIN;\nINSERT INTO {TABLE} VALUES (:client_id, 1);\nSELECT pg_sleep(0.01);\n\
             INSERT INTO {TABLE} VALUES (:client_id, 2);\nEND;\n"
        ),
    )
    .expect("write pgbench script");
    let yaml = "drain:\n  mode: transaction-boundary\n  accept_window: 1s\n  timeout: 20s\n";
    let pooler = start_with_config(pg, yaml, &[]);
    let port = pooler.port().to_string();
    let mut cmd = pg_tool("pgbench");
    cmd.args(["-h", "127.0.0.1", "-p", &port, "-U", USER, "-n"])
        .args(["-c", "6", "-j", "2", "-T", "30", "-f"])
        .arg(&script)
        .arg(DB);
    let bench = std::thread::spawn(move || cmd.output().expect("run pgbench"));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !bench.is_finished(),
        "pgbench ended within 2 s of a 30 s run"
    );
    block_in_place(|| pooler.signal("TERM"));
    let t0 = Instant::now();
    let status = wait_exit(&pooler, Duration::from_secs(25));
    let exited_after = t0.elapsed();
    let out = bench.join().expect("pgbench thread");
    let (stdout, stderr) = text(&out);
    assert_eq!(
        exit_code(status),
        Ok(0),
        "pooler exit; pgbench:\n{stdout}\n{stderr}"
    );
    assert!(
        exited_after < Duration::from_secs(10),
        "exited {exited_after:?} after SIGTERM; the deadline is 20 s and pgbench is idle between transactions"
    );

    let aborts: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("aborted in command"))
        .collect();
    assert_eq!(
        aborts.len(),
        6,
        "every pgbench client is closed by the drain:\n{stderr}"
    );
    for line in &aborts {
        assert!(
            line.contains("aborted in command 0 "),
            "a client was closed inside a transaction, not at its boundary: {line}\n{stderr}"
        );
    }
    assert!(
        stderr.contains("droid-pool is shutting down"),
        "the clients were told why (57P01):\n{stderr}"
    );
    let processed = pgbench_processed(&stdout);
    assert!(processed > 0, "pgbench processed nothing:\n{stdout}");
    let rows = block_in_place(|| {
        pg.psql(&format!(
            "select count(*) filter (where step = 1) || ' ' || count(*) filter (where step = 2) from {TABLE}"
        ))
    });
    assert_eq!(
        rows.trim(),
        format!("{processed} {processed}"),
        "each of the {processed} transactions pgbench counted committed both rows, and no other did"
    );
    // pgbench opens one more connection before its clients start.
    let [accepted, completed, refused, aborted] = final_summary(&pooler);
    assert!(accepted >= 6, "accepted {accepted}");
    assert_eq!((completed, refused, aborted), (accepted, 0, 0));
}

/// Servers open in the pool, from /status (idle + in use + logging in).
fn servers_open(p: &Pooler) -> i64 {
    let s = status_json(p);
    let pool = &s["pools"][0];
    [
        "servers_idle",
        "servers_active",
        "servers_login",
        "servers_used",
    ]
    .iter()
    .map(|k| pool[*k].as_i64().unwrap_or(0))
    .sum()
}

/// A draining pooler gives its idle servers back at once and keeps no more than its
/// remaining clients can use: a terminating pod's connections count against the budget its
/// successors share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_gives_idle_servers_back_at_once() {
    let pg = support::shared();
    let yaml = "pool:\n  size: 3\n  mode: transaction\n\
                drain:\n  mode: wait-for-clients\n  accept_window: 5s\n  timeout: 20s\n";
    let pooler = start_with_config(pg, yaml, &[]);
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(pooler.connect(USER, DB).await);
    }
    // Three transactions at once: three servers, idle afterwards.
    let runs: Vec<_> = clients
        .iter()
        .map(|c| c.simple_query("select pg_sleep(0.3)"))
        .collect();
    for r in futures_util::future::join_all(runs).await {
        r.expect("query");
    }
    assert_eq!(servers_open(&pooler), 3);

    block_in_place(|| pooler.signal("TERM"));
    let t0 = Instant::now();
    while servers_open(&pooler) > 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "idle servers still open {:?} after SIGTERM: {}",
            t0.elapsed(),
            status_json(&pooler)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The clients are still served: two transactions at once take two new servers, which
    // stay idle while three clients are left to use them ...
    let runs: Vec<_> = clients[..2]
        .iter()
        .map(|c| c.simple_query("select pg_sleep(0.3)"))
        .collect();
    for r in futures_util::future::join_all(runs).await {
        r.expect("served while draining");
    }
    assert_eq!(servers_open(&pooler), 2, "{}", status_json(&pooler));
    // ... and as clients leave, the servers go with them: one client left, one server.
    clients.truncate(1);
    let t0 = Instant::now();
    while servers_open(&pooler) > 1 {
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "servers not given back as clients left: {}",
            status_json(&pooler)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(servers_open(&pooler), 1, "{}", status_json(&pooler));
    assert_eq!(scalar(&clients[0], "select 7").await, "7");
    drop(clients);
    let status = wait_exit(&pooler, Duration::from_secs(10));
    assert_eq!(exit_code(status), Ok(0));
}

/// A second SIGTERM stops the pooler at once, in the middle of a drain that a client inside
/// a transaction keeps waiting: exit code 2 (`main.rs`), well before the drain's deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_stops_at_once() {
    let pg = support::shared();
    let yaml = "drain:\n  mode: wait-for-clients\n  accept_window: 0s\n  timeout: 60s\n";
    let pooler = start_with_config(pg, yaml, &[]);
    let (client, _conn) = connect_watched(&pooler).await;
    client.simple_query("BEGIN").await.expect("begin");
    block_in_place(|| pooler.signal("TERM"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !pooler.has_exited(),
        "the drain waits for the client in its transaction"
    );
    let t0 = Instant::now();
    block_in_place(|| pooler.signal("TERM"));
    let status = wait_exit(&pooler, Duration::from_secs(10));
    assert_eq!(exit_code(status), Ok(2), "exit code after a second SIGTERM");
    assert!(
        t0.elapsed() <= Duration::from_secs(3),
        "exited {:?} after the second SIGTERM",
        t0.elapsed()
    );
}
