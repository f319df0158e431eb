//! `server.check_query` / `server.check_delay` against a real PostgreSQL: a server idle past the
//! delay is probed before a client gets it, a failed probe closes it and the client is served
//! by another server, and the delay decides whether the probe runs at all.

use std::process::Command;
use std::time::{Duration, Instant};

use tokio::task::block_in_place;
use tokio_postgres::{Client, SimpleQueryMessage};

use crate::core::create_db;
use crate::support::metrics::{metric, scrape, servers_closed};
use crate::support::{self, PgServer, Pooler, DB};

const USER: &str = "droid";

/// The first column of the first row `sql` returns.
async fn one(c: &Client, sql: &str) -> String {
    c.simple_query(sql)
        .await
        .expect(sql)
        .iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
            _ => None,
        })
        .expect("a row")
}

/// Client backends of `db`: (pid, state).
pub(crate) async fn backends(pg: &PgServer, db: &str) -> Vec<(i32, String)> {
    let c = pg.connect(USER, "postgres").await;
    c.query(
        "select pid, coalesce(state, '') from pg_stat_activity where datname = $1 \
         and backend_type = 'client backend'",
        &[&db],
    )
    .await
    .expect("pg_stat_activity")
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

/// A PostgreSQL backend frozen with SIGSTOP, let go on drop (whatever the test's outcome: a
/// stopped backend would hold up the server's shutdown).
struct Frozen(i32);

impl Frozen {
    fn stop(pid: i32) -> Frozen {
        let ok = Command::new("kill")
            .args(["-STOP", &pid.to_string()])
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "SIGSTOP {pid}");
        Frozen(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.0.to_string()])
            .status();
    }
}

/// A server whose backend froze while idle (SIGSTOP: its socket stays open and quiet, so the
/// passive check sees nothing) is probed once it has been idle past `check_delay`; the probe
/// gets no answer within `server.connect_timeout`, the server is closed (`check_failed`) and
/// the client's query runs on a new login instead of hanging on the frozen one. A private
/// PostgreSQL: a stopped backend would hold up other tests' CREATE DATABASE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_check_saves_the_client_from_a_frozen_server() {
    let pg = block_in_place(PgServer::start_new);
    let yaml = "server:\n  check_delay: 500ms\n  connect_timeout: 1s\n\
                pool:\n  size: 2\n  query_wait_timeout: 10s\n";
    let p = block_in_place(|| Pooler::start_with_config(&pg, yaml, &[]));
    let c = p.connect(USER, DB).await;
    let frozen: i32 = one(&c, "select pg_backend_pid()").await.parse().unwrap();
    let guard = Frozen::stop(frozen);
    tokio::time::sleep(Duration::from_millis(700)).await;

    let t0 = Instant::now();
    let got = tokio::time::timeout(Duration::from_secs(5), one(&c, "select 42"))
        .await
        .expect("the query ran on another server instead of hanging on the frozen one");
    assert_eq!(got, "42");
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(900),
        "the probe waited its bound: {took:?}"
    );
    let now: i32 = one(&c, "select pg_backend_pid()").await.parse().unwrap();
    assert_ne!(now, frozen);
    assert_eq!(servers_closed(&p, "check_failed"), 1.0);

    // Let the frozen backend go: it finds its connection closed and ends. Nothing is left
    // but the pooler's one server.
    drop(guard);
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let left = backends(&pg, DB).await;
        if left.len() == 1 && left[0].0 == now && left[0].1 == "idle" {
            break;
        }
        assert!(Instant::now() < until, "{left:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Writes `yaml` over the pooler's config file and reloads, waiting for `generation`.
async fn reload(p: &Pooler, yaml: &str, generation: f64) {
    std::fs::write(p.config_path().expect("a config file"), yaml).unwrap();
    p.signal("HUP");
    let until = Instant::now() + Duration::from_secs(5);
    while metric(&scrape(p), "droidpool_config_generation", &[]) != Some(generation) {
        assert!(Instant::now() < until, "no reload:\n{}", p.stderr());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `check_delay: 0s` probes a server every time one is taken from the idle list; a long delay
/// never for servers used since; an empty `check_query` never (both reloadable). A probe that
/// fails with an error closes the server and the client is served by a new login, never told.
/// The probe is a sequence's `nextval`, so PostgreSQL counts the probes that ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_delay_decides_whether_the_probe_runs() {
    let pg = support::shared();
    let db = "server_check";
    create_db(pg, db);
    pg.psql_db(db, "create sequence check_seq");
    let probes = || {
        pg.psql_db(
            db,
            "select case when is_called then last_value else 0 end from check_seq",
        )
    };
    let config = |query: &str, delay: &str| {
        format!("server:\n  check_query: \"{query}\"\n  check_delay: {delay}\npool:\n  size: 1\n")
    };
    let probe = "select nextval('check_seq')";
    let p = block_in_place(|| Pooler::start_with_config(pg, &config(probe, "0s"), &[]));
    let c = p.connect(USER, db).await;
    for i in 0..5 {
        assert_eq!(one(&c, &format!("select {i}")).await, i.to_string());
    }
    assert_eq!(block_in_place(probes), "5", "one probe per transaction");

    reload(&p, &config(probe, "1h"), 2.0).await;
    for i in 0..5 {
        assert_eq!(one(&c, &format!("select {i}")).await, i.to_string());
    }
    assert_eq!(
        block_in_place(probes),
        "5",
        "a recently used server is not probed"
    );

    // A delay of a tick or more is noticed by the pool's maintenance tick (not worked out at
    // every checkout): a server idle past 1 s is probed once, then not again while in use.
    reload(&p, &config(probe, "1s"), 3.0).await;
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    for i in 0..3 {
        assert_eq!(one(&c, &format!("select {i}")).await, i.to_string());
    }
    assert_eq!(
        block_in_place(probes),
        "6",
        "a server idle past a 1 s check_delay is probed once"
    );

    reload(&p, &config("", "0s"), 4.0).await;
    for i in 0..5 {
        assert_eq!(one(&c, &format!("select {i}")).await, i.to_string());
    }
    assert_eq!(block_in_place(probes), "6", "no check query, no probe");

    // A probe that fails: each transaction's server is closed and a new login serves it.
    reload(&p, &config("select 1/0", "0s"), 5.0).await;
    for i in 0..3 {
        assert_eq!(one(&c, &format!("select {i}")).await, i.to_string());
    }
    assert_eq!(servers_closed(&p, "check_failed"), 3.0);
    // No server leaked: the pool's one server, idle.
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let left = backends(pg, db).await;
        if left.len() == 1 && left[0].1 == "idle" {
            break;
        }
        assert!(Instant::now() < until, "{left:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
