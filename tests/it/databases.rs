//! `DROP DATABASE` (and `ALTER DATABASE ... RENAME`, `CREATE DATABASE ... TEMPLATE`) through
//! the pooler against a real PostgreSQL: PostgreSQL refuses them while other sessions are
//! connected to the database, and a pooler keeps idle servers there after its clients leave
//! (a test suite that creates and drops its database through a pooler fails on them, as
//! asyncpg's `test_type_cache_invalidation_in_pool` does). The pooler closes its idle servers
//! of a database no client of its uses before such a statement runs; while a client is
//! connected there, the statement is refused as it would be directly.

use std::time::{Duration, Instant};

use tokio::task::block_in_place;
use tokio_postgres::error::SqlState;

use crate::core::create_db;
use crate::support::{self, Pooler};

const USER: &str = "droid";
/// Another role: its pools are its own.
const OTHER: &str = "db_other";

fn start(mode: &str) -> Pooler {
    let pg = support::shared();
    let yaml = format!(
        "pool:\n  size: 2\n  mode: {mode}\nauth:\n  user_methods:\n    {USER}: trust\n    \
         {OTHER}: trust\n"
    );
    block_in_place(|| Pooler::start_with_config(pg, &yaml, &[]))
}

/// How many sessions PostgreSQL has on `db`, asked directly.
async fn sessions_on(db: &str) -> i64 {
    let pg = support::shared();
    let c = pg.connect(USER, "postgres").await;
    c.query_one(
        "select count(*) from pg_stat_activity where datname = $1",
        &[&db],
    )
    .await
    .unwrap()
    .get(0)
}

/// A client of `db` runs a query and leaves (the statement that follows may come while the
/// pooler is still seeing it off): the pooler keeps its server, idle.
async fn leave_an_idle_server(p: &Pooler, db: &str) {
    leave_an_idle_server_as(p, USER, db).await
}

async fn leave_an_idle_server_as(p: &Pooler, user: &str, db: &str) {
    let c = p.connect(user, db).await;
    c.simple_query("select 1").await.unwrap();
    drop(c);
    let t0 = Instant::now();
    while sessions_on(db).await == 0 {
        assert!(t0.elapsed() < Duration::from_secs(5), "no server on {db}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_no_client_uses_is_freed_for_drop_database() {
    let pg = support::shared();
    for mode in ["transaction", "session"] {
        let p = start(mode);
        let admin = p.connect(USER, "postgres").await;
        let db = format!("dropped_{mode}");
        create_db(pg, &db);
        leave_an_idle_server(&p, &db).await;
        if mode == "transaction" {
            // A client still connected (holding no server between its transactions): the
            // statement meets the pool's server, as it would meet the client's session
            // directly (PostgreSQL waits 5 s for it to go, then refuses).
            let stays = p.connect(USER, &db).await;
            stays.simple_query("select 1").await.unwrap();
            let err = admin
                .simple_query(&format!("DROP DATABASE {db}"))
                .await
                .expect_err("refused while a client is connected");
            assert_eq!(err.code(), Some(&SqlState::OBJECT_IN_USE), "{err}");
            // Its pool kept its server.
            assert!(sessions_on(&db).await > 0);
            stays.simple_query("select 1").await.unwrap();
            drop(stays);

            // A client that leaves while PostgreSQL waits for the database's sessions to go:
            // its pool's server goes then, and the statement succeeds.
            let leaving_db = format!("leaving_{mode}");
            create_db(pg, &leaving_db);
            let leaving = p.connect(USER, &leaving_db).await;
            leaving.simple_query("select 1").await.unwrap();
            let admin2 = p.connect(USER, "postgres").await;
            let sql = format!("DROP DATABASE {leaving_db}");
            let dropping = tokio::spawn(async move { admin2.simple_query(&sql).await.map(drop) });
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert!(!dropping.is_finished(), "PostgreSQL waits for the session");
            drop(leaving);
            dropping
                .await
                .unwrap()
                .expect("the statement succeeds once the last client has left");

            // Another role's idle server is not closed for this client's statement: a
            // client cannot make another tenant's servers churn.
            crate::limits::trust_role(OTHER);
            let theirs = format!("theirs_{mode}");
            create_db(pg, &theirs);
            leave_an_idle_server_as(&p, OTHER, &theirs).await;
            let err = admin
                .simple_query(&format!("DROP DATABASE {theirs}"))
                .await
                .expect_err("another role's server is kept");
            assert_eq!(err.code(), Some(&SqlState::OBJECT_IN_USE), "{err}");
            pg.psql_db("postgres", &format!("DROP DATABASE {theirs} WITH (FORCE)"));
        }
        // No client uses it (or the last is leaving as the statement comes, as a test suite
        // closes its pool and drops its database): the server is closed and the statement
        // succeeds, by the simple protocol in one mode and the extended one in the other.
        let sql = format!("drop database if exists \"{db}\"");
        let res = if mode == "transaction" {
            admin.simple_query(&sql).await.map(drop)
        } else {
            admin.execute(&sql, &[]).await.map(drop)
        };
        res.unwrap_or_else(|e| panic!("{mode}: {sql}: {e}"));
        assert_eq!(sessions_on(&db).await, 0);

        // The same for a rename, and for a template's copy.
        let db = format!("renamed_{mode}");
        create_db(pg, &db);
        leave_an_idle_server(&p, &db).await;
        admin
            .simple_query(&format!("ALTER DATABASE {db} RENAME TO {db}_2"))
            .await
            .unwrap_or_else(|e| panic!("{mode}: rename: {e}"));
        admin
            .simple_query(&format!("DROP DATABASE {db}_2"))
            .await
            .unwrap();
        let db = format!("template_{mode}");
        create_db(pg, &db);
        leave_an_idle_server(&p, &db).await;
        admin
            .simple_query(&format!("CREATE DATABASE {db}_copy TEMPLATE {db}"))
            .await
            .unwrap_or_else(|e| panic!("{mode}: copy: {e}"));
        for d in [db.clone(), format!("{db}_copy")] {
            admin
                .simple_query(&format!("DROP DATABASE {d}"))
                .await
                .unwrap();
        }
    }
}
