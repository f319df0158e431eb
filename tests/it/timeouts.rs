//! The pooler's own timeouts against a real PostgreSQL: what the client sees (the SQLSTATE
//! PostgreSQL itself uses for each case), the session or connection afterwards, and the
//! server connections left in `pg_stat_activity` (each test has its own database).

use std::time::{Duration, Instant};

use tokio::task::block_in_place;
use tokio_postgres::error::SqlState;

use crate::core::create_db;
use crate::support::metrics::{metric_or_zero, scrape};
use crate::support::raw::{query, sqlstate, tags, Raw};
use crate::support::{self, Pooler};

const USER: &str = "droid";

fn start(db: &str, timeouts: &str) -> Pooler {
    let pg = support::shared();
    create_db(pg, db);
    let yaml = format!("pool:\n  size: 2\n  mode: transaction\n{timeouts}");
    block_in_place(|| Pooler::start_with_config(pg, &yaml, &[]))
}

/// Backends of `db` in PostgreSQL, by state.
pub(crate) async fn backends(db: &str) -> Vec<String> {
    let c = support::shared().connect(USER, "postgres").await;
    c.query(
        "select coalesce(state, '') from pg_stat_activity where datname = $1 \
         and backend_type = 'client backend'",
        &[&db],
    )
    .await
    .expect("pg_stat_activity")
    .iter()
    .map(|r| r.get::<_, String>(0))
    .collect()
}

fn timeouts_counted(p: &Pooler, which: &str) -> f64 {
    counted(p, "droidpool_timeouts_total", "timeout", which)
}

fn counted(p: &Pooler, name: &str, label: &str, value: &str) -> f64 {
    metric_or_zero(&scrape(p), name, &[(label, value)])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_timeout_cancels_and_the_session_stays() {
    let db = "to_query";
    let p = start(db, "  query_timeout: 500ms\n");
    let c = p.connect(USER, db).await;
    let t0 = Instant::now();
    let err = c
        .simple_query("select pg_sleep(10)")
        .await
        .expect_err("cancelled");
    assert_eq!(err.code(), Some(&SqlState::QUERY_CANCELED), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    // The session goes on, and a query within the limit is left alone.
    let rows = c
        .simple_query("select pg_sleep(0.1), 42")
        .await
        .expect("query");
    assert!(!rows.is_empty());
    assert_eq!(timeouts_counted(&p, "query"), 1.0);
    // Nothing runs on: the server is idle (kept by the pool), not active.
    let states = backends(db).await;
    assert!(states.iter().all(|s| s == "idle"), "{states:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_transaction_timeout_closes_client_and_server() {
    let db = "to_idle_tx";
    let p = start(db, "  idle_transaction_timeout: 500ms\n");
    let mut c = Raw::connect(p.port(), USER, db).await;
    for sql in [
        "begin",
        "create table t_idle (a int)",
        "select pg_sleep(0.8)",
    ] {
        // Busy is not idle: a statement longer than the limit is not cut.
        c.send(&query(sql)).await;
        let frames = c.until_ready().await;
        assert!(!tags(&frames).contains('E'), "{sql}: {}", tags(&frames));
    }
    // Idle in the transaction: the pooler says why and closes the connection.
    let t0 = Instant::now();
    let fatal = c.recv().await;
    assert_eq!(fatal.tag, b'E');
    assert_eq!(sqlstate(&fatal), "25P03");
    assert!(String::from_utf8_lossy(fatal.body()).contains("FATAL"));
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert!(c.closed_within(Duration::from_secs(2)).await);
    assert_eq!(timeouts_counted(&p, "idle_transaction"), 1.0);
    // The server is gone (closed, so PostgreSQL rolled back): no idle-in-transaction backend.
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let states = backends(db).await;
        if !states.iter().any(|s| s.starts_with("idle in transaction")) {
            break;
        }
        assert!(Instant::now() < until, "{states:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Rolled back: the table does not exist.
    let c2 = p.connect(USER, db).await;
    let err = c2
        .simple_query("select * from t_idle")
        .await
        .expect_err("rolled back");
    assert_eq!(err.code(), Some(&SqlState::UNDEFINED_TABLE), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_timeout_ends_a_long_transaction() {
    let db = "to_tx";
    let p = start(db, "  transaction_timeout: 1s\n");
    let mut c = Raw::connect(p.port(), USER, db).await;
    // Statements in a row, never idle long, but the transaction passes 1 s.
    c.send(&query("begin")).await;
    c.until_ready().await;
    let mut fatal = None;
    'queries: for _ in 0..10 {
        c.send(&query("select pg_sleep(0.3)")).await;
        while let Some(f) = c.try_recv().await {
            match f.tag {
                b'E' => {
                    fatal = Some(f);
                    break 'queries;
                }
                b'Z' => continue 'queries,
                _ => {}
            }
        }
        break;
    }
    let fatal = fatal.expect("the transaction was ended");
    assert_eq!(sqlstate(&fatal), "25P04");
    assert!(String::from_utf8_lossy(fatal.body()).contains("FATAL"));
    assert_eq!(timeouts_counted(&p, "transaction"), 1.0);
    let until = Instant::now() + Duration::from_secs(5);
    while backends(db).await.iter().any(|s| s != "idle") {
        assert!(Instant::now() < until, "{:?}", backends(db).await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Transactions within the limit are not touched.
    let c2 = p.connect(USER, db).await;
    c2.simple_query("begin; select 1; commit")
        .await
        .expect("short");
}

/// Open file descriptors of the pooler process: its sockets, among them one per cancel in
/// flight on each side.
fn open_fds(p: &Pooler) -> usize {
    std::fs::read_dir(format!("/proc/{}/fd", p.pid()))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Cancels the pooler sent to PostgreSQL, by result (`done`, `timeout`, `failed`).
fn cancels_counted(p: &Pooler, result: &str) -> f64 {
    counted(p, "droidpool_server_cancels_total", "result", result)
}

/// Waits until `db` has a backend running a statement.
pub(crate) async fn until_active(db: &str) {
    let until = Instant::now() + Duration::from_secs(5);
    while !backends(db).await.iter().any(|s| s == "active") {
        assert!(Instant::now() < until, "no statement running");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `pool.cancel_wait_timeout`: a forwarded CancelRequest the server never confirms (the network
/// to PostgreSQL black-holes it) is given up after the timeout. The client's cancel connection
/// is closed then, not before (the pooler waits for PostgreSQL's close, as libpq does), nothing
/// piles up (the pooler's sockets go back to what they were), and each is counted as
/// `timeout`. A cancel PostgreSQL gets still works: 57014 for the query, its connection closed
/// once PostgreSQL has acted, counted as `forwarded`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_wait_timeout_gives_up_on_a_black_holed_cancel() {
    use crate::faults::{FaultProxy, Mode};
    use crate::support::raw::cancel_and_wait;
    let db = "to_cancel_wait";
    let pg = support::shared();
    create_db(pg, db);
    let proxy = FaultProxy::start(pg.port).await;
    let yaml = "pool:\n  size: 2\n  cancel_wait_timeout: 1s\n";
    let p = block_in_place(|| Pooler::start_for_server(proxy.port(), yaml));
    let (mut c, key) = Raw::connect_keyed(p.port(), USER, db).await;
    c.send(&query("select 1")).await;
    assert_eq!(tags(&c.until_ready().await), "TDCZ");
    let base = open_fds(&p);

    c.send(&query("select pg_sleep(2.5)")).await;
    until_active(db).await;
    proxy.set_mode(Mode::BlackHole);
    let cancels: Vec<_> = (0..20)
        .map(|_| tokio::spawn(cancel_and_wait(p.port(), key)))
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let during = open_fds(&p);
    assert!(
        during >= base + 20,
        "20 cancels in flight: {base} -> {during} fds"
    );
    for cancel in cancels {
        let took = cancel.await.unwrap();
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(3),
            "a black-holed cancel was given up after {took:?}, want about 1 s"
        );
    }
    assert_eq!(cancels_counted(&p, "timeout"), 20.0);
    let until = Instant::now() + Duration::from_secs(2);
    while open_fds(&p) > base {
        assert!(Instant::now() < until, "{base} -> {} fds", open_fds(&p));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The cancels never reached PostgreSQL: the query ends on its own once the network heals.
    proxy.set_mode(Mode::Pass);
    assert_eq!(tags(&c.until_ready().await), "TDCZ");

    // A cancel PostgreSQL gets: the query is cancelled, the session goes on.
    c.send(&query("select pg_sleep(30)")).await;
    until_active(db).await;
    let took = cancel_and_wait(p.port(), key).await;
    assert!(took < Duration::from_secs(2), "{took:?}");
    let frames = c.until_ready().await;
    let error = frames.iter().find(|f| f.tag == b'E').expect("cancelled");
    assert_eq!(sqlstate(error), "57014", "{}", tags(&frames));
    assert_eq!(cancels_counted(&p, "done"), 1.0);
    c.send(&query("select 1")).await;
    assert_eq!(tags(&c.until_ready().await), "TDCZ");
    // A key nobody holds is dropped, as PostgreSQL drops it.
    let took = cancel_and_wait(p.port(), (key.0, key.1.wrapping_add(1))).await;
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert_eq!(
        counted(&p, "droidpool_cancel_requests_total", "result", "unknown"),
        1.0
    );
    // No server leaked: the pooler's one server is idle.
    let states = backends(db).await;
    assert!(states.iter().all(|s| s == "idle"), "{states:?}");
}

/// `client.idle_timeout`: a client idle outside a transaction is told why (FATAL 08P01
/// `client_idle_timeout`) and closed; one that keeps sending within it stays. Set by a
/// reload, it applies from the client's next transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_idle_timeout_closes_an_idle_client() {
    let db = "to_client_idle";
    let pg = support::shared();
    create_db(pg, db);
    let yaml = |idle: &str| {
        format!("pool:\n  size: 2\n  mode: transaction\nclient:\n  idle_timeout: {idle}\n")
    };
    let p = block_in_place(|| Pooler::start_with_config(pg, &yaml("0s"), &[]));
    let mut busy = Raw::connect(p.port(), USER, db).await;
    let mut idle = Raw::connect(p.port(), USER, db).await;
    idle.send(&query("select 1")).await;
    idle.until_ready().await;
    p.reload_with(&yaml("600ms"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    for c in [&mut busy, &mut idle] {
        c.send(&query("select 1")).await;
        assert_eq!(tags(&c.until_ready().await), "TDCZ");
    }
    // `busy` sends every 200 ms for 1.5 s; `idle` sends nothing.
    let t0 = Instant::now();
    let keep_busy = async {
        while t0.elapsed() < Duration::from_millis(1500) {
            tokio::time::sleep(Duration::from_millis(200)).await;
            busy.send(&query("select 1")).await;
            assert_eq!(tags(&busy.until_ready().await), "TDCZ");
        }
    };
    let watch_idle = async {
        let fatal = idle.recv().await;
        let waited = t0.elapsed();
        assert_eq!(fatal.tag, b'E');
        assert_eq!(sqlstate(&fatal), "08P01");
        let text = String::from_utf8_lossy(fatal.body()).into_owned();
        assert!(
            text.contains("FATAL") && text.contains("client_idle_timeout"),
            "{text}"
        );
        assert!(idle.closed_within(Duration::from_secs(2)).await);
        waited
    };
    let ((), waited) = tokio::join!(keep_busy, watch_idle);
    assert!(
        waited >= Duration::from_millis(500) && waited < Duration::from_millis(1400),
        "{waited:?}"
    );
    busy.send(&query("select 2")).await;
    assert_eq!(
        tags(&busy.until_ready().await),
        "TDCZ",
        "the busy client stays"
    );
}
