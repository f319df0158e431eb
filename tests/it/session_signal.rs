//! A client that signals a backend by pid (`pg_terminate_backend`, `pg_cancel_backend`) is not
//! run on that backend. Directly, a client never signals its own backend by another
//! session's pid; through a transaction pooler, the pid another client read may be the idle
//! server the pool would hand the caller next (LIFO: the one just released), which would
//! end the very statement that ended it. asyncpg's `test_pool_remote_close` does exactly
//! this. Every form a driver sends it in is checked: a simple Query with the pid written
//! out, a named statement prepared in one transaction and bound in the next (tokio-postgres,
//! asyncpg), and an unnamed Parse with its Bind (psycopg, node-postgres).

use std::time::Duration;

use tokio::task::block_in_place;

use crate::core::create_db;
use crate::session_state::one;
use droid_pool::protocol::frame::Frame;

use crate::support::raw::{
    batch, bind, describe, execute, flush, parse, sqlstate, sync, tags, Raw,
};
use crate::support::{self, Pooler};

const USER: &str = "droid";

fn start(db: &str, size: usize) -> Pooler {
    let pg = support::shared();
    create_db(pg, db);
    let yaml = format!(
        "pool:\n  size: {size}\n  mode: transaction\n  track_prepared: true\n  \
         session_state: track\n  query_wait_timeout: 10s\nauth:\n  user_methods:\n    \
         {USER}: trust\n"
    );
    block_in_place(|| Pooler::start_with_config(pg, &yaml, &[]))
}

/// Waits until backend `pid` has gone from the server (a terminated backend leaves a moment
/// after the signal).
pub(crate) async fn wait_gone(pid: &str) {
    let direct = support::shared().connect(USER, "postgres").await;
    for _ in 0..100 {
        let n: i64 = direct
            .query_one(
                "select count(*) from pg_stat_activity where pid = $1::text::int",
                &[&pid],
            )
            .await
            .unwrap()
            .get(0);
        if n == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("backend {pid} still there");
}

/// A reads its backend's pid and lets the server go; the caller then signals that pid in
/// the form `signal` sends and gets back `(result, backend it ran on)`. The signal must
/// succeed on another backend, and A goes on, on a live server.
async fn kill_from_another_client<F, Fut>(p: &Pooler, db: &str, signal: F)
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = (String, String)>,
{
    let a = p.connect(USER, db).await;
    let target = one(&a, "select pg_backend_pid()").await;
    let (result, ran_on) = signal(target.clone()).await;
    assert_eq!(result, "t", "the signal succeeds, as it does directly");
    assert_ne!(
        ran_on, target,
        "the caller did not run on the backend it ended"
    );
    wait_gone(&target).await;
    // A's backend is gone; A is a pooled client and goes on, on another server.
    let pid_after = one(&a, "select pg_backend_pid()").await;
    assert_ne!(pid_after, target);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminate_in_a_simple_query_runs_on_another_backend() {
    let db = "sig_simple";
    // Room for more servers than are open: the pool opens one rather than hand out the
    // target, the only idle one.
    let p = start(db, 3);
    for _ in 0..3 {
        let b = p.connect(USER, db).await;
        kill_from_another_client(&p, db, |pid| async move {
            let sql = format!("select pg_terminate_backend({pid}) || ' ' || pg_backend_pid()");
            let both = one(&b, &sql).await;
            let (t, ran_on) = both.split_once(' ').expect("two values");
            (t[..1].to_owned(), ran_on.to_owned())
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminate_in_a_named_statement_runs_on_another_backend() {
    let db = "sig_named";
    let p = start(db, 3);
    for _ in 0..3 {
        let b = p.connect(USER, db).await;
        kill_from_another_client(&p, db, |pid| async move {
            // tokio-postgres prepares under a name in one transaction and binds in the next,
            // as asyncpg does; the pid goes as a binary int4.
            let pid: i32 = pid.parse().unwrap();
            let row = b
                .query_one(
                    "select pg_terminate_backend($1)::text, pg_backend_pid()::text",
                    &[&pid],
                )
                .await
                .expect("the terminate succeeds");
            (row.get::<_, String>(0)[..1].to_owned(), row.get(1))
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminate_in_an_unnamed_statement_runs_on_another_backend() {
    let db = "sig_unnamed";
    let p = start(db, 3);
    for _ in 0..3 {
        let mut b = Raw::connect(p.port(), USER, db).await;
        kill_from_another_client(&p, db, |pid| async move {
            // One batch, the pid as a text parameter.
            b.send(&batch(&[
                parse("", SIGNAL),
                bind("", "", &[Some(&pid)]),
                execute(""),
                sync(),
            ]))
            .await;
            signalled(&b.until_ready().await, "12DCZ")
        })
        .await;
    }
}

/// asyncpg's order: the statement is prepared (Parse, Describe, Flush) on the server the
/// pool hands out, which is the target, and bound once its description is in. Nothing of
/// the transaction has run by then, so the pooler lets that server go and the Bind takes
/// another, the statement prepared there again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminate_prepared_on_its_target_leaves_it_before_it_runs() {
    let db = "sig_flush";
    let p = start(db, 3);
    for _ in 0..3 {
        let mut b = Raw::connect(p.port(), USER, db).await;
        kill_from_another_client(&p, db, |pid| async move {
            prepare_then_bind(&mut b, &pid).await;
            signalled(&b.until_ready().await, "2DCZ")
        })
        .await;
    }
}

/// With no room for another server, the target is the only one to take: the caller ends its
/// own backend, as it would if it shared that backend without a pooler, gets `57P01`, and
/// the pool goes on with a new server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_pool_runs_the_terminate_where_it_can() {
    let db = "sig_full";
    let p = start(db, 1);
    let a = p.connect(USER, db).await;
    let target = one(&a, "select pg_backend_pid()").await;
    let b = p.connect(USER, db).await;
    let err = b
        .simple_query(&format!("select pg_terminate_backend({target})"))
        .await
        .expect_err("the backend ended its own statement");
    assert_eq!(err.code().map(|c| c.code()), Some("57P01"), "{err:?}");
    wait_gone(&target).await;
    assert_ne!(one(&a, "select pg_backend_pid()").await, target);
}

/// asyncpg's order: [`SIGNAL`] prepared as `s1` (Parse, Describe, Flush), its description
/// read, then bound to `pid` and run (Bind, Execute, Sync); the answer is left to read.
async fn prepare_then_bind(b: &mut Raw, pid: &str) {
    b.send(&batch(&[
        parse("s1", SIGNAL),
        describe(b'S', "s1"),
        flush(),
    ]))
    .await;
    let described: Vec<u8> = [b.recv().await, b.recv().await, b.recv().await]
        .iter()
        .map(|f| f.tag)
        .collect();
    assert_eq!(described, b"1tT");
    b.send(&batch(&[bind("", "s1", &[Some(pid)]), execute(""), sync()]))
        .await;
}

/// The statement the extended-protocol forms send: the signal's result and the backend it
/// ran on, as text.
const SIGNAL: &str = "select pg_terminate_backend($1::int)::text, pg_backend_pid()::text";

/// [`SIGNAL`]'s answer up to ReadyForQuery (`frames`, whose tags must be `want`): its
/// result's first letter and the backend it ran on.
fn signalled(frames: &[Frame], want: &str) -> (String, String) {
    assert_eq!(tags(frames), want, "{frames:?}");
    let row = frames.iter().find(|f| f.tag == b'D').expect("a row");
    let cols = droid_pool::protocol::backend::parse_data_row(row.body()).expect("a DataRow");
    let text = |i: usize| String::from_utf8_lossy(cols[i].expect("not NULL")).into_owned();
    (text(0)[..1].to_owned(), text(1))
}

/// asyncpg's order with no room for another server: the Bind leaves the target once, gets it
/// back (the only server), and runs there, ending it (`57P01`), rather than leaving again
/// and again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_pool_gives_the_target_back_once() {
    let db = "sig_full_flush";
    let p = start(db, 1);
    let a = p.connect(USER, db).await;
    let target = one(&a, "select pg_backend_pid()").await;
    let mut b = Raw::connect(p.port(), USER, db).await;
    prepare_then_bind(&mut b, &target).await;
    let frames = b
        .until_eof(10)
        .await
        .expect("an answer and a close, not a loop");
    let fatal = frames.iter().find(|f| f.tag == b'E').expect("an error");
    assert_eq!(sqlstate(fatal), "57P01", "{frames:?}");
    wait_gone(&target).await;
    assert_ne!(one(&a, "select pg_backend_pid()").await, target);
}
