//! Following what the servers say: a server that answers 25006 (read-only transaction) in a
//! pool that needs writes is not handed out again, while a client's own read-only
//! transaction costs its server nothing; a reload moves an alias to other hosts.

use std::time::{Duration, Instant};

use tokio::task::block_in_place;
use tokio_postgres::error::SqlState;

use super::{hosts_yaml, whoami, USER};
use crate::support::{self, shared_pair, Pooler, DB};

async fn backend_pid(c: &tokio_postgres::Client) -> i32 {
    c.query_one("select pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0)
}

/// Hosts: the pair's primary, then the harness's own server (another primary). The first is
/// made read-only behind the pooler's back (ALTER SYSTEM, reload): its server answers the
/// next write with 25006 and is closed at release; the next transaction runs on the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_answers_25006_is_not_handed_out_again() {
    let pair = shared_pair().lock().await;
    let (a, b) = (pair.primary(), support::shared());
    for pg in [a, b] {
        block_in_place(|| pg.psql("create table if not exists failover_ro(i int)"));
    }
    let yaml = hosts_yaml(
        &[a.port, b.port],
        "  target_session_attrs: read-write\npool:\n  size: 1\n",
    );
    let pooler = block_in_place(|| Pooler::start_with_hosts(&yaml));
    let c = pooler.connect(USER, DB).await;
    assert_eq!(whoami(&c).await.unwrap(), (a.port, false));
    let pid = backend_pid(&c).await;

    // A client's own read-only transaction: 25006, and its server is still the one in use.
    c.batch_execute("begin read only").await.unwrap();
    let err = c
        .batch_execute("insert into failover_ro values (1)")
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        Some(&SqlState::READ_ONLY_SQL_TRANSACTION),
        "{err}"
    );
    c.batch_execute("rollback").await.unwrap();
    assert_eq!(
        backend_pid(&c).await,
        pid,
        "a client's read-only transaction says nothing"
    );
    assert_eq!(whoami(&c).await.unwrap(), (a.port, false));

    block_in_place(|| {
        a.psql("alter system set default_transaction_read_only = on");
        a.psql("select pg_reload_conf()");
    });
    // The server applies the reload between statements: write until it refuses.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match c.batch_execute("insert into failover_ro values (1)").await {
            Err(e) if e.code() == Some(&SqlState::READ_ONLY_SQL_TRANSACTION) => break,
            Err(e) => panic!("unexpected error {e}"),
            Ok(()) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Ok(()) => panic!("the server never became read-only"),
        }
    }
    // The driver returns the error as soon as it reads it, before the ReadyForQuery behind
    // it: a query sent at once may still reach the pooler while that server is held, and
    // then runs on it, as in any transaction pooler. The server goes at its release (asked
    // its role first): waited for, so that the next query is a new transaction.
    let closed =
        block_in_place(|| pooler.wait_for_line("[POOL] server 1 closed", Duration::from_secs(5)));
    // Not handed out again: the next transaction runs on the other host.
    let next = whoami(&c).await;
    block_in_place(|| {
        a.psql("alter system reset default_transaction_read_only");
        a.psql("select pg_reload_conf()");
    });
    assert!(closed, "{:?}", pooler.lines());
    assert_eq!(next.unwrap(), (b.port, false), "{:?}", pooler.lines());
    c.batch_execute("insert into failover_ro values (2)")
        .await
        .unwrap();
}

/// A reload that gives an alias other hosts and a new size: a busy server of the old host
/// finishes its transaction there and is closed at release; the next runs on the new host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_moves_an_alias_to_other_hosts() {
    let pair = shared_pair().lock().await;
    let (a, b) = (support::shared().port, pair.primary().port);
    let alias = |port: u16, size: usize| {
        format!(
            "auth:\n  user_methods:\n    {USER}: trust\nadmin:\n  console_users: [{USER}]\ndatabases:\n  app:\n    dbname: {DB}\n    \
             hosts: [\"127.0.0.1:{port}\"]\n    pool_size: {size}\n    mode: transaction\n"
        )
    };
    let pooler = block_in_place(|| Pooler::start_with_hosts(&alias(a, 2)));
    let c = pooler.connect(USER, "app").await;
    assert_eq!(whoami(&c).await.unwrap().0, a);
    c.batch_execute("begin").await.unwrap();
    block_in_place(|| pooler.reload_with(&alias(b, 3)));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = block_in_place(|| pooler.status());
        let size = s["pools"]
            .as_array()
            .and_then(|p| p.first())
            .map(|p| p["pool_size"].clone());
        if size == Some(serde_json::json!(3)) {
            break;
        }
        assert!(Instant::now() < deadline, "the reload did not apply: {s}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        whoami(&c).await.unwrap().0,
        a,
        "the transaction stays where it began"
    );
    c.batch_execute("commit").await.unwrap();
    assert_eq!(whoami(&c).await.unwrap().0, b);
    assert!(
        pooler.lines().iter().any(|l| l == "[POOL] server 1 closed"),
        "{:?}",
        pooler.lines()
    );
    // The console shows the alias as it resolves now.
    let console = pooler.connect(USER, "droidpool").await;
    let rows = console.simple_query("SHOW DATABASES").await.unwrap();
    let app = rows
        .iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) if r.get("name") == Some("app") => Some(r),
            _ => None,
        })
        .expect("a row for the alias");
    let port = b.to_string();
    let cols = ["host", "port", "database", "pool_size", "pool_mode"].map(|c| app.get(c));
    assert_eq!(
        cols,
        [
            Some("127.0.0.1"),
            Some(&*port),
            Some(DB),
            Some("3"),
            Some("transaction")
        ]
    );
}
