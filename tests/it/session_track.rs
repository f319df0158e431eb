//! `pool.session_state: track` against a real PostgreSQL: a client's settings follow it onto
//! whichever server it gets (the backend pid is asserted to change), no other client ever
//! runs under them, a client that sets something is not pinned, and what the pooler cannot
//! follow (a setting in a named statement without `track_prepared`, `SET ROLE`) pins
//! instead of leaking.

use std::time::Duration;

use tokio::task::block_in_place;

use crate::core::create_db;
use crate::session_state::one;
use crate::support::metrics::{metric_or_zero, scrape};
use crate::support::raw::{
    batch, bind, close, describe, execute, first_col, parse, query, sync, tags, Raw,
};
use crate::support::{self, Pooler};

const USER: &str = "droid";

fn start(db: &str, size: usize) -> Pooler {
    start_in(db, size, "transaction")
}

fn start_in(db: &str, size: usize, mode: &str) -> Pooler {
    let pg = support::shared();
    create_db(pg, db);
    let yaml = format!(
        "server:\n  connect_timeout: 500ms\npool:\n  size: {size}\n  mode: {mode}\n  \
         session_state: track\n  query_wait_timeout: 20s\nauth:\n  user_methods:\n    \
         {USER}: trust\n"
    );
    block_in_place(|| Pooler::start_with_config(pg, &yaml, &[]))
}

async fn raw_one(a: &mut Raw, sql: &str) -> String {
    a.send(&query(sql)).await;
    let f = a.until_ready().await;
    let row = f.iter().find(|f| f.tag == b'D').expect("a row");
    first_col(row).expect("a value")
}

fn pinned(p: &Pooler, db: &str) -> f64 {
    metric_or_zero(
        &scrape(p),
        "droidpool_pool_pinned_clients",
        &[("database", db), ("user", USER)],
    )
}

/// With two servers: A sets two things and prepares a statement, B holds the server A used,
/// and A's next transaction runs on the other backend with A's settings and statement; once A has left, both servers
/// are back at the defaults for the next clients. A is never pinned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_follow_the_client_to_another_server() {
    let db = "tr_follow";
    let p = start(db, 2);
    let a = p.connect(USER, db).await;
    let pid_set = one(
        &a,
        "SET work_mem = '3MB'; SET search_path TO tr_a, public; PREPARE tr_q AS select 40 + 2; \
         select pg_backend_pid()",
    )
    .await;
    assert_eq!(pinned(&p, db), 0.0, "a SET does not pin under track");

    // B takes whichever server is idle first and keeps it in a block; A then needs the other
    // one. Repeat until B's block sits on A's old server (the pool's order is not assumed).
    let b = p.connect(USER, db).await;
    let mut moved = false;
    for _ in 0..10 {
        let pid_b = one(&b, "begin; select pg_backend_pid()").await;
        let (mem, path, pid_a) = (
            one(&a, "show work_mem").await,
            one(&a, "show search_path").await,
            one(&a, "select pg_backend_pid()").await,
        );
        assert_eq!((mem.as_str(), path.as_str()), ("3MB", "tr_a, public"));
        // A statement A prepared on its first server runs wherever A is.
        assert_eq!(one(&a, "EXECUTE tr_q").await, "42");
        // B's server has no statement of A's.
        assert!(b.simple_query("EXECUTE tr_q").await.is_err());
        b.simple_query("rollback; begin").await.unwrap();
        assert_eq!(one(&b, "select pg_backend_pid()").await, pid_b);
        // B's server has none of A's settings inside B's block.
        assert_eq!(one(&b, "show work_mem").await, "4MB");
        assert_eq!(one(&b, "show search_path").await, "\"$user\", public");
        b.simple_query("commit").await.unwrap();
        if pid_b == pid_set {
            assert_ne!(pid_a, pid_set, "A ran on the server B held");
            moved = true;
            break;
        }
    }
    assert!(moved, "B never took the server A had set on");
    let replays = metric_or_zero(
        &scrape(&p),
        "droidpool_session_replays_total",
        &[("kind", "setting")],
    );
    assert!(replays >= 2.0, "replays counted: {replays}");
    let prepares = metric_or_zero(
        &scrape(&p),
        "droidpool_session_replays_total",
        &[("kind", "prepare")],
    );
    assert!(prepares >= 1.0, "statement replays counted: {prepares}");
    drop(a);
    drop(b);
    tokio::time::sleep(Duration::from_millis(200)).await;

    // Two clients hold both servers at once: neither has anything of A's.
    let c1 = p.connect(USER, db).await;
    let c2 = p.connect(USER, db).await;
    let p1 = one(&c1, "begin; select pg_backend_pid()").await;
    let p2 = one(&c2, "begin; select pg_backend_pid()").await;
    assert_ne!(p1, p2);
    for c in [&c1, &c2] {
        assert_eq!(one(c, "show work_mem").await, "4MB");
        assert_eq!(one(c, "show search_path").await, "\"$user\", public");
        c.simple_query("commit").await.unwrap();
    }
}

/// One server shared by two clients with different settings, in turn: each always sees its
/// own, and the server is brought back and forth (never pinned, never leaked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_server_two_clients_each_sees_its_own() {
    let db = "tr_one";
    let p = start(db, 1);
    let a = p.connect(USER, db).await;
    let b = p.connect(USER, db).await;
    a.simple_query("SET statement_timeout = '7s'")
        .await
        .unwrap();
    let pid = one(&a, "select pg_backend_pid()").await;
    for _ in 0..3 {
        assert_eq!(one(&b, "show statement_timeout").await, "0");
        assert_eq!(one(&b, "select pg_backend_pid()").await, pid);
        assert_eq!(one(&a, "show statement_timeout").await, "7s");
    }
    b.simple_query("SET statement_timeout = '9s'")
        .await
        .unwrap();
    assert_eq!(one(&a, "show statement_timeout").await, "7s");
    assert_eq!(one(&b, "show statement_timeout").await, "9s");
    a.simple_query("RESET statement_timeout").await.unwrap();
    assert_eq!(one(&a, "show statement_timeout").await, "0");
    assert_eq!(one(&b, "show statement_timeout").await, "9s");
    assert_eq!(pinned(&p, db), 0.0);
}

/// The extended protocol: an unnamed statement's SET counts once executed, a failed batch
/// undoes the SET in it, and a SET prepared under a name pins (it may run any time later).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extended_protocol_settings() {
    let db = "tr_ext";
    let p = start(db, 1);
    let mut a = Raw::connect(p.port(), USER, db).await;
    let b = p.connect(USER, db).await;
    let run = |sql: &str| batch(&[parse("", sql), bind("", "", &[]), execute(""), sync()]);
    a.send(&run("SET work_mem = '5MB'")).await;
    assert_eq!(tags(&a.until_ready().await), "12CZ");
    assert_eq!(one(&b, "show work_mem").await, "4MB");
    assert_eq!(raw_one(&mut a, "show work_mem").await, "5MB");

    // SET then an error before Sync: one implicit transaction, undone whole.
    let mut failed = run("SET work_mem = '6MB'");
    failed.truncate(failed.len() - 5);
    failed.extend_from_slice(&batch(&[
        parse("", "select 1/0"),
        bind("", "", &[]),
        execute(""),
        sync(),
    ]));
    a.send(&failed).await;
    assert_eq!(tags(&a.until_ready().await), "12C1EZ");
    assert_eq!(one(&b, "show work_mem").await, "4MB");
    assert_eq!(raw_one(&mut a, "show work_mem").await, "5MB");
    assert_eq!(pinned(&p, db), 0.0);

    // Parsed but never executed: nothing changes.
    a.send(&batch(&[parse("", "SET work_mem = '8MB'"), sync()]))
        .await;
    a.until_ready().await;
    assert_eq!(raw_one(&mut a, "show work_mem").await, "5MB");

    // A named statement with a SET pins A; B then waits for the only server.
    a.send(&batch(&[parse("tr_set", "SET work_mem = '9MB'"), sync()]))
        .await;
    a.until_ready().await;
    assert_eq!(pinned(&p, db), 1.0);
    let waiting = tokio::spawn(async move { one(&b, "show work_mem").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "B ran while A is pinned");
    drop(a);
    assert_eq!(waiting.await.unwrap(), "4MB");
}

/// With `track_prepared`, a `SET` in a named statement (tokio-postgres and sqlx prepare
/// every statement so) is followed as one in the unnamed statement is: it counts when a
/// portal bound to it runs, in whichever later transaction and on whichever server (the
/// statement made there first), a run in a block that rolls back counts for nothing, and
/// nobody is pinned. Another client, and the next one, find the defaults.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setting_in_a_named_statement_is_followed() {
    let db = "tr_named";
    let p = start_prepared(db, 2);
    let a = p.connect(USER, db).await;
    let mut b = Raw::connect(p.port(), USER, db).await;
    let default_mem = one(&a, "show work_mem").await;
    let default_path = one(&a, "show search_path").await;
    // Prepared under a name and run at once.
    a.execute("SET search_path TO tr_n, public", &[])
        .await
        .unwrap();
    // Prepared now, run later.
    let set_mem = a.prepare("SET work_mem = '7MB'").await.unwrap();
    let set_more = a.prepare("SET work_mem = '9MB'").await.unwrap();
    assert_eq!(
        one(&a, "show work_mem").await,
        default_mem,
        "parsed, not run"
    );
    let first = one(&a, "select pg_backend_pid()").await;

    // B takes the server A used last and holds it: A's next transactions run on the other.
    b.send(&query("begin")).await;
    b.until_ready().await;
    assert_eq!(raw_one(&mut b, "select pg_backend_pid()").await, first);
    a.execute(&set_mem, &[]).await.unwrap();
    assert_ne!(one(&a, "select pg_backend_pid()").await, first);
    assert_eq!(one(&a, "show work_mem").await, "7MB");
    assert_eq!(one(&a, "show search_path").await, "tr_n, public");
    // Run in a block that rolls back: undone.
    a.batch_execute("begin").await.unwrap();
    a.execute(&set_more, &[]).await.unwrap();
    a.batch_execute("rollback").await.unwrap();
    assert_eq!(one(&a, "show work_mem").await, "7MB");
    b.send(&query("commit")).await;
    b.until_ready().await;

    // B on the server A used last, and D on the other: the defaults.
    let mut d = Raw::connect(p.port(), USER, db).await;
    for c in [&mut b, &mut d] {
        c.send(&query("begin")).await;
        c.until_ready().await;
        assert_eq!(raw_one(c, "show work_mem").await, default_mem);
        assert_eq!(raw_one(c, "show search_path").await, default_path);
    }
    for c in [&mut b, &mut d] {
        c.send(&query("commit")).await;
        c.until_ready().await;
    }
    assert_eq!(one(&a, "show work_mem").await, "7MB");
    let pins = metric_or_zero(
        &scrape(&p),
        "droidpool_session_pins_total",
        &[("reason", "setting")],
    );
    assert_eq!(pins, 0.0, "nobody pinned for a setting");
    drop(a);
    let c = p.connect(USER, db).await;
    assert_eq!(one(&c, "show work_mem").await, default_mem);
    assert_eq!(one(&c, "show search_path").await, default_path);
}

/// `SET ROLE` pins (it is not replayed): the role never reaches another client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_role_pins() {
    let db = "tr_role";
    let p = start(db, 1);
    let a = p.connect(USER, db).await;
    a.simple_query("SET ROLE pg_monitor").await.unwrap();
    assert_eq!(one(&a, "select current_user").await, "pg_monitor");
    assert_eq!(pinned(&p, db), 1.0);
    drop(a);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let b = p.connect(USER, db).await;
    assert_eq!(one(&b, "select current_user").await, USER);
}

/// Statement mode: every statement may run on another server, and settings follow; what
/// would pin is refused with 0A000 and the session goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statement_mode_replays_settings_and_refuses_pins() {
    let db = "tr_stmt";
    let p = start_in(db, 2, "statement");
    let a = p.connect(USER, db).await;
    let b = p.connect(USER, db).await;
    a.simple_query("SET work_mem = '3MB'").await.unwrap();
    for _ in 0..4 {
        assert_eq!(one(&a, "show work_mem").await, "3MB");
        assert_eq!(one(&b, "show work_mem").await, "4MB");
    }
    let e = a
        .simple_query("create temp table tr_t (a int)")
        .await
        .unwrap_err();
    assert_eq!(e.code().map(|c| c.code()), Some("0A000"), "{e}");
    assert_eq!(one(&a, "show work_mem").await, "3MB");
}

/// `users.<name>.session_state` is reloadable: a pool started with `off` follows settings
/// from the next transaction after a reload sets `track` for the user (with `off`, A's SET
/// would reach B on the only server).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_turns_track_on_for_a_user() {
    let db = "tr_reload";
    let pg = support::shared();
    create_db(pg, db);
    let yaml = |state: &str| {
        format!(
            "pool:\n  size: 1\n  mode: transaction\n  query_wait_timeout: 20s\n\
             users:\n  {USER}:\n    session_state: {state}\n\
             auth:\n  user_methods:\n    {USER}: trust\n"
        )
    };
    let p = block_in_place(|| Pooler::start_with_config(pg, &yaml("\"off\""), &[]));
    let a = p.connect(USER, db).await;
    let b = p.connect(USER, db).await;
    assert_eq!(one(&a, "show work_mem").await, "4MB");
    p.reload_with(&yaml("track"));
    tokio::time::sleep(Duration::from_millis(1000)).await;
    a.simple_query("SET work_mem = '3MB'").await.unwrap();
    assert_eq!(one(&b, "show work_mem").await, "4MB");
    assert_eq!(one(&a, "show work_mem").await, "3MB");
    assert_eq!(pinned(&p, db), 0.0);
}

/// A pooler in transaction mode with `track_prepared` and `session_state: track`, `size`
/// servers, on a new database `db`.
fn start_prepared(db: &str, size: usize) -> Pooler {
    let pg = support::shared();
    create_db(pg, db);
    let yaml = format!(
        "pool:\n  size: {size}\n  mode: transaction\n  track_prepared: true\n  \
         session_state: track\nauth:\n  user_methods:\n    {USER}: trust\n"
    );
    block_in_place(|| Pooler::start_with_config(pg, &yaml, &[]))
}

/// One step's answer: its message tags, SQLSTATEs, DataRows' first columns and the closing
/// transaction status.
type Answer = (String, Vec<String>, Vec<String>, Option<u8>);

/// Runs `steps` on one new connection to `port`, each to its ReadyForQuery.
async fn answers(port: u16, db: &str, steps: &[Vec<u8>]) -> Vec<Answer> {
    let mut c = Raw::connect(port, USER, db).await;
    let mut run = Vec::new();
    for step in steps {
        run.push(answer(&mut c, step).await);
    }
    run
}

/// Sends `step` and reads its answer to the ReadyForQuery.
async fn answer(c: &mut Raw, step: &[u8]) -> Answer {
    c.send(step).await;
    let frames = c.until_ready().await;
    let of = |tag: u8| frames.iter().filter(move |f| f.tag == tag);
    let codes = of(b'E').map(crate::support::raw::sqlstate).collect();
    let values = of(b'D').filter_map(first_col).collect();
    let status = frames.last().map(|f| f.body()[0]);
    (tags(&frames), codes, values, status)
}

/// Runs `steps` on two new connections to `port`, each on the client's own connection
/// (`true`) or on the other one, each to its ReadyForQuery. Returns the answers, and the
/// client's backend pid after each of its steps that left it idle.
async fn answers_of_two(
    port: u16,
    db: &str,
    steps: &[(bool, Vec<u8>)],
) -> (Vec<Answer>, Vec<String>) {
    let mut own = Raw::connect(port, USER, db).await;
    let mut other = Raw::connect(port, USER, db).await;
    let mut run = Vec::new();
    let mut pids = Vec::new();
    for (mine, step) in steps {
        let c = if *mine { &mut own } else { &mut other };
        let a = answer(c, step).await;
        let idle = a.3 == Some(b'I');
        run.push(a);
        if *mine && idle {
            pids.push(raw_one(&mut own, "select pg_backend_pid()").await);
        }
    }
    (run, pids)
}

/// Whether the pids the client reported name more than one server.
fn moved(pids: &[String]) -> bool {
    let mut distinct = pids.to_vec();
    distinct.sort();
    distinct.dedup();
    distinct.len() > 1
}

/// `DEALLOCATE name` in SQL of a statement the client made with Parse (psycopg 3 with libpq
/// before 17 evicts its statements so) does what it does directly, with
/// `--track-prepared`: the statement is gone, its name is free again, a use of it or a second
/// `DEALLOCATE` is 26000; in a transaction block too. The same sequence runs directly and
/// through the pooler, and each step's messages and SQLSTATEs must be the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_deallocate_of_a_protocol_statement() {
    let db = "tr_dealloc";
    let pg = support::shared();
    let p = start_prepared(db, 2);
    let use_it = || batch(&[bind("", "ps_q", &[]), execute(""), sync()]);
    let steps: Vec<Vec<u8>> = vec![
        batch(&[parse("ps_q", "select 41 + 1"), sync()]),
        use_it(),
        query("DEALLOCATE ps_q").to_vec(),
        use_it(),
        batch(&[parse("ps_q", "select 40 + 2"), sync()]),
        query("deallocate prepare \"ps_q\"").to_vec(),
        query("DEALLOCATE ps_q").to_vec(),
        query("BEGIN").to_vec(),
        batch(&[parse("ps_q", "select 42"), sync()]),
        query("DEALLOCATE PS_Q").to_vec(),
        use_it(),
        query("ROLLBACK").to_vec(),
        // In a failed block: refused (25P02), and the statement is still there after it.
        batch(&[parse("ps_q", "select 43"), sync()]),
        query("BEGIN").to_vec(),
        query("select 1/0").to_vec(),
        query("DEALLOCATE ps_q").to_vec(),
        query("ROLLBACK").to_vec(),
        use_it(),
    ];
    let seen = [
        answers(pg.port, db, &steps).await,
        answers(p.port(), db, &steps).await,
    ];
    assert_eq!(
        seen[0][2],
        ("CZ".into(), vec![], vec![], Some(b'I')),
        "direct"
    );
    assert_eq!(seen[0][3].1, vec!["26000".to_owned()], "direct");
    assert_eq!(seen[0][15].1, vec!["25P02".to_owned()], "direct");
    assert_eq!(
        seen[0][17].0, "2DCZ",
        "direct: kept through the refused DEALLOCATE"
    );
    assert_eq!(seen[1], seen[0], "through the pooler, as directly");
}

/// A statement the client drops while it holds a server (`DEALLOCATE name` in SQL, as
/// psycopg 3 evicts, or Close S) leaves that server too: the server lists only what the
/// client still has, as it does directly (psycopg's `test_evict_lru_deallocate` reads
/// `pg_prepared_statements`), also after it made the name again. The same steps run
/// directly and through the pooler with `session_state: track`, and each step's messages,
/// values and SQLSTATEs must be the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_statement_leaves_the_held_server() {
    let db = "tr_dropped";
    let pg = support::shared();
    let p = start_prepared(db, 1);
    let listed = || {
        query("select count(*)::text || ':' || coalesce(string_agg(statement, ',' order by statement), '') from pg_prepared_statements")
    };
    let steps: Vec<Vec<u8>> = vec![
        query("BEGIN").to_vec(),
        batch(&[
            parse("ps_a", "select 1"),
            parse("ps_b", "select 2"),
            parse("ps_c", "select 3"),
            sync(),
        ]),
        listed().to_vec(),
        query("DEALLOCATE ps_a").to_vec(),
        batch(&[close(b'S', "ps_b"), sync()]),
        listed().to_vec(),
        // Made again under a dropped name: the new one is listed, and dropped in turn.
        batch(&[parse("ps_a", "select 4"), sync()]),
        listed().to_vec(),
        query("deallocate \"ps_a\"").to_vec(),
        listed().to_vec(),
        query("COMMIT").to_vec(),
        batch(&[bind("", "ps_a", &[]), execute(""), sync()]),
        batch(&[bind("", "ps_b", &[]), execute(""), sync()]),
        batch(&[bind("", "ps_c", &[]), execute(""), sync()]),
        // A name that needs quoting: a quote and a space.
        query("BEGIN").to_vec(),
        batch(&[parse("we\"ird x", "select 5"), sync()]),
        query("DEALLOCATE \"we\"\"ird x\"").to_vec(),
        listed().to_vec(),
        query("COMMIT").to_vec(),
    ];
    let seen = [
        answers(pg.port, db, &steps).await,
        answers(p.port(), db, &steps).await,
    ];
    assert_eq!(seen[0][2].2, vec!["3:select 1,select 2,select 3"], "direct");
    assert_eq!(
        seen[0][16],
        ("CZ".into(), vec![], vec![], Some(b'T')),
        "direct"
    );
    assert_eq!(seen[0][17].2, vec!["1:select 3"], "direct");
    assert_eq!(seen[0][5].2, vec!["1:select 3"], "direct");
    assert_eq!(seen[0][9].2, vec!["1:select 3"], "direct");
    assert_eq!(seen[0][11].1, vec!["26000".to_owned()], "direct");
    assert_eq!(seen[0][13].2, vec!["3"], "direct");
    assert_eq!(seen[1], seen[0], "through the pooler, as directly");
}

/// SQL `EXECUTE name` of a statement the client made with Parse (asyncpg's
/// `prepare(name=...)` then `EXECUTE`) does what it does directly, with `--track-prepared`:
/// it runs on a server that has the statement, and on one that lacks it (replayed first); a
/// replay that fails (its table dropped) answers the one error the EXECUTE gets directly,
/// outside and inside a block. Another client holds the server the client just used, so its
/// next transaction runs elsewhere (the backend pid is asserted to change). Each step's
/// messages, SQLSTATEs and values must be the same as directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_execute_of_a_protocol_statement() {
    let db = "tr_execute";
    let pg = support::shared();
    let p = start_prepared(db, 2);
    // (own step, or the other client's) in order.
    let steps: Vec<(bool, Vec<u8>)> = vec![
        (true, batch(&[parse("ps_x", "select 41 + 1"), sync()])),
        (true, query("EXECUTE ps_x").to_vec()),
        (false, query("BEGIN").to_vec()),
        (true, query(" /* moved */ execute \"ps_x\"").to_vec()),
        (false, query("ROLLBACK").to_vec()),
        (true, batch(&[parse("ps_y", "select $1::int + 1"), sync()])),
        (true, query("EXECUTE ps_y(41)").to_vec()),
        (true, query("EXECUTE ps_nope").to_vec()),
        (true, query("create table ex_t(a int)").to_vec()),
        (
            true,
            batch(&[parse("ps_t", "select count(*) from ex_t"), sync()]),
        ),
        (true, query("EXECUTE ps_t").to_vec()),
        (true, query("drop table ex_t").to_vec()),
        (false, query("BEGIN").to_vec()),
        (true, query("EXECUTE ps_t").to_vec()),
        (true, query("EXECUTE ps_x").to_vec()),
        (false, query("ROLLBACK").to_vec()),
        (true, query("create table ex_u(a int)").to_vec()),
        (
            true,
            batch(&[parse("ps_u", "select count(*) from ex_u"), sync()]),
        ),
        (true, query("drop table ex_u").to_vec()),
        (false, query("BEGIN").to_vec()),
        (true, query("BEGIN").to_vec()),
        (true, query("EXECUTE ps_u").to_vec()),
        (true, query("select 1").to_vec()),
        (true, query("ROLLBACK").to_vec()),
        (false, query("ROLLBACK").to_vec()),
        (true, query("EXECUTE ps_x").to_vec()),
        // Extended protocol: a statement whose text is the EXECUTE (asyncpg's way), used in
        // the same batch and, later, on another server (both statements replayed there).
        (
            true,
            batch(&[
                parse("ps_z", "select 6 * 7"),
                parse("ps_e", "EXECUTE ps_z"),
                bind("", "ps_e", &[]),
                execute(""),
                sync(),
            ]),
        ),
        (false, query("BEGIN").to_vec()),
        (true, batch(&[bind("", "ps_e", &[]), execute(""), sync()])),
        (false, query("ROLLBACK").to_vec()),
        (
            true,
            batch(&[
                parse("", "execute ps_y(1)"),
                bind("", "", &[]),
                execute(""),
                sync(),
            ]),
        ),
    ];
    let (direct, _) = answers_of_two(pg.port, db, &steps).await;
    let (pooled, pids) = answers_of_two(p.port(), db, &steps).await;
    let seen = [direct, pooled];
    assert_eq!(seen[0][1].2, vec!["42".to_owned()], "direct");
    assert_eq!(seen[0][7].1, vec!["26000".to_owned()], "direct");
    assert_eq!(seen[0][13].1, vec!["42P01".to_owned()], "direct");
    assert_eq!(seen[0][21].1, vec!["42P01".to_owned()], "direct");
    assert_eq!(seen[0][22].1, vec!["25P02".to_owned()], "direct");
    assert_eq!(seen[0][26].2, vec!["42".to_owned()], "direct");
    assert_eq!(seen[0][28].2, vec!["42".to_owned()], "direct");
    assert_eq!(seen[0][30].2, vec!["2".to_owned()], "direct");
    assert_eq!(seen[1], seen[0], "through the pooler, as directly");
    // Through the pooler the client really ran on two servers.
    assert!(moved(&pids), "one server only: {pids:?}");
}

/// `DEALLOCATE name` sent with the extended protocol (psycopg 3 in pipeline mode with libpq
/// before 17 evicts so) of a statement the client made with Parse does what it does directly
/// under `track`: it runs on a server the client moved to (the statement replayed there first,
/// so the DEALLOCATE finds it), the statement is gone once it ran (a use is 26000, a second
/// `DEALLOCATE` too, the name is free again), also in a pipeline with more after it; a name
/// with capitals is run and dropped by its quoted name, as directly. Another
/// client holds the server the client just used, so it moves (the backend pid is asserted to
/// change). Each step's messages, values and SQLSTATEs must be the same as directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extended_deallocate_of_a_protocol_statement() {
    let db = "tr_ext_dealloc";
    let pg = support::shared();
    let p = start_prepared(db, 2);
    let run = |name: &str| {
        [
            parse("", &format!("DEALLOCATE {name}")),
            bind("", "", &[]),
            describe(b'P', ""),
            execute(""),
        ]
    };
    let synced = |name: &str| {
        let mut msgs = run(name).to_vec();
        msgs.push(sync());
        batch(&msgs)
    };
    let use_it = |name: &str| batch(&[bind("", name, &[]), execute(""), sync()]);
    let mut pipeline = run("\"ps_b\"").to_vec();
    pipeline.extend([
        parse(
            "",
            "select count(*) from pg_prepared_statements where statement = 'select 2'",
        ),
        bind("", "", &[]),
        execute(""),
        sync(),
    ]);
    let steps: Vec<(bool, Vec<u8>)> = vec![
        (
            true,
            batch(&[parse("ps_a", "select 1"), parse("ps_b", "select 2"), sync()]),
        ),
        (false, query("BEGIN").to_vec()),
        (true, synced("ps_a")),
        (false, query("ROLLBACK").to_vec()),
        (true, use_it("ps_a")),
        (true, use_it("ps_b")),
        (true, synced("ps_a")),
        (true, batch(&pipeline)),
        (true, use_it("ps_b")),
        (true, batch(&[parse("ps_b", "select 4"), sync()])),
        (true, use_it("ps_b")),
        // A name with capitals: the server's name keeps them, so it is quoted where the
        // pooler writes it; unquoted, the client's is folded and not found, as directly.
        (true, batch(&[parse("Ps_Q", "select 5"), sync()])),
        (true, query("EXECUTE \"Ps_Q\"").to_vec()),
        (true, query("EXECUTE Ps_Q").to_vec()),
        (true, query("DEALLOCATE \"Ps_Q\"").to_vec()),
    ];
    let (direct, _) = answers_of_two(pg.port, db, &steps).await;
    let (pooled, pids) = answers_of_two(p.port(), db, &steps).await;
    assert_eq!(direct[2].0, "12nCZ", "direct");
    assert_eq!(direct[4].1, vec!["26000".to_owned()], "direct");
    assert_eq!(direct[5].2, vec!["2".to_owned()], "direct");
    assert_eq!(direct[6].1, vec!["26000".to_owned()], "direct");
    assert_eq!(direct[7].2, vec!["0".to_owned()], "direct");
    assert_eq!(direct[8].1, vec!["26000".to_owned()], "direct");
    assert_eq!(direct[10].2, vec!["4".to_owned()], "direct");
    assert_eq!(direct[12].2, vec!["5".to_owned()], "direct");
    assert_eq!(direct[13].1, vec!["26000".to_owned()], "direct");
    assert_eq!(direct[14].0, "CZ", "direct");
    assert_eq!(pooled, direct, "through the pooler, as directly");
    assert!(moved(&pids), "one server only: {pids:?}");
}
