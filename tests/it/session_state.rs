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
    start_with(db, size, "transaction", "20s")
}

fn start_with(db: &str, size: usize, mode: &str, wait: &str) -> Pooler {
    start_state(db, size, mode, wait, "pin")
}

fn start_state(db: &str, size: usize, mode: &str, wait: &str, state: &str) -> Pooler {
    let pg = support::shared();
    create_db(pg, db);
    let yaml = format!(
        "server:\n  connect_timeout: 500ms\npool:\n  size: {size}\n  mode: {mode}\n  \
         session_state: {state}\n  query_wait_timeout: {wait}\nlog:\n  events: all\n\
         auth:\n  user_methods:\n    {USER}: trust\nadmin:\n  console_users: [{USER}]\n"
    );
    block_in_place(|| Pooler::start_with_config(pg, &yaml, &[]))
}

pub(crate) async fn one(c: &tokio_postgres::Client, sql: &str) -> String {
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

/// A pinned client is visible: `SHOW CLIENTS` names its pin, the pool's pinned gauge counts
/// it, and a client that waits in vain for the server it holds is told so (57014, the pins
/// in the DETAIL), never left hanging. When it leaves, the gauge drops and the waiter runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pins_are_shown_and_a_waiter_is_told_who_holds_the_servers() {
    use crate::support::raw::{sqlstate, tags, Raw};
    let p = start_with("ss_seen", 1, "transaction", "1s");
    let (mut a, (a_id, _)) = Raw::connect_keyed(p.port(), USER, "ss_seen").await;
    assert_eq!(
        tags(&a.query("create temp table t_seen (a int)").await),
        "CZ"
    );
    let clients = block_in_place(|| crate::admin::psql(&p, USER, "droidpool", "SHOW CLIENTS"));
    assert!(clients.0, "{}", clients.2);
    assert!(
        clients.1.lines().any(
            |l| l.starts_with(&format!("C|{a_id}|ss_seen|{USER}|active|"))
                && l.ends_with("|temp_table")
        ),
        "{}",
        clients.1
    );
    let m = scrape(&p);
    let pinned = |m: &str| {
        metric_or_zero(
            m,
            "droidpool_pool_pinned_clients",
            &[("database", "ss_seen"), ("user", USER)],
        )
    };
    assert_eq!(pinned(&m), 1.0, "{m}");

    let mut b = Raw::connect(p.port(), USER, "ss_seen").await;
    let started = std::time::Instant::now();
    let got = b.query("select 1").await;
    assert_eq!(tags(&got), "EZ", "B waited for the pinned server");
    assert_eq!(sqlstate(&got[0]), "57014");
    let text = String::from_utf8_lossy(got[0].body()).into_owned();
    assert!(
        text.contains(
            "1 of the pool's 1 servers are held by clients pinned by session state (temp_table: 1)"
        ),
        "{text}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));

    drop(a);
    assert_eq!(tags(&b.query("select 1").await), "TDCZ");
    assert_eq!(pinned(&scrape(&p)), 0.0);
}

/// Statement mode runs no server past a statement, so what `pin` would need is refused
/// with 0A000 (simple and extended protocol), as transaction blocks are; other statements,
/// look-alikes included, run, and the session stays usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statement_mode_refuses_session_state() {
    use crate::support::raw::{batch, bind, execute, parse, sqlstate, sync, tags, Raw};
    let p = start_with("ss_stmt", 1, "statement", "20s");
    let mut a = Raw::connect(p.port(), USER, "ss_stmt").await;
    for sql in [
        "SET search_path TO x",
        "create temp table t (a int)",
        "select pg_advisory_lock(1)",
        "PREPARE q AS select 1",
        "LISTEN ch",
        "declare c cursor with hold for select 1",
    ] {
        let got = a.query(sql).await;
        assert_eq!(tags(&got), "EZ", "{sql}");
        assert_eq!(sqlstate(&got[0]), "0A000", "{sql}");
        assert_eq!(
            tags(&a.query("select 'SET x'").await),
            "TDCZ",
            "after {sql}"
        );
    }
    // Extended: the Parse is refused and the rest skipped to Sync.
    a.send(&batch(&[
        parse("", "SET search_path TO x"),
        bind("", "", &[]),
        execute(""),
        sync(),
    ]))
    .await;
    let got = a.until_ready().await;
    assert_eq!(tags(&got), "EZ");
    assert_eq!(sqlstate(&got[0]), "0A000");
    // Nothing pinned: another client runs on the one server meanwhile.
    let mut b = Raw::connect(p.port(), USER, "ss_stmt").await;
    assert_eq!(tags(&b.query("show search_path").await), "TDCZ");
    let m = scrape(&p);
    assert!(!m.contains("droidpool_session_pins_total{"), "{m}");
    assert_eq!(
        metric_or_zero(&m, "droidpool_pooler_errors_total", &[("class", "0A")]),
        7.0
    );
}

/// Whether B can run on the only server while A stays connected (A is not pinned to it).
async fn b_runs(b: &mut crate::support::raw::Raw) -> bool {
    b.send(&crate::support::raw::query("select 1")).await;
    if still_waits(b).await {
        return false;
    }
    b.until_ready().await;
    true
}

/// B's query, sent while A was pinned, is still unanswered.
async fn still_waits(b: &mut crate::support::raw::Raw) -> bool {
    b.silent_for(Duration::from_millis(600)).await
}

fn pinned_clients(p: &Pooler, db: &str) -> f64 {
    metric_or_zero(
        &scrape(p),
        "droidpool_pool_pinned_clients",
        &[("database", db), ("user", USER)],
    )
}

/// A pin ends once the client's own statement removes all it made: `RESET ALL` after a
/// `SET`, `DISCARD TEMP` after a temp table, `DISCARD ALL` after anything (but `LOAD`).
/// Removal inside a transaction block, or one that fails, keeps the pin (it may be undone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pin_ends_when_the_client_removes_its_state() {
    use crate::support::raw::{batch, first_col, query, tags, Raw};
    let p = start_with("ss_unpin", 1, "transaction", "20s");
    let mut a = Raw::connect(p.port(), USER, "ss_unpin").await;
    let mut b = Raw::connect(p.port(), USER, "ss_unpin").await;
    let pinned = |p: &Pooler| pinned_clients(p, "ss_unpin");

    // (A ParameterStatus may come before the CommandComplete.)
    let got = a.query("SET search_path TO a_unpin, public").await;
    assert!(tags(&got).ends_with("CZ"), "{}", tags(&got));
    assert!(!b_runs(&mut b).await, "A's SET pins");
    // B's query waits for A's server: A's own statements still run, in order, before B.
    let got = a.query("RESET ALL").await;
    assert!(tags(&got).ends_with("CZ"), "{}", tags(&got));
    b.until_ready().await;
    assert_eq!(pinned(&p), 0.0);
    assert!(b_runs(&mut b).await, "RESET ALL ended the pin");

    // A temp table, then RESET ALL: still pinned (the table is there).
    assert_eq!(
        tags(&a.query("create temp table t_unpin (a int)").await),
        "CZ"
    );
    assert!(tags(&a.query("RESET ALL").await).ends_with("CZ"));
    assert!(
        !b_runs(&mut b).await,
        "RESET ALL does not remove a temp table"
    );
    // DISCARD TEMP inside a block that rolls back: still pinned.
    a.send(&batch(&[
        query("BEGIN"),
        query("DISCARD TEMP"),
        query("ROLLBACK"),
    ]))
    .await;
    for _ in 0..3 {
        a.until_ready().await;
    }
    assert_eq!(
        tags(&a.query("select count(*) from t_unpin").await),
        "TDCZ",
        "the rolled-back DISCARD TEMP left the table"
    );
    // A failed DISCARD ALL (in a block: 25001) keeps it too.
    let got = a.query("BEGIN; DISCARD ALL").await;
    assert!(tags(&got).contains('E'), "{}", tags(&got));
    a.query("ROLLBACK").await;
    assert_eq!(pinned(&p), 1.0);
    // DISCARD ALL, alone: the pin ends and B gets the server.
    assert_eq!(tags(&a.query("DISCARD ALL").await), "CZ");
    b.until_ready().await;
    assert!(b_runs(&mut b).await);
    assert_eq!(pinned(&p), 0.0);
    let got = b
        .query("select count(*) from pg_class where relname = 't_unpin'")
        .await;
    assert_eq!(
        first_col(&got[1]).as_deref(),
        Some("0"),
        "A's table reached B"
    );
}

/// A pin ends with the last piece of its state, however it goes: `CLOSE` of one cursor,
/// `DROP` of one temp table, `pg_advisory_unlock` of one lock (locks count, as PostgreSQL
/// counts them), a block that rolls back what pinned, a pinning statement that fails. The
/// server is asked what is left once the transaction is over; while anything is left (the
/// other cursor, table or lock, or a drop that rolled back) the client keeps its server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pin_ends_with_the_last_piece_of_its_state_pin() {
    the_last_piece_ends_the_pin("pin").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pin_ends_with_the_last_piece_of_its_state_track() {
    the_last_piece_ends_the_pin("track").await;
}

async fn the_last_piece_ends_the_pin(state: &str) {
    use crate::support::raw::{batch, bind, execute, first_col, parse, sync, tags, Raw};
    let db = format!("ss_piece_{state}");
    let p = start_state(&db, 1, "transaction", "20s", state);
    let mut a = Raw::connect(p.port(), USER, &db).await;
    let mut b = Raw::connect(p.port(), USER, &db).await;
    let pinned = |p: &Pooler| pinned_clients(p, &db);
    async fn ok(a: &mut Raw, sql: &str) {
        let got = a.query(sql).await;
        assert!(!tags(&got).contains('E'), "{sql}: {}", tags(&got));
    }
    let pid = |f: Vec<droid_pool::protocol::frame::Frame>| first_col(&f[1]).expect("a pid");
    let pid_a = pid(a.query("select pg_backend_pid()").await);

    // Two WITH HOLD cursors: closing one keeps the pin, closing both ends it.
    ok(&mut a, "declare c1 cursor with hold for select 1").await;
    ok(&mut a, "declare c2 cursor with hold for select 2").await;
    assert!(!b_runs(&mut b).await, "a WITH HOLD cursor pins");
    // An unnamed statement made before the check is still there after it (the check is
    // not a simple Query, which would drop it): A closes c1 through a named statement.
    a.send(&batch(&[parse("", "select 42"), sync()])).await;
    a.until_ready().await;
    a.send(&batch(&[
        parse("s_close", "close c1"),
        bind("", "s_close", &[]),
        execute(""),
        sync(),
    ]))
    .await;
    let got = a.until_ready().await;
    assert!(!tags(&got).contains('E'), "{}", tags(&got));
    assert!(still_waits(&mut b).await, "c2 is still open");
    a.send(&batch(&[bind("", "", &[]), execute(""), sync()]))
        .await;
    let got = a.until_ready().await;
    assert_eq!(tags(&got), "2DCZ");
    assert_eq!(first_col(&got[1]).as_deref(), Some("42"));
    let got = a.query("fetch c2").await;
    assert_eq!(
        first_col(&got[1]).as_deref(),
        Some("2"),
        "A keeps its cursor"
    );
    ok(&mut a, "close c2").await;
    b.until_ready().await;
    assert_eq!(pinned(&p), 0.0, "no cursor is left");
    assert!(b_runs(&mut b).await);

    // One lock taken twice: PostgreSQL counts it, so one unlock leaves it held.
    ok(&mut a, "select pg_advisory_lock(71)").await;
    ok(&mut a, "select pg_advisory_lock(71)").await;
    assert!(!b_runs(&mut b).await, "a session advisory lock pins");
    ok(&mut a, "select pg_advisory_unlock(71)").await;
    // An unlock of a lock not held (a warning, false) changes nothing.
    ok(&mut a, "select pg_advisory_unlock(72)").await;
    assert!(still_waits(&mut b).await, "the lock is held once more");
    ok(&mut a, "select pg_advisory_unlock(71)").await;
    b.until_ready().await;
    assert_eq!(pinned(&p), 0.0, "no lock is left");
    assert!(b_runs(&mut b).await);

    // Two temp tables, a drop that rolls back, a cursor beside them.
    ok(&mut a, "create temp table t_piece1 (a int)").await;
    ok(&mut a, "create temp table t_piece2 (a int)").await;
    ok(&mut a, "declare c3 cursor with hold for select 3").await;
    assert!(!b_runs(&mut b).await, "a temp table pins");
    ok(&mut a, "drop table t_piece1").await;
    ok(&mut a, "begin; drop table t_piece2; rollback").await;
    ok(&mut a, "select count(*) from t_piece2").await;
    ok(&mut a, "drop table t_piece2").await;
    assert!(still_waits(&mut b).await, "the cursor is still open");
    ok(&mut a, "close c3").await;
    b.until_ready().await;
    assert_eq!(pinned(&p), 0.0, "nothing is left");
    assert!(b_runs(&mut b).await);

    // What pinned and then rolled back, or failed, made nothing.
    ok(
        &mut a,
        "begin; create temp table t_piece3 (a int); rollback",
    )
    .await;
    assert!(b_runs(&mut b).await, "a rolled-back creation does not pin");
    let got = a.query("create temp table t_piece4 (a no_such_type)").await;
    assert!(tags(&got).contains('E'), "{}", tags(&got));
    assert!(b_runs(&mut b).await, "a failed creation does not pin");
    assert_eq!(pinned(&p), 0.0);

    // Same backend throughout (one server), and every check was the pooler's own: B, on
    // it now, sees none of A's state. (Only this backend's: other tests hold advisory locks
    // in the same cluster meanwhile.)
    let got = b.query("select pg_backend_pid()").await;
    assert_eq!(first_col(&got[1]), Some(pid_a));
    let got = b
        .query(
            "select (select count(*) from pg_cursors) + (select count(*) from pg_locks \
             where locktype = 'advisory' and pid = pg_backend_pid()) + (select count(*) \
             from pg_class where relname like 't_piece%' \
             and relnamespace = pg_my_temp_schema())",
        )
        .await;
    assert_eq!(first_col(&got[1]).as_deref(), Some("0"));
}

/// `session_state` per `databases:` alias and per `users:` entry, over `pool.session_state`
/// (`off` here): through the pinning alias a `SET` keeps the only server; through the plain
/// database it does not; the user's value comes over the alias's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_state_per_database_and_per_user() {
    use crate::support::raw::{tags, Raw};
    let pg = support::shared();
    create_db(pg, "ss_per");
    let yaml = "pool:\n  size: 1\n  mode: transaction\n  query_wait_timeout: 20s\n\
                databases:\n  ss_per_pin:\n    dbname: ss_per\n    session_state: pin\n";
    let p = block_in_place(|| Pooler::start_with_config(pg, yaml, &[]));
    // Whether `b` runs a query while `a` stays connected after its SET.
    async fn set_keeps_server(p: &Pooler, db: &str) -> bool {
        let mut a = Raw::connect(p.port(), USER, db).await;
        let mut b = Raw::connect(p.port(), USER, db).await;
        assert!(tags(&a.query("SET search_path TO per_x, public").await).ends_with("CZ"));
        b.send(&crate::support::raw::query("select 1")).await;
        let kept = b.silent_for(Duration::from_millis(600)).await;
        drop(a);
        b.until_ready().await;
        kept
    }
    assert!(set_keeps_server(&p, "ss_per_pin").await, "the alias pins");
    assert!(!set_keeps_server(&p, "ss_per").await, "the default is off");

    // A users: entry overrides the alias (the shared pooler's user settings).
    let yaml = format!("{yaml}users:\n  {USER}:\n    session_state: \"off\"\n");
    let p = block_in_place(|| Pooler::start_with_config(pg, &yaml, &[]));
    assert!(
        !set_keeps_server(&p, "ss_per_pin").await,
        "the user's off wins"
    );
}

/// Under `pin`, asyncpg's reset block (`UNLISTEN *` when `pg_listening_channels()` lists a
/// channel) ends a `LISTEN` pin: the server did unlisten, so another client may have it, and
/// it listens on nothing. With one server, B waits while A is pinned and runs once A's block
/// has run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asyncpgs_unlisten_block_ends_a_listen_pin() {
    let db = "ss_unlisten_do";
    let p = start(db, 1);
    let a = p.connect(USER, db).await;
    a.simple_query("LISTEN ch").await.unwrap();
    let b = p.connect(USER, db).await;
    let waiting = tokio::spawn(async move {
        let listening = one(&b, "select count(*) from pg_listening_channels()").await;
        (b, listening)
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        !waiting.is_finished(),
        "B ran while A was pinned by its LISTEN"
    );
    a.simple_query(
        "DO $$ BEGIN PERFORM * FROM pg_listening_channels() LIMIT 1; \
         IF FOUND THEN UNLISTEN *; END IF; END $$",
    )
    .await
    .unwrap();
    let (_b, listening) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("B got the server once A's block unlistened")
        .unwrap();
    assert_eq!(listening, "0", "the server B got listens on nothing");
}
