//! A server's FATAL that arrives while its client sits at a transaction boundary (a fast
//! shutdown, `pg_terminate_backend`) ends that server only: the idle client that held it (in
//! session mode, or pinned in transaction mode) keeps its session, and its next transaction
//! runs on another server. A FATAL inside a transaction still ends the client's session, as
//! directly: the transaction's work is lost and the client must know.

use std::time::Duration;

use tokio::task::block_in_place;

use crate::core::create_db;
use crate::session_signal::wait_gone;
use crate::session_state::one;
use crate::support::{self, Pooler};

const USER: &str = "droid";

fn start(db: &str, mode: &str) -> Pooler {
    let pg = support::shared();
    create_db(pg, db);
    // session_state: pin, so that a temporary table keeps a transaction-mode client on its
    // server between transactions.
    let yaml = format!(
        "pool:\n  size: 4\n  mode: {mode}\n  session_state: pin\n  query_wait_timeout: 10s\n\
         auth:\n  user_methods:\n    {USER}: trust\n"
    );
    block_in_place(|| Pooler::start_with_config(pg, &yaml, &[]))
}

/// Ends backend `pid` from a direct connection and waits until it has gone and the pooler
/// has had the moment to read its FATAL and close.
async fn terminate(pid: &str) {
    let direct = support::shared().connect(USER, "postgres").await;
    let ended: bool = direct
        .query_one("select pg_terminate_backend($1::text::int)", &[&pid])
        .await
        .unwrap()
        .get(0);
    assert!(ended, "pg_terminate_backend({pid})");
    wait_gone(pid).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
}

/// `c`'s idle server `pid` is ended: `c` goes on, its next transactions on another server.
async fn goes_on_after_its_server_ends(c: &tokio_postgres::Client, pid: &str) {
    terminate(pid).await;
    assert!(
        !c.is_closed(),
        "the client's session ended with its idle server"
    );
    let after = one(c, "select pg_backend_pid()").await;
    assert_ne!(after, pid, "the next transaction runs on another server");
    assert_eq!(one(c, "select 41 + 1").await, "42");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_client_keeps_its_session_when_its_idle_server_is_terminated() {
    let p = start("fatal_idle_session", "session");
    let c = p.connect(USER, "fatal_idle_session").await;
    let before = one(&c, "select pg_backend_pid()").await;
    goes_on_after_its_server_ends(&c, &before).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_client_keeps_its_session_when_its_idle_server_is_terminated() {
    let p = start("fatal_idle_pinned", "transaction");
    let c = p.connect(USER, "fatal_idle_pinned").await;
    // A temporary table pins the client to its server between transactions.
    c.batch_execute("create temporary table t (x int)")
        .await
        .unwrap();
    let before = one(&c, "select pg_backend_pid()").await;
    // Another client's transaction meanwhile must not get that server.
    let other = p.connect(USER, "fatal_idle_pinned").await;
    assert_ne!(one(&other, "select pg_backend_pid()").await, before);
    assert_eq!(one(&c, "select pg_backend_pid()").await, before, "pinned");
    goes_on_after_its_server_ends(&c, &before).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fatal_inside_a_transaction_still_ends_the_session() {
    let p = start("fatal_in_tx", "session");
    let c = p.connect(USER, "fatal_in_tx").await;
    c.batch_execute("begin").await.unwrap();
    let pid = one(&c, "select pg_backend_pid()").await;
    terminate(&pid).await;
    let err = c
        .simple_query("select 1")
        .await
        .expect_err("the transaction's server is gone");
    let code = err.code().map(|c| c.code().to_owned());
    assert!(
        code.as_deref() == Some("57P01") || c.is_closed(),
        "want the FATAL 57P01 or a closed session, got {err:?}"
    );
}
