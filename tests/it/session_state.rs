//! `pool.session_state: pin` against a real PostgreSQL: a client that creates session state
//! keeps its server (its setting, temp table and lock are there in its next transaction, and
//! no other client sees them), and a departed pinned client's server is reset before the
//! next client gets it. Pools of one server make "another client got that server" certain;
//! the pool of two makes the pinned client's next transaction find its own server while
//! another client holds a transaction open.

use std::time::Duration;

use tokio::task::block_in_place;

use crate::core::create_db;
use crate::support::metrics::{metric_or_zero, scrape};
use crate::support::{self, Pooler};

const USER: &str = "droid";

fn start(db: &str, size: usize) -> Pooler {
    let pg = support::shared();
    create_db(pg, db);
    let yaml = format!(
        "pool:\n  size: {size}\n  mode: transaction\n  session_state: pin\n  \
         query_wait_timeout: 20s\nlog:\n  events: all\n"
    );
    block_in_place(|| Pooler::start_with_config(pg, &yaml, &[]))
}

async fn one(c: &tokio_postgres::Client, sql: &str) -> String {
    let rows = c.simple_query(sql).await.expect(sql);
    rows.iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
            _ => None,
        })
        .expect("a row")
}

/// Client A's `SET` stays A's: with one server, B waits while A is connected (A is pinned),
/// A finds its setting in its next transaction, and B, once A leaves, runs under the
/// default on the same backend (reset, not reconnected).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_pins_and_never_reaches_another_client() {
    let p = start("ss_set", 1);
    let a = p.connect(USER, "ss_set").await;
    a.simple_query("SET search_path TO pin_a, public")
        .await
        .unwrap();
    let pid_a = one(&a, "select pg_backend_pid()").await;

    let b = p.connect(USER, "ss_set").await;
    let seen = tokio::spawn(async move {
        let path = one(&b, "show search_path").await;
        let pid = one(&b, "select pg_backend_pid()").await;
        (path, pid)
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        !seen.is_finished(),
        "B ran while A was pinned to the only server"
    );
    assert_eq!(one(&a, "show search_path").await, "pin_a, public");
    assert_eq!(one(&a, "select pg_backend_pid()").await, pid_a);
    drop(a);

    let (path, pid_b) = tokio::time::timeout(Duration::from_secs(10), seen)
        .await
        .expect("B got the server once A left")
        .unwrap();
    assert_eq!(path, "\"$user\", public", "A's setting reached B");
    assert_eq!(pid_b, pid_a, "the same server, reset");
    assert!(
        p.lines()
            .iter()
            .any(|l| l == "[POOL] client 1 pinned to server 1: setting"),
        "{:?}",
        p.lines()
    );
    let m = scrape(&p);
    assert_eq!(
        metric_or_zero(&m, "droidpool_session_pins_total", &[("reason", "setting")]),
        1.0
    );
}

/// A departed client's temp table and session advisory lock are gone for the next client
/// on the same backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_departed_pinned_clients_lock_and_temp_table_are_gone() {
    let p = start("ss_gone", 1);
    let a = p.connect(USER, "ss_gone").await;
    a.simple_query("create temp table t_pinned (a int)")
        .await
        .unwrap();
    a.simple_query("select pg_advisory_lock(4242)")
        .await
        .unwrap();
    let pid_a = one(&a, "select pg_backend_pid()").await;
    drop(a);

    let b = p.connect(USER, "ss_gone").await;
    assert_eq!(one(&b, "select pg_backend_pid()").await, pid_a);
    assert_eq!(
        one(
            &b,
            "select count(*) from pg_class where relname = 't_pinned' and relpersistence = 't'"
        )
        .await,
        "0",
        "A's temp table reached B"
    );
    assert_eq!(
        one(&b, "select pg_try_advisory_lock(4242)").await,
        "t",
        "A's lock is still held"
    );
    let lines = p.lines();
    assert!(
        lines
            .iter()
            .any(|l| l == "[POOL] client 1 pinned to server 1: temp_table"),
        "{lines:?}"
    );
}

/// With two servers and another client holding a transaction open, a pinned client's next
/// transactions still find its temp table, cursor and setting: same backend every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_client_finds_its_state_while_others_run() {
    let p = start("ss_two", 2);
    let a = p.connect(USER, "ss_two").await;
    let b = p.connect(USER, "ss_two").await;
    a.simple_query("create temporary table t_mine (a int)")
        .await
        .unwrap();
    let pid_a = one(&a, "select pg_backend_pid()").await;
    // B opens a transaction: unpinned, A's server would be the one it takes.
    b.simple_query("begin").await.unwrap();
    let pid_b = one(&b, "select pg_backend_pid()").await;
    assert_ne!(pid_b, pid_a, "B took the pinned client's server");
    for i in 0..5 {
        a.simple_query(&format!("insert into t_mine values ({i})"))
            .await
            .unwrap();
        assert_eq!(one(&a, "select pg_backend_pid()").await, pid_a);
    }
    assert_eq!(one(&a, "select count(*) from t_mine").await, "5");
    b.simple_query("commit").await.unwrap();
}

/// Look-alikes in literals and comments, `SET LOCAL` and the `_xact_` lock create no
/// session state: the client does not keep the only server, so another one runs meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn look_alikes_and_transaction_state_do_not_pin() {
    let p = start("ss_alike", 1);
    let a = p.connect(USER, "ss_alike").await;
    let b = p.connect(USER, "ss_alike").await;
    for sql in [
        "select 'SET search_path TO x'",
        "/* LISTEN ch; create temp table x (a int) */ select 1",
        "select $$ PREPARE q AS select 1 $$",
        "begin; SET LOCAL statement_timeout = 1000; select pg_advisory_xact_lock(7); commit",
    ] {
        a.simple_query(sql).await.expect(sql);
        tokio::time::timeout(Duration::from_secs(5), b.simple_query("select 1"))
            .await
            .unwrap_or_else(|_| panic!("{sql} pinned its client"))
            .unwrap();
    }
    let m = scrape(&p);
    assert!(!m.contains("droidpool_session_pins_total{"), "{m}");
}
