//! Limits of a shared pooler, PgBouncer's names: server connections per database and per
//! user across pools (a pool at the limit waits, another pool's idle server is closed to make
//! room, waiting pools are served in arrival order), per-user overrides (`users:`), client
//! connections per user, the reserve pool, and a reload that lowers limits without dropping
//! anything. Each test has databases of its own, counted in `pg_stat_activity`.

use std::time::{Duration, Instant};

use tokio_postgres::Client;

use crate::core::{code, create_db};
use crate::support::metrics::{metric_or_zero, scrape};
use crate::support::{self, Pooler};

/// Client backends PostgreSQL has for database `db`.
pub(crate) fn backends(db: &str) -> i64 {
    support::shared()
        .psql(&format!(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = '{db}' \
             AND backend_type = 'client backend'"
        ))
        .parse()
        .expect("a count")
}

/// A role that logs in without a password (the harness trusts roles not listed in its
/// pg_hba), allowed into the test databases.
pub(crate) fn trust_role(name: &str) {
    support::shared().psql_db(
        "postgres",
        &format!(
            "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{name}') THEN \
               CREATE ROLE {name} LOGIN; END IF; END $$"
        ),
    );
}

/// This pool's entry in `/status`.
pub(crate) fn pool_status(p: &Pooler, db: &str, user: &str) -> serde_json::Value {
    let st = p.status();
    st["pools"]
        .as_array()
        .and_then(|a| {
            a.iter()
                .find(|s| s["database"] == db && s["user"] == user)
                .cloned()
        })
        .unwrap_or(serde_json::Value::Null)
}

/// A client inside a transaction (so it holds its server).
pub(crate) async fn in_transaction(p: &Pooler, user: &str, db: &str) -> Client {
    let c = p.connect(user, db).await;
    c.batch_execute("begin; select 1").await.expect("begin");
    c
}

/// Waits until `cond` holds, checking every 50 ms.
pub(crate) async fn until(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `select 1` in the background, with when it finished (or its error).
pub(crate) fn query_later(
    c: Client,
) -> tokio::task::JoinHandle<(Result<(), String>, Instant, Client)> {
    tokio::spawn(async move {
        let r = c
            .simple_query("select 1")
            .await
            .map(drop)
            .map_err(|e| code(&e));
        (r, Instant::now(), c)
    })
}

/// `pool.max_db_connections` across two users' pools of one database: a pool at the limit
/// waits (never opening more), pools are served in arrival order as servers are released,
/// an idle server of another pool is closed to make room, and the wait is bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_limit_spans_pools() {
    let pg = support::shared();
    let db = "lim_db";
    create_db(pg, db);
    for r in ["lim_a", "lim_b", "lim_c"] {
        trust_role(r);
    }
    let yaml = "pool:\n  size: 5\n  max_db_connections: 1\n  query_wait_timeout: 4s\n\
                server:\n  connect_timeout: 2s\n";
    let pooler = Pooler::start_with_config(pg, yaml, &[]);
    // Each new pool's first login (for the parameters its clients are told) takes the one
    // server, closing the idle one of the pool before.
    let (b, c) = (
        pooler.connect("lim_b", db).await,
        pooler.connect("lim_c", db).await,
    );
    let a = in_transaction(&pooler, "lim_a", db).await;
    assert_eq!(backends(db), 1);
    // lim_b's pool and then lim_c's wait for the database's one server.
    let b = query_later(b);
    until("lim_b waiting", Duration::from_secs(5), || {
        pool_status(&pooler, db, "lim_b")["clients_waiting"] == 1
    })
    .await;
    let c = query_later(c);
    until("lim_c waiting", Duration::from_secs(5), || {
        pool_status(&pooler, db, "lim_c")["clients_waiting"] == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        backends(db),
        1,
        "a pool at the database limit opened a server"
    );
    // Shown in SHOW POOLS and the gauges as in /status.
    let (_, pools) =
        support::pooler::http_request_body(pooler.admin_port(), "POST", "/console", "SHOW POOLS");
    let rows: Vec<Vec<&str>> = pools.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(
        rows[0][13..],
        [
            "max_db_connections",
            "db_connections",
            "max_user_connections",
            "user_connections"
        ],
        "{pools}"
    );
    let b_row = rows
        .iter()
        .find(|r| r[..2] == ["lim_db", "lim_b"])
        .expect("lim_b's pool");
    assert_eq!((b_row[3], b_row[13], b_row[14]), ("1", "1", "1"), "{pools}");
    let text = scrape(&pooler);
    let db_label = [("database", db)];
    assert_eq!(
        metric_or_zero(&text, "droidpool_database_max_connections", &db_label),
        1.0
    );
    assert_eq!(
        metric_or_zero(&text, "droidpool_database_server_connections", &db_label),
        1.0
    );
    let s = pool_status(&pooler, db, "lim_b");
    assert_eq!(
        (s["db_connections"].clone(), s["max_db_connections"].clone()),
        (1.into(), 1.into())
    );
    // lim_a's release goes to the first pool in line, lim_b; lim_c still waits.
    // lim_b's release in turn goes to lim_c.
    a.batch_execute("commit").await.unwrap();
    let (r, b_done, b) = b.await.unwrap();
    r.expect("lim_b served after lim_a released its server");
    let (r, c_done, _c) = c.await.unwrap();
    r.expect("lim_c served after lim_b released its server");
    assert!(b_done < c_done, "pools are served in the order they came");
    assert!(backends(db) <= 1);
    let evicted = metric_or_zero(
        &scrape(&pooler),
        "droidpool_servers_closed_total",
        &[("reason", "evicted")],
    );
    assert!(
        evicted >= 2.0,
        "released servers went to the other pools: {evicted}"
    );
    // With nothing released, the wait ends at query_wait_timeout.
    b.batch_execute("begin; select 1").await.unwrap();
    let started = Instant::now();
    let waiting = pooler.connect("lim_a", db).await;
    let err = waiting.simple_query("select 1").await.unwrap_err();
    assert_eq!(code(&err), "57014", "{err}");
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(backends(db), 1);
}

/// `pool.max_user_connections` across one user's pools of two databases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_limit_spans_databases() {
    let pg = support::shared();
    for db in ["lim_u1", "lim_u2"] {
        create_db(pg, db);
    }
    trust_role("lim_user");
    let yaml = "pool:\n  size: 4\n  max_user_connections: 1\n  query_wait_timeout: 5s\n\
                server:\n  connect_timeout: 2s\n";
    let pooler = Pooler::start_with_config(pg, yaml, &[]);
    let other = pooler.connect("lim_user", "lim_u2").await;
    let held = in_transaction(&pooler, "lim_user", "lim_u1").await;
    let other = query_later(other);
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        !other.is_finished(),
        "the user's second database got a server"
    );
    assert_eq!(backends("lim_u2"), 0);
    let s = pool_status(&pooler, "lim_u2", "lim_user");
    assert_eq!(s["clients_waiting"], 1, "{s}");
    assert_eq!(
        (
            s["user_connections"].clone(),
            s["max_user_connections"].clone()
        ),
        (1.into(), 1.into())
    );
    held.batch_execute("commit").await.unwrap();
    let (r, _, _) = other.await.unwrap();
    r.expect("served once the user's server was released");
    assert_eq!(backends("lim_u1") + backends("lim_u2"), 1);
}

/// `users:` overrides the pool size, the mode and the user limit for one user only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_section_overrides_one_user() {
    let pg = support::shared();
    let db = "lim_users";
    create_db(pg, db);
    for r in ["lim_small", "lim_other"] {
        trust_role(r);
    }
    let yaml = "pool:\n  size: 5\n  query_wait_timeout: 2s\nserver:\n  connect_timeout: 1s\n\
                users:\n  lim_small:\n    \
                pool_size: 1\n    mode: session\n    max_user_connections: 1\n";
    let pooler = Pooler::start_with_config(pg, yaml, &[]);
    let first = pooler.connect("lim_small", db).await;
    first.simple_query("select 1").await.unwrap();
    // Session mode: the client keeps its server between transactions, so a second client
    // of the user (pool size 1) waits until the wait times out.
    let second = pooler.connect("lim_small", db).await;
    let err = second.simple_query("select 1").await.unwrap_err();
    assert_eq!(code(&err), "57014", "{err}");
    let s = pool_status(&pooler, db, "lim_small");
    assert_eq!(
        (s["mode"].clone(), s["pool_size"].clone()),
        ("session".into(), 1.into()),
        "{s}"
    );
    assert_eq!(s["max_user_connections"], 1, "{s}");
    // Another user keeps the defaults: transaction mode, five servers.
    let others: Vec<Client> =
        futures_util::future::join_all((0..3).map(|_| in_transaction(&pooler, "lim_other", db)))
            .await;
    let s = pool_status(&pooler, db, "lim_other");
    assert_eq!(
        (s["mode"].clone(), s["pool_size"].clone()),
        ("transaction".into(), 5.into()),
        "{s}"
    );
    assert_eq!(s["servers_active"], 3, "{s}");
    drop(others);
}

/// `client.max_user_connections`: beyond it, 53300 as PostgreSQL says it; other users are
/// not counted, and a slot frees when a client leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_limit_per_user() {
    let pg = support::shared();
    let db = "lim_clients";
    create_db(pg, db);
    for r in ["lim_cl1", "lim_cl2"] {
        trust_role(r);
    }
    let yaml = "client:\n  max_user_connections: 2\n";
    let pooler = Pooler::start_with_config(pg, yaml, &[]);
    let one = pooler.connect("lim_cl1", db).await;
    let _two = pooler.connect("lim_cl1", db).await;
    let Err(err) = pooler.try_connect("lim_cl1", db).await else {
        panic!("a third client of the user was let in");
    };
    assert_eq!(code(&err), "53300", "{err}");
    assert!(
        format!("{err:?}").contains("too many connections for role \\\"lim_cl1\\\""),
        "{err:?}"
    );
    let _other = pooler.connect("lim_cl2", db).await;
    assert_eq!(pool_status(&pooler, db, "lim_cl1")["user_clients"], 2);
    drop(one);
    until("a client slot freed", Duration::from_secs(5), || {
        pool_status(&pooler, db, "lim_cl1")["user_clients"] == 1
    })
    .await;
    pooler.connect("lim_cl1", db).await;
}

/// The reserve opens only once a client has waited `reserve_timeout`, and its server goes
/// when released with nobody waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserve_opens_after_reserve_timeout() {
    let pg = support::shared();
    let db = "lim_reserve";
    create_db(pg, db);
    let yaml = "pool:\n  size: 1\n  reserve_size: 1\n  reserve_timeout: 1500ms\n  \
                query_wait_timeout: 10s\n";
    let pooler = Pooler::start_with_config(pg, yaml, &[]);
    let _held = in_transaction(&pooler, "droid", db).await;
    let waiting = pooler.connect("droid", db).await;
    let asked = Instant::now();
    let q = query_later(waiting);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(!q.is_finished(), "served before reserve_timeout");
    assert_eq!(backends(db), 1, "the reserve opened early");
    assert_eq!(pool_status(&pooler, db, "droid")["servers_reserve"], 0);
    let (r, done, _c) = q.await.unwrap();
    r.expect("the reserve serves the waiting client");
    let waited = done - asked;
    assert!(
        waited >= Duration::from_millis(1500) && waited < Duration::from_secs(4),
        "served after {waited:?}"
    );
    // Released with nobody waiting: the reserve server closes.
    until("the reserve server closed", Duration::from_secs(5), || {
        pool_status(&pooler, db, "droid")["servers_reserve"] == 0 && backends(db) == 1
    })
    .await;
}

/// A reload that lowers the database and user limits and the client limit (the pool size
/// stays) closes nothing in use: every transaction finishes, and the surplus servers go as they are
/// released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lowering_limits_by_reload_drops_nothing() {
    let pg = support::shared();
    let db = "lim_reload";
    create_db(pg, db);
    let yaml = "pool:\n  size: 4\n  max_db_connections: 4\n  max_user_connections: 4\n\
                client:\n  max_user_connections: 4\n";
    let pooler = Pooler::start_with_config(pg, yaml, &[]);
    let clients: Vec<Client> =
        futures_util::future::join_all((0..3).map(|_| in_transaction(&pooler, "droid", db))).await;
    assert_eq!(backends(db), 3);
    let lowered = "pool:\n  size: 4\n  max_db_connections: 1\n  max_user_connections: 2\n\
                   client:\n  max_user_connections: 1\n";
    pooler.reload_with(lowered);
    until("the lower limits in force", Duration::from_secs(5), || {
        pool_status(&pooler, db, "droid")["max_db_connections"] == 1
    })
    .await;
    // Every transaction goes on and commits on its own server.
    for (i, c) in clients.iter().enumerate() {
        c.batch_execute(&format!("select {i}; commit"))
            .await
            .unwrap();
    }
    assert!(
        pooler.try_connect("droid", db).await.is_err(),
        "over the client limit"
    );
    until("the surplus servers gone", Duration::from_secs(5), || {
        backends(db) <= 1
    })
    .await;
    for c in &clients {
        c.simple_query("select 1").await.expect("still served");
    }
    let s = pool_status(&pooler, db, "droid");
    assert_eq!(s["user_clients"], 3, "no client was dropped: {s}");
}
