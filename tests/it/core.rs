//! Core pooler behaviour through the real binary, a real PostgreSQL and real clients
//! (tokio-postgres, psql, pgbench, and a raw protocol client): the protocol, the pool modes,
//! parameter sync, cancel, server logins, failure handling, limits, and the event lines.

use std::future::Future;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use droid_pool::protocol::backend;
use droid_pool::protocol::frame::{self, Frame};
use droid_pool::protocol::frontend;
use futures_util::{SinkExt, StreamExt, TryStreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_postgres::types::Type;
use tokio_postgres::{AsyncMessage, Client, NoTls, SimpleQueryMessage};

use crate::support::pg::PASSWORD_USERS;
use crate::support::raw::{self, Raw};
use crate::support::tools::{pg_tool, run_tool, text};
use crate::support::{self, PgServer, Pooler, DB};

// ---------------------------------------------------------------------------------------------
// Helpers shared with badinput.rs.
// ---------------------------------------------------------------------------------------------

/// Runs `fut`, panicking with `what` if it takes longer than `secs` seconds.
pub(crate) async fn within<F: Future>(secs: u64, what: &str, fut: F) -> F::Output {
    match tokio::time::timeout(Duration::from_secs(secs), fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {secs}s: {what}"),
    }
}

/// The SQLSTATE of a tokio-postgres error, or a description when it has none.
pub(crate) fn code(e: &tokio_postgres::Error) -> String {
    match e.code() {
        Some(c) => c.code().to_owned(),
        None => format!("<no SQLSTATE: {e}>"),
    }
}

/// The rows of a simple query, as text columns.
pub(crate) fn rows(msgs: &[SimpleQueryMessage]) -> Vec<Vec<Option<String>>> {
    msgs.iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(
                (0..r.len())
                    .map(|i| r.get(i).map(str::to_owned))
                    .collect::<Vec<_>>(),
            ),
            _ => None,
        })
        .collect()
}

/// The single text value of a one-row, one-column simple query.
pub(crate) async fn scalar(client: &Client, sql: &str) -> String {
    let msgs = match client.simple_query(sql).await {
        Ok(m) => m,
        Err(e) => panic!("`{sql}` failed: {e} ({})", code(&e)),
    };
    let r = rows(&msgs);
    assert_eq!(r.len(), 1, "`{sql}`: want one row, got {r:?}");
    assert_eq!(r[0].len(), 1, "`{sql}`: want one column, got {r:?}");
    r[0][0].clone().expect("non-null value")
}

/// The pooler process's resident set size in kB (VmRSS of /proc/PID/status).
pub(crate) fn vm_rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS line");
    line.split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("VmRSS value")
}

/// Creates a database owned by `droid` on the PostgreSQL directly (a name per test, so
/// counting its backends in pg_stat_activity sees only that test's pooler).
pub(crate) fn create_db(pg: &PgServer, name: &str) {
    pg.psql_db("postgres", &format!("DROP DATABASE IF EXISTS {name}"));
    pg.psql_db("postgres", &format!("CREATE DATABASE {name} OWNER droid"));
}

/// A StartupMessage with protocol 3.`minor`.
pub(crate) fn startup_bytes(minor: u16, params: &[(&str, &str)]) -> BytesMut {
    let mut b = BytesMut::new();
    frontend::startup_message(&mut b, params);
    b[6..8].copy_from_slice(&minor.to_be_bytes());
    b
}

/// SQLSTATEs of the ErrorResponses among `frames`.
pub(crate) fn error_codes(frames: &[Frame]) -> Vec<String> {
    frames
        .iter()
        .filter(|f| f.tag == backend::ERROR_RESPONSE_TAG)
        .map(raw::sqlstate)
        .collect()
}

/// A client whose notices and notifications are delivered on a channel.
async fn connect_with_messages(
    conn: &str,
) -> (Client, tokio::sync::mpsc::UnboundedReceiver<AsyncMessage>) {
    let (client, mut connection) = tokio_postgres::connect(conn, NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect `{conn}`: {e}"));
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut stream = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(m)) = stream.next().await {
            let _ = tx.send(m);
        }
    });
    (client, rx)
}

/// Waits (asynchronously, so this runtime's connection tasks keep running) for a `[POOL]`
/// line, panicking with the lines so far if it does not come.
pub(crate) async fn expect_line(pooler: &Pooler, line: &str, secs: u64) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if pooler.lines().iter().any(|l| l == line) {
            return;
        }
        if Instant::now() >= deadline {
            panic!(
                "no `{line}` line within {secs}s; lines: {:#?}",
                pooler.lines()
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The most server connections open at once according to the event lines.
fn max_open_servers(lines: &[String]) -> i64 {
    let mut open = 0i64;
    let mut max = 0i64;
    for l in lines {
        if l.starts_with("[POOL] server ") && l.ends_with(" connected") {
            open += 1;
            max = max.max(open);
        } else if l.starts_with("[POOL] server ") && l.ends_with(" closed") {
            open -= 1;
        }
    }
    max
}

fn count_lines(lines: &[String], pred: impl Fn(&str) -> bool) -> usize {
    lines.iter().filter(|l| pred(l)).count()
}

// ---------------------------------------------------------------------------------------------
// tokio-postgres through the pooler.
// ---------------------------------------------------------------------------------------------

/// Simple and extended queries, errors, NULLs and binary values, in transaction mode.
#[tokio::test]
async fn simple_and_extended_queries() {
    let pg = support::shared();
    let pooler = Pooler::start(pg, &["--mode", "transaction", "--pool-size", "2"]);
    let client = pooler.connect("droid", DB).await;

    // Simple protocol: several statements in one query string.
    let msgs = within(
        10,
        "multi-statement simple query",
        client.simple_query("select 1 as a, 'x' as b; select null::text; select 2 + 3"),
    )
    .await
    .expect("simple query");
    assert_eq!(
        rows(&msgs),
        vec![
            vec![Some("1".to_owned()), Some("x".to_owned())],
            vec![None],
            vec![Some("5".to_owned())],
        ]
    );
    let completes = msgs
        .iter()
        .filter(|m| matches!(m, SimpleQueryMessage::CommandComplete(1)))
        .count();
    assert_eq!(completes, 3);

    // An error, then the session is still usable.
    let err = client
        .simple_query("select * from no_such_table_core")
        .await
        .expect_err("missing table");
    assert_eq!(code(&err), "42P01");
    assert_eq!(scalar(&client, "select 'after error'").await, "after error");

    // A large result (rows copied in runs that span many reads), then rows followed by an
    // error in the same result: the error still arrives, after its rows, and the session goes on.
    let msgs = within(
        20,
        "20000 rows, simple protocol",
        client.simple_query("select g, repeat('y', g % 50) from generate_series(1, 20000) g"),
    )
    .await
    .expect("20000 rows");
    let got = rows(&msgs);
    assert_eq!(got.len(), 20000);
    for (i, r) in got.iter().enumerate() {
        let g = i + 1;
        assert_eq!(r[0].as_deref(), Some(g.to_string().as_str()));
        assert_eq!(r[1].as_deref(), Some("y".repeat(g % 50).as_str()));
    }
    let err = within(
        20,
        "rows then division by zero",
        client.simple_query("select 1 / (3000 - g) from generate_series(1, 5000) g"),
    )
    .await
    .expect_err("division by zero after rows");
    assert_eq!(code(&err), "22012");
    let err = within(
        20,
        "rows then division by zero, extended",
        client.query_typed("select 1 / (3000 - g) from generate_series(1, 5000) g", &[]),
    )
    .await
    .expect_err("division by zero after rows");
    assert_eq!(code(&err), "22012");
    assert_eq!(scalar(&client, "select 'after rows'").await, "after rows");

    // Extended protocol with the unnamed statement (one round trip, fine in transaction mode).
    let rows = within(
        10,
        "query_typed",
        client.query_typed(
            "select $1::int4 + $2::int4, $3::text, $4::bytea, $5::text is null",
            &[
                (&40i32, Type::INT4),
                (&2i32, Type::INT4),
                (&"héllo", Type::TEXT),
                (&vec![0u8, 1, 255], Type::BYTEA),
                (&None::<String>, Type::TEXT),
            ],
        ),
    )
    .await
    .expect("query_typed");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].get::<_, i32>(0), 42);
    assert_eq!(rows[0].get::<_, String>(1), "héllo");
    assert_eq!(rows[0].get::<_, Vec<u8>>(2), vec![0u8, 1, 255]);
    assert!(rows[0].get::<_, bool>(3));

    // Many rows through the extended protocol.
    let many = client
        .query_typed(
            "select g, repeat('x', g % 100) from generate_series(1, 5000) g",
            &[],
        )
        .await
        .expect("5000 rows");
    assert_eq!(many.len(), 5000);
    let total: i64 = many.iter().map(|r| r.get::<_, i32>(0) as i64).sum();
    assert_eq!(total, 5000 * 5001 / 2);
    assert_eq!(many[4998].get::<_, String>(1), "x".repeat(99));

    // An extended-protocol error (division by zero at execution), then usable.
    let err = client
        .query_typed("select 1 / $1::int4", &[(&0i32, Type::INT4)])
        .await
        .expect_err("division by zero");
    assert_eq!(code(&err), "22012");

    // Named prepared statements inside one transaction (same server throughout).
    let mut client = client;
    let tx = client.transaction().await.expect("begin");
    let stmt = tx
        .prepare("select $1::int8 * 3")
        .await
        .expect("prepare in tx");
    for i in 0..5i64 {
        let r = tx.query_one(&stmt, &[&i]).await.expect("execute prepared");
        assert_eq!(r.get::<_, i64>(0), i * 3);
    }
    tx.commit().await.expect("commit");
    assert_eq!(scalar(&client, "select 'done'").await, "done");
    assert!(!pooler.has_exited());
}

/// Named prepared statements and extended queries at top level in session mode.
#[tokio::test]
async fn extended_queries_in_session_mode() {
    let pg = support::shared();
    let pooler = Pooler::start(pg, &["--mode", "session", "--pool-size", "2"]);
    let client = pooler.connect("droid", DB).await;
    let stmt = client
        .prepare("select $1::text || '!', $2::float8 * 2")
        .await
        .expect("prepare");
    for i in 0..20 {
        let row = client
            .query_one(&stmt, &[&format!("v{i}"), &(i as f64)])
            .await
            .expect("execute");
        assert_eq!(row.get::<_, String>(0), format!("v{i}!"));
        assert_eq!(row.get::<_, f64>(1), (i * 2) as f64);
    }
    let n = client
        .execute("select generate_series(1, 17)", &[])
        .await
        .expect("execute rows");
    assert_eq!(n, 17);
}

/// Several queries in flight at once on one connection (tokio-postgres pipelines futures
/// polled together: many Syncs outstanding), including one that fails in the middle.
#[tokio::test]
async fn pipelined_queries() {
    let pg = support::shared();
    let pooler = Pooler::start(pg, &["--mode", "transaction", "--pool-size", "2"]);
    let client = pooler.connect("droid", DB).await;

    let futs = (0..50i32).map(|i| {
        let client = &client;
        async move {
            let sql = if i == 25 {
                "select 1 / ($1::int4 - 25)"
            } else {
                "select $1::int4 * 2"
            };
            (i, client.query_typed(sql, &[(&i, Type::INT4)]).await)
        }
    });
    let results = within(
        20,
        "50 pipelined queries",
        futures_util::future::join_all(futs),
    )
    .await;
    for (i, res) in results {
        if i == 25 {
            let e = res.expect_err("division by zero in the middle");
            assert_eq!(code(&e), "22012");
        } else {
            let rows = res.unwrap_or_else(|e| panic!("query {i}: {e}"));
            assert_eq!(rows[0].get::<_, i32>(0), i * 2, "answer to query {i}");
        }
    }

    // Simple queries pipelined too.
    let futs = (0..20).map(|i| {
        let client = &client;
        async move { (i, client.simple_query(&format!("select {i} + 100")).await) }
    });
    for (i, res) in futures_util::future::join_all(futs).await {
        let msgs = res.unwrap_or_else(|e| panic!("simple {i}: {e}"));
        assert_eq!(rows(&msgs), vec![vec![Some((i + 100).to_string())]]);
    }
}

/// The raw protocol: three Syncs in one write with an error in the middle batch, and a Flush
/// that must bring results before any Sync.
#[tokio::test]
async fn raw_pipeline_and_flush() {
    let pg = support::shared();
    let pooler = Pooler::start(pg, &["--mode", "transaction", "--pool-size", "1"]);
    let mut c = Raw::connect(pooler.port(), "droid", DB).await;
    let batch = |sql: &str| {
        vec![
            raw::parse("", sql),
            raw::bind("", "", &[]),
            raw::describe(b'P', ""),
            raw::execute(""),
            raw::sync(),
        ]
    };
    let mut msgs = batch("select 'one'");
    // Volatile, so the division happens at Execute rather than when Bind plans it.
    msgs.extend(batch("select 1 / (random() * 0)::int4"));
    msgs.extend(batch("select 'three'"));
    c.send(&raw::batch(&msgs)).await;
    let mut frames = Vec::new();
    for _ in 0..3 {
        frames.extend(c.until_ready().await);
    }
    assert_eq!(raw::tags(&frames), "12TDCZ12TEZ12TDCZ");
    assert_eq!(raw::first_col(&frames[3]).as_deref(), Some("one"));
    assert_eq!(raw::sqlstate(&frames[9]), "22012");
    assert_eq!(raw::first_col(&frames[14]).as_deref(), Some("three"));

    // Flush: the results come without a Sync; then the Sync brings ReadyForQuery.
    c.send(&raw::batch(&[
        raw::parse("", "select 'flushed'"),
        raw::bind("", "", &[]),
        raw::execute(""),
        raw::flush(),
    ]))
    .await;
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(c.recv().await);
    }
    assert_eq!(raw::tags(&got), "12DC");
    assert_eq!(raw::first_col(&got[2]).as_deref(), Some("flushed"));
    c.send(&raw::sync()).await;
    let rest = c.until_ready().await;
    assert_eq!(raw::tags(&rest), "Z");
    assert_eq!(rest[0].body(), b"I");
}

/// COPY FROM STDIN and COPY TO STDOUT with real data, counts and contents checked; a COPY that
/// fails on bad data leaves the session usable.
#[tokio::test]
async fn copy_in_and_out() {
    let pg = support::shared();
    pg.psql("drop table if exists core_copy; create table core_copy (id int primary key, name text, note text)");
    let pooler = Pooler::start(pg, &["--mode", "transaction", "--pool-size", "2"]);
    let mut client = pooler.connect("droid", DB).await;

    // COPY IN inside a transaction (tokio-postgres prepares the COPY statement first).
    let tx = client.transaction().await.expect("begin");
    let sink = tx
        .copy_in("COPY core_copy (id, name, note) FROM STDIN")
        .await
        .expect("copy_in");
    futures_util::pin_mut!(sink);
    let mut expected_len = 0usize;
    for chunk in 0..10 {
        let mut data = String::new();
        for i in chunk * 100..(chunk + 1) * 100 {
            let line = format!("{i}\tname-{i}\tnote with tab\\there {}\n", i * 7);
            expected_len += line.len();
            data.push_str(&line);
        }
        sink.send(Bytes::from(data)).await.expect("send copy data");
    }
    let n = sink.finish().await.expect("copy_in finish");
    assert_eq!(n, 1000);
    tx.commit().await.expect("commit copy");

    assert_eq!(
        scalar(&client, "select count(*) from core_copy").await,
        "1000"
    );
    assert_eq!(
        scalar(&client, "select note from core_copy where id = 999").await,
        "note with tab\there 6993"
    );

    // COPY OUT inside a transaction.
    let tx = client.transaction().await.expect("begin");
    let stream = tx
        .copy_out("COPY (select id, name, note from core_copy order by id) TO STDOUT")
        .await
        .expect("copy_out");
    let chunks: Vec<Bytes> = within(20, "copy out", stream.try_collect())
        .await
        .expect("copy out data");
    tx.commit().await.expect("commit");
    let out: Vec<u8> = chunks.concat();
    assert_eq!(out.len(), expected_len);
    let out = String::from_utf8(out).expect("utf8");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1000);
    assert_eq!(lines[0], "0\tname-0\tnote with tab\\there 0");
    assert_eq!(lines[500], "500\tname-500\tnote with tab\\there 3500");

    // Bad data: 22P02, the rows are not there, the session goes on.
    let tx = client.transaction().await.expect("begin");
    let sink = tx
        .copy_in("COPY core_copy (id, name) FROM STDIN")
        .await
        .expect("copy_in");
    futures_util::pin_mut!(sink);
    sink.send(Bytes::from_static(b"5000\tok\nnot-a-number\tbad\n"))
        .await
        .expect("send");
    let err = sink.finish().await.expect_err("bad copy data");
    assert_eq!(code(&err), "22P02");
    tx.rollback().await.expect("rollback");
    assert_eq!(
        scalar(&client, "select count(*) from core_copy where id >= 5000").await,
        "0"
    );

    // CSV, with a quoted delimiter.
    let tx = client.transaction().await.expect("begin");
    let sink = tx
        .copy_in("COPY core_copy (id, name) FROM STDIN (FORMAT csv)")
        .await
        .expect("copy_in csv");
    futures_util::pin_mut!(sink);
    sink.send(Bytes::from_static(b"7001,\"a,b\"\n7002,c\n"))
        .await
        .expect("send csv");
    assert_eq!(sink.finish().await.expect("finish csv"), 2);
    tx.commit().await.expect("commit");
    assert_eq!(
        scalar(&client, "select name from core_copy where id = 7001").await,
        "a,b"
    );
    drop(client);
    pg.psql("drop table core_copy");
}

/// COPY in session mode at top level (no explicit transaction), both directions.
#[tokio::test]
async fn copy_in_and_out_session_mode() {
    let pg = support::shared();
    pg.psql("drop table if exists core_copy_s; create table core_copy_s (a int, b text)");
    let pooler = Pooler::start(pg, &["--mode", "session", "--pool-size", "1"]);
    let client = pooler.connect("droid", DB).await;
    let sink = client
        .copy_in("COPY core_copy_s FROM STDIN")
        .await
        .expect("copy_in");
    futures_util::pin_mut!(sink);
    let big = (0..20_000)
        .map(|i| format!("{i}\t{}\n", "y".repeat(i % 50)))
        .collect::<String>();
    sink.send(Bytes::from(big.clone())).await.expect("send");
    assert_eq!(sink.finish().await.expect("finish"), 20_000);
    // Ordered: COPY's multi-inserts may put a short row in an earlier page's free space.
    let stream = client
        .copy_out("COPY (select * from core_copy_s order by a) TO STDOUT")
        .await
        .expect("copy_out");
    let chunks: Vec<Bytes> = within(20, "copy out", stream.try_collect())
        .await
        .expect("copy out");
    assert_eq!(String::from_utf8(chunks.concat()).unwrap(), big);
    drop(client);
    pg.psql("drop table core_copy_s");
}

/// RAISE NOTICE reaches the client as a notice; LISTEN/NOTIFY (session mode) delivers
/// notifications to an idle listener.
#[tokio::test]
async fn notices_and_notifications() {
    let pg = support::shared();
    let pooler = Pooler::start(pg, &["--mode", "session", "--pool-size", "3"]);
    let (listener, mut messages) = connect_with_messages(&pooler.conn_string("droid", DB)).await;
    let notifier = pooler.connect("droid", DB).await;

    listener
        .simple_query("DO $$ BEGIN RAISE NOTICE 'hello %', 42; END $$")
        .await
        .expect("DO");
    let m = within(5, "notice", messages.recv())
        .await
        .expect("a message");
    match m {
        AsyncMessage::Notice(n) => {
            assert_eq!(n.message(), "hello 42");
            assert_eq!(n.code().code(), "00000");
            assert_eq!(n.severity(), "NOTICE");
        }
        other => panic!("expected a notice, got {other:?}"),
    }

    listener
        .simple_query("LISTEN core_chan")
        .await
        .expect("LISTEN");
    notifier
        .simple_query("NOTIFY core_chan, 'payload-1'")
        .await
        .expect("NOTIFY");
    notifier
        .simple_query("select pg_notify('core_chan', 'payload-2')")
        .await
        .expect("pg_notify");
    let mut got = Vec::new();
    for _ in 0..2 {
        match within(5, "notification", messages.recv())
            .await
            .expect("a message")
        {
            AsyncMessage::Notification(n) => {
                got.push((n.channel().to_owned(), n.payload().to_owned()))
            }
            other => panic!("expected a notification, got {other:?}"),
        }
    }
    assert_eq!(
        got,
        vec![
            ("core_chan".to_owned(), "payload-1".to_owned()),
            ("core_chan".to_owned(), "payload-2".to_owned()),
        ]
    );

    // Notices in transaction mode too, in the middle of an extended query.
    let tpooler = Pooler::start(pg, &["--mode", "transaction", "--pool-size", "1"]);
    let (c, mut messages) = connect_with_messages(&tpooler.conn_string("droid", DB)).await;
    c.simple_query("DO $$ BEGIN RAISE WARNING 'careful'; RAISE NOTICE 'second'; END $$; select 1")
        .await
        .expect("DO in transaction mode");
    let mut texts = Vec::new();
    for _ in 0..2 {
        match within(5, "notice", messages.recv()).await.expect("msg") {
            AsyncMessage::Notice(n) => texts.push(n.message().to_owned()),
            other => panic!("expected a notice, got {other:?}"),
        }
    }
    assert_eq!(texts, vec!["careful", "second"]);
}

/// FunctionCall ('F') for abs(int4), sent raw, answered with FunctionCallResponse.
#[tokio::test]
async fn function_call() {
    let pg = support::shared();
    let direct = pg.connect("droid", DB).await;
    let oid: u32 = direct
        .query_one("select 'abs(int4)'::regprocedure::oid", &[])
        .await
        .expect("oid")
        .get(0);
    assert_eq!(oid, 1397);
    let pooler = Pooler::start(pg, &["--mode", "transaction", "--pool-size", "1"]);
    let mut c = Raw::connect(pooler.port(), "droid", DB).await;
    let call = |arg: &str, result_format: i16| {
        let mut b = BytesMut::new();
        let at = frame::begin(&mut b, frontend::FUNCTION_CALL_TAG);
        b.put_u32(oid);
        b.put_i16(1); // one argument format code: text
        b.put_i16(0);
        b.put_i16(1); // one argument
        b.put_i32(arg.len() as i32);
        b.put_slice(arg.as_bytes());
        b.put_i16(result_format);
        frame::finish(&mut b, at);
        b
    };
    c.send(&call("-5", 0)).await;
    let frames = c.until_ready().await;
    assert_eq!(raw::tags(&frames), "VZ");
    let body = frames[0].body();
    assert_eq!(&body[..4], &1i32.to_be_bytes());
    assert_eq!(&body[4..], b"5");

    // Binary result, and a bad argument giving an error and then a usable session.
    c.send(&call("-123", 1)).await;
    let frames = c.until_ready().await;
    assert_eq!(raw::tags(&frames), "VZ");
    assert_eq!(&frames[0].body()[4..], &123i32.to_be_bytes());
    c.send(&call("nope", 0)).await;
    let frames = c.until_ready().await;
    assert_eq!(raw::tags(&frames), "EZ");
    assert_eq!(raw::sqlstate(&frames[0]), "22P02");
    c.send(&raw::query("select 'still here'")).await;
    let frames = c.until_ready().await;
    assert_eq!(raw::tags(&frames), "TDCZ");
    assert_eq!(raw::first_col(&frames[1]).as_deref(), Some("still here"));
}

// ---------------------------------------------------------------------------------------------
// psql and pgbench.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn psql_through_the_pooler() {
    let pg = support::shared();
    let pooler = Pooler::start(pg, &["--mode", "transaction", "--pool-size", "2"]);
    let port = pooler.port().to_string();
    let base = |cmd: &mut Command| {
        cmd.args(["-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1"])
            .args(["-p", &port, "-U", "droid", "-d", DB]);
    };

    // One -c with several statements (one query string), and several -c.
    let mut cmd = pg_tool("psql");
    base(&mut cmd);
    cmd.args([
        "-c",
        "select 1 as a; select 'two' as b; select 3 + 4",
        "-c",
        "select current_user",
    ]);
    let out = tokio::task::spawn_blocking(move || run_tool(&mut cmd, None))
        .await
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "psql failed: {stderr}");
    assert_eq!(stdout, "1\ntwo\n7\ndroid\n");

    // A script on stdin: a transaction with a temp table filled by COPY FROM STDIN.
    let script = "\\set ON_ERROR_STOP 1\n\
        BEGIN;\n\
        CREATE TEMP TABLE psql_t (a int, b text) ON COMMIT DROP;\n\
        COPY psql_t FROM STDIN;\n\
        1\tone\n\
        2\ttwo\n\
        3\tthree\n\
        \\.\n\
        SELECT count(*), string_agg(b, ',' ORDER BY a) FROM psql_t;\n\
        COMMIT;\n\
        SELECT 'after';\n";
    let mut cmd = pg_tool("psql");
    base(&mut cmd);
    cmd.args(["-q", "-f", "-"]);
    let out = tokio::task::spawn_blocking(move || run_tool(&mut cmd, Some(script)))
        .await
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "psql script failed: {stderr}");
    assert_eq!(stdout, "3|one,two,three\nafter\n");

    // An error makes psql fail with PostgreSQL's message.
    let mut cmd = pg_tool("psql");
    base(&mut cmd);
    cmd.args(["-c", "select * from core_no_such_table"]);
    let out = tokio::task::spawn_blocking(move || run_tool(&mut cmd, None))
        .await
        .unwrap();
    let (_, stderr) = text(&out);
    assert!(!out.status.success(), "psql: {stderr}");
    assert!(
        stderr.contains("relation \"core_no_such_table\" does not exist"),
        "{stderr}"
    );
    assert!(!pooler.has_exited());
}

/// Parses pgbench's summary; asserts success and no failed transactions; returns how many
/// transactions were processed.
fn check_pgbench(out: &Output, what: &str) -> u64 {
    let (stdout, stderr) = text(out);
    assert!(
        out.status.success(),
        "pgbench {what} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let processed = stdout
        .lines()
        .find_map(|l| l.strip_prefix("number of transactions actually processed: "))
        .and_then(|v| v.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no processed count in pgbench {what} output:\n{stdout}"));
    let failed = stdout
        .lines()
        .find_map(|l| l.strip_prefix("number of failed transactions: "))
        .unwrap_or_else(|| panic!("no failed count in pgbench {what} output:\n{stdout}"));
    assert!(
        failed.starts_with("0 "),
        "pgbench {what}: failed transactions: {failed}\n{stdout}\n{stderr}"
    );
    assert!(processed > 0, "pgbench {what} processed nothing:\n{stdout}");
    processed
}

#[tokio::test]
async fn pgbench_through_the_pooler() {
    let pg = support::shared();
    create_db(pg, "core_pgbench");
    let pgport = pg.port.to_string();
    let mut init = pg_tool("pgbench");
    init.args(["-i", "-s", "1", "-q", "-h", "127.0.0.1", "-p", &pgport])
        .args(["-U", "droid", "core_pgbench"]);
    let out = tokio::task::spawn_blocking(move || run_tool(&mut init, None))
        .await
        .unwrap();
    assert!(out.status.success(), "pgbench -i: {:?}", text(&out));

    let pooler = Pooler::start(pg, &["--mode", "transaction", "--pool-size", "4"]);
    let port = pooler.port().to_string();
    let bench = |extra: &[&str]| {
        let mut cmd = pg_tool("pgbench");
        cmd.args(["-h", "127.0.0.1", "-p", &port, "-U", "droid"])
            .args(["-c", "8", "-j", "2", "-T", "3"])
            .args(extra)
            .arg("core_pgbench");
        cmd
    };
    let mut select_only = bench(&["-S"]);
    let out = tokio::task::spawn_blocking(move || run_tool(&mut select_only, None))
        .await
        .unwrap();
    check_pgbench(&out, "-S");

    let mut tpcb = bench(&[]);
    let out = tokio::task::spawn_blocking(move || run_tool(&mut tpcb, None))
        .await
        .unwrap();
    let n = check_pgbench(&out, "default script");
    // Every processed transaction left one history row.
    let direct = pg.connect("droid", "core_pgbench").await;
    let history: i64 = direct
        .query_one("select count(*) from pgbench_history", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(history as u64, n);

    // The extended protocol too (unnamed statements).
    let mut extended = bench(&["-S", "-M", "extended"]);
    let out = tokio::task::spawn_blocking(move || run_tool(&mut extended, None))
        .await
        .unwrap();
    check_pgbench(&out, "-S -M extended");

    let lines = pooler.lines();
    assert!(max_open_servers(&lines) <= 4, "{lines:?}");
    assert!(!pooler.has_exited());
}

// ---------------------------------------------------------------------------------------------
// Pool modes.
// ---------------------------------------------------------------------------------------------

/// Session mode: SET and temp tables survive transactions; the next client of the same server
/// gets it reset (DISCARD ALL).
#[tokio::test]
async fn session_mode_keeps_session_state() {
    let pg = support::shared();
    let pooler = Pooler::start(pg, &["--mode", "session", "--pool-size", "1"]);
    let a = pooler.connect("droid", DB).await;
    a.simple_query("SET work_mem = '7MB'").await.expect("SET");
    a.simple_query("CREATE TEMP TABLE core_sess (x int)")
        .await
        .expect("temp table");
    a.simple_query("BEGIN; INSERT INTO core_sess VALUES (1), (2); COMMIT")
        .await
        .expect("tx 1");
    a.simple_query("BEGIN").await.expect("begin");
    a.simple_query("INSERT INTO core_sess VALUES (3)")
        .await
        .expect("insert");
    a.simple_query("COMMIT").await.expect("commit");
    assert_eq!(scalar(&a, "SHOW work_mem").await, "7MB");
    assert_eq!(scalar(&a, "select sum(x) from core_sess").await, "6");
    let pid_a = scalar(&a, "select pg_backend_pid()").await;
    assert_eq!(scalar(&a, "select pg_backend_pid()").await, pid_a);
    drop(a);
    expect_line(&pooler, "[POOL] client 1 disconnected", 5).await;

    let b = pooler.connect("droid", DB).await;
    // Same server (pool size 1), reset.
    assert_eq!(scalar(&b, "select pg_backend_pid()").await, pid_a);
    assert_eq!(scalar(&b, "SHOW work_mem").await, "4MB");
    let err = b
        .simple_query("select * from core_sess")
        .await
        .expect_err("temp table gone after reset");
    assert_eq!(code(&err), "42P01");
    let lines = pooler.lines();
    assert_eq!(
        count_lines(&lines, |l| l.starts_with("[POOL] server ")
            && l.ends_with(" connected")),
        1,
        "{lines:?}"
    );
}

/// Transaction mode: 200 concurrent clients over a pool of 5 each run several transactions with
/// correct answers; PostgreSQL never sees more than 5 backends of the pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_mode_200_clients_pool_of_5() {
    let pg = support::shared();
    create_db(pg, "core_tx200");
    let direct = pg.connect("droid", "core_tx200").await;
    direct
        .batch_execute("create table t (c int, i int)")
        .await
        .unwrap();
    // The direct connection to core_tx200 is not the pooler's: gone before the monitor starts.
    drop(direct);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let monitor = pg.connect("droid", DB).await;
    let pooler = Pooler::start(pg, &["--mode", "transaction", "--pool-size", "5"]);

    let stop = Arc::new(AtomicBool::new(false));
    let max_backends = Arc::new(AtomicI64::new(0));
    let mon = {
        let stop = stop.clone();
        let max_backends = max_backends.clone();
        tokio::spawn(async move {
            let mut samples = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let n: i64 = monitor
                    .query_one(
                        "select count(*) from pg_stat_activity where datname = 'core_tx200' \
                         and backend_type = 'client backend'",
                        &[],
                    )
                    .await
                    .expect("pg_stat_activity")
                    .get(0);
                max_backends.fetch_max(n, Ordering::Relaxed);
                samples += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            samples
        })
    };

    let conn = pooler.conn_string("droid", "core_tx200");
    let mut tasks = Vec::new();
    for c in 0..200i32 {
        let conn = conn.clone();
        tasks.push(tokio::spawn(async move {
            let mut client = support::try_connect(&conn)
                .await
                .map_err(|e| format!("client {c} connect: {e}"))?;
            for i in 0..5i32 {
                let tx = client
                    .transaction()
                    .await
                    .map_err(|e| format!("client {c} begin: {e}"))?;
                tx.execute("insert into t (c, i) values ($1, $2)", &[&c, &i])
                    .await
                    .map_err(|e| format!("client {c} insert: {e}"))?;
                let row = tx
                    .query_one(
                        "select count(*)::int4, coalesce(sum(i), 0)::int4 from t where c = $1",
                        &[&c],
                    )
                    .await
                    .map_err(|e| format!("client {c} select: {e}"))?;
                let (n, s): (i32, i32) = (row.get(0), row.get(1));
                if n != i + 1 || s != i * (i + 1) / 2 {
                    return Err(format!("client {c} tx {i}: got ({n}, {s})"));
                }
                tx.commit()
                    .await
                    .map_err(|e| format!("client {c} commit: {e}"))?;
                let r = client
                    .query_typed(
                        "select $1::int4 * 1000 + $2::int4",
                        &[(&c, Type::INT4), (&i, Type::INT4)],
                    )
                    .await
                    .map_err(|e| format!("client {c} query_typed: {e}"))?;
                let v: i32 = r[0].get(0);
                if v != c * 1000 + i {
                    return Err(format!("client {c}: {v} != {}", c * 1000 + i));
                }
            }
            Ok::<(), String>(())
        }));
    }
    let mut errors = Vec::new();
    for t in tasks {
        match within(120, "200 clients", t).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => errors.push(e),
            Err(e) => errors.push(format!("task panicked: {e}")),
        }
    }
    stop.store(true, Ordering::Relaxed);
    let samples = mon.await.expect("monitor");
    assert!(
        errors.is_empty(),
        "{} failures: {:?}",
        errors.len(),
        &errors[..errors.len().min(10)]
    );

    let direct = pg.connect("droid", "core_tx200").await;
    let total: i64 = direct
        .query_one("select count(*) from t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(total, 1000);
    let max = max_backends.load(Ordering::Relaxed);
    assert!(samples > 5, "monitor took only {samples} samples");
    assert!(
        max <= 5,
        "PostgreSQL saw {max} backends of the pool (limit 5)"
    );
    assert!(max >= 1, "the monitor never saw a pooled backend");
    let lines = pooler.lines();
    let max_open = max_open_servers(&lines);
    eprintln!(
        "200 clients: {samples} samples, at most {max} backends seen, {max_open} servers open"
    );
    // 200 clients contend, so the pool grows to its size and no further.
    assert_eq!(max_open, 5, "server lines say {max_open} open at once");
    assert_eq!(
        count_lines(&lines, |l| l.ends_with(" connected")
            && l.starts_with("[POOL] client ")),
        200
    );
}

/// Statement mode refuses a transaction block with 0A000 (rolled back on the server) and the
/// session stays usable.
#[tokio::test]
async fn statement_mode_refuses_transactions() {
    let pg = support::shared();
    create_db(pg, "core_stmt");
    let pooler = Pooler::start(pg, &["--mode", "statement", "--pool-size", "1"]);
    let mut client = pooler.connect("droid", "core_stmt").await;
    assert_eq!(scalar(&client, "select 41 + 1").await, "42");

    let err = client
        .simple_query("BEGIN")
        .await
        .expect_err("BEGIN refused");
    assert_eq!(code(&err), "0A000");
    // Not in a transaction afterwards: the server was rolled back.
    assert_eq!(scalar(&client, "select 'usable'").await, "usable");
    let direct = pg.connect("droid", DB).await;
    let open: i64 = direct
        .query_one(
            "select count(*) from pg_stat_activity where datname = 'core_stmt' \
             and state like 'idle in transaction%'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(open, 0, "a server was left in a transaction");

    // The extended protocol's BEGIN and tokio-postgres' transaction() too.
    let err = client
        .query_typed("BEGIN", &[])
        .await
        .expect_err("extended BEGIN refused");
    assert_eq!(code(&err), "0A000");
    let err = match client.transaction().await {
        Ok(_) => panic!("transaction() must be refused"),
        Err(e) => e,
    };
    assert_eq!(code(&err), "0A000");
    // A complete transaction in one query string ends idle, so it is a single statement.
    let msgs = client
        .simple_query("BEGIN; select 7; COMMIT")
        .await
        .expect("a whole transaction in one Query");
    assert_eq!(rows(&msgs), vec![vec![Some("7".to_owned())]]);
    assert_eq!(
        scalar(&client, "select 'still usable'").await,
        "still usable"
    );
}

// ---------------------------------------------------------------------------------------------
// Parameter sync and cancel.
// ---------------------------------------------------------------------------------------------

async fn connect_with_options(pooler: &Pooler, options: &str) -> Client {
    let mut cfg = tokio_postgres::Config::new();
    cfg.host("127.0.0.1")
        .port(pooler.port())
        .user("droid")
        .dbname(DB)
        .options(options);
    let (client, connection) = cfg.connect(NoTls).await.expect("connect with options");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// Two clients with different TimeZones share one server (pool size 1) and each sees its own
/// zone, interleaved; a client's own SET sticks to it.
#[tokio::test]
async fn parameter_sync_timezone() {
    let pg = support::shared();
    let pooler = Pooler::start(pg, &["--mode", "transaction", "--pool-size", "1"]);
    let utc = connect_with_options(&pooler, "-c TimeZone=UTC").await;
    let tokyo = connect_with_options(&pooler, "-c TimeZone=Asia/Tokyo").await;
    for round in 0..3 {
        assert_eq!(scalar(&utc, "show timezone").await, "UTC", "round {round}");
        assert_eq!(
            scalar(&tokyo, "show timezone").await,
            "Asia/Tokyo",
            "round {round}"
        );
        assert_eq!(
            scalar(&utc, "select extract(timezone from now())::int").await,
            "0"
        );
        assert_eq!(
            scalar(&tokyo, "select extract(timezone from now())::int").await,
            "32400"
        );
        let t = tokyo
            .query_typed("select now()::text", &[])
            .await
            .expect("now");
        let s: String = t[0].get(0);
        assert!(s.ends_with("+09"), "Tokyo now() = {s}");
        let u = scalar(&utc, "select now()::text").await;
        assert!(u.ends_with("+00"), "UTC now() = {u}");
    }
    // A SET of the client's own is kept for it and not leaked to the other.
    utc.simple_query("SET TimeZone = 'America/New_York'")
        .await
        .expect("SET");
    assert_eq!(scalar(&tokyo, "show timezone").await, "Asia/Tokyo");
    assert_eq!(scalar(&utc, "show timezone").await, "America/New_York");
    assert_eq!(scalar(&tokyo, "show timezone").await, "Asia/Tokyo");
    let lines = pooler.lines();
    assert_eq!(
        count_lines(&lines, |l| l.starts_with("[POOL] server ")
            && l.ends_with(" connected")),
        1,
        "both clients must share one server: {lines:?}"
    );
    assert!(lines.iter().any(|l| l == "[POOL] client 1 uses server 1"));
    assert!(lines.iter().any(|l| l == "[POOL] client 2 uses server 1"));
}

/// A CancelRequest sent to the pooler with the pooler's key cancels the query on the server.
#[tokio::test]
async fn cancel_pg_sleep() {
    let pg = support::shared();
    let pooler = Pooler::start(pg, &["--mode", "transaction", "--pool-size", "2"]);
    let client = pooler.connect("droid", DB).await;
    let token = client.cancel_token();
    let sleeper = tokio::spawn(async move {
        let r = client.simple_query("select pg_sleep(30)").await;
        (r, client)
    });
    expect_line(&pooler, "[POOL] client 1 uses server 1", 5).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t0 = Instant::now();
    token.cancel_query(NoTls).await.expect("send cancel");
    let (res, client) = tokio::time::timeout(Duration::from_secs(5), sleeper)
        .await
        .expect("pg_sleep not cancelled within 5 s")
        .expect("task");
    let took = t0.elapsed();
    let err = res.expect_err("pg_sleep must be cancelled");
    assert_eq!(code(&err), "57014");
    assert!(took < Duration::from_secs(1), "cancel took {took:?}");
    // PostgreSQL signals the backend twice per cancel (its pid, then its process group); on
    // a loaded machine the second can land after the first has ended the query. Arriving
    // while the backend is idle it is ignored; arriving with the next query already queued it
    // would cancel that one. A pause lets it land while idle.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        scalar(&client, "select 'after cancel'").await,
        "after cancel"
    );

    // A cancel with a wrong key is dropped: the query finishes normally.
    let mut wrong = BytesMut::new();
    frontend::cancel_request(&mut wrong, 1, 12345);
    let running = client.simple_query("select pg_sleep(0.5), 'slept'");
    let send_wrong = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut s = TcpStream::connect(("127.0.0.1", pooler.port()))
            .await
            .unwrap();
        s.write_all(&wrong).await.unwrap();
    };
    let (res, ()) = tokio::join!(running, send_wrong);
    assert_eq!(
        rows(&res.expect("not cancelled"))[0][1].as_deref(),
        Some("slept")
    );
}

// ---------------------------------------------------------------------------------------------
// Server logins.
// ---------------------------------------------------------------------------------------------

/// A server that asks for the password in cleartext over a connection without TLS (pg_hba
/// `password`) does not get it: the client gets 28000 naming the setting that would allow
/// it, and the password is not retried.
#[tokio::test]
async fn cleartext_password_is_not_sent_without_tls() {
    let pg = support::shared();
    let pooler = Pooler::start_with_config(pg, "server:\n  password: clear_pass\n", &[]);
    let err = match pooler.try_connect("clear_user", DB).await {
        Ok(c) => match c.simple_query("select 1").await {
            Ok(_) => panic!("the password went to the server in cleartext"),
            Err(e) => e,
        },
        Err(e) => e,
    };
    assert_eq!(code(&err), "28000", "{err}");
    let text = err
        .as_db_error()
        .map(|e| e.message().to_owned())
        .unwrap_or_default();
    assert!(
        text.contains("cleartext") && text.contains("server.allow_cleartext_password"),
        "{err:?}"
    );
}

#[tokio::test]
async fn server_login_methods() {
    let pg = support::shared();
    for (user, password, method) in PASSWORD_USERS {
        // A cleartext password without TLS only when allowed (see the test after this one).
        let clear = if *method == "password" {
            "  allow_cleartext_password: true\n"
        } else {
            ""
        };
        // Inline password.
        let yaml = format!("server:\n  password: \"{password}\"\n{clear}pool:\n  size: 2\n");
        let pooler = Pooler::start_with_config(pg, &yaml, &[]);
        let client = pooler.connect(user, DB).await;
        assert_eq!(
            scalar(&client, "select current_user").await,
            *user,
            "{method}"
        );
        drop(client);
        drop(pooler);

        // Password file (first line).
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        std::fs::write(&file, format!("{password}\nignored second line\n")).unwrap();
        let yaml = format!("server:\n  password_file: {}\n{clear}", file.display());
        let pooler = Pooler::start_with_config(pg, &yaml, &[]);
        let client = pooler.connect(user, DB).await;
        assert_eq!(
            scalar(&client, "select current_user").await,
            *user,
            "{method} via password_file"
        );
        assert!(
            !pooler.all_lines().join("\n").contains(password)
                && !pooler.stderr().contains(password),
            "the password was printed"
        );
    }

    // A wrong password: the client gets 28P01, whatever the method.
    let pooler = Pooler::start_with_config(
        pg,
        "server:\n  password: wrong\n  allow_cleartext_password: true\n",
        &[],
    );
    for (user, _, method) in PASSWORD_USERS {
        let err = match pooler.try_connect(user, DB).await {
            Ok(c) => match c.simple_query("select 1").await {
                Ok(_) => panic!("{method}: a wrong server password worked"),
                Err(e) => e,
            },
            Err(e) => e,
        };
        assert_eq!(code(&err), "28P01", "{method}: {err}");
    }
    assert!(!pooler.has_exited());
}

// ---------------------------------------------------------------------------------------------
// Failures: clients that leave, servers that die.
// ---------------------------------------------------------------------------------------------

/// A client that leaves mid-transaction (Terminate, or just closing the socket) does not leak
/// its server: with a pool of one, the next client gets it at once and the insert is gone.
#[tokio::test]
async fn client_disconnect_mid_transaction_does_not_leak() {
    let pg = support::shared();
    pg.psql("drop table if exists core_leak; create table core_leak (x int)");
    let pooler = Pooler::start(pg, &["--mode", "transaction", "--pool-size", "1"]);

    // tokio-postgres: dropping the client sends Terminate.
    let a = pooler.connect("droid", DB).await;
    a.simple_query("BEGIN").await.expect("begin");
    a.simple_query("INSERT INTO core_leak VALUES (1)")
        .await
        .expect("insert");
    drop(a);
    let b = pooler.connect("droid", DB).await;
    let t0 = Instant::now();
    let n = within(
        3,
        "the next client gets the server",
        scalar(&b, "select count(*) from core_leak"),
    )
    .await;
    assert_eq!(n, "0");
    assert!(t0.elapsed() < Duration::from_secs(3));

    // Raw: the socket just closes, without Terminate, in the middle of a transaction.
    let mut r = Raw::connect(pooler.port(), "droid", DB).await;
    r.send(&raw::query("BEGIN")).await;
    let f = r.until_ready().await;
    assert_eq!(f.last().unwrap().body(), b"T");
    r.send(&raw::query("INSERT INTO core_leak VALUES (2)"))
        .await;
    r.until_ready().await;
    drop(r);
    let n = within(
        3,
        "server back after an abrupt close",
        scalar(&b, "select count(*) from core_leak"),
    )
    .await;
    assert_eq!(n, "0");

    // And one that leaves with a query running.
    let mut r = Raw::connect(pooler.port(), "droid", DB).await;
    r.send(&raw::query(
        "BEGIN; INSERT INTO core_leak VALUES (3); SELECT pg_sleep(1)",
    ))
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(r);
    let n = within(
        5,
        "server back after leaving mid-query",
        scalar(&b, "select count(*) from core_leak"),
    )
    .await;
    assert_eq!(n, "0");
    drop(b);
    pg.psql("drop table core_leak");
}

/// The server pid behind a raw session-mode client.
async fn backend_pid(c: &mut Raw) -> i32 {
    let frames = c.query("select pg_backend_pid()").await;
    assert_eq!(raw::tags(&frames), "TDCZ");
    raw::first_col(&frames[1]).unwrap().parse().unwrap()
}

/// A server killed under a client mid-query gives that client the server's own FATAL and a
/// close, as a direct connection would; killed under an idle session-mode client (at its
/// transaction boundary) it ends that server only, and the client's next query runs on
/// another (tests/it/idle_server_fatal.rs). Another client keeps working; the pool replaces it.
#[tokio::test]
async fn server_dies_under_client() {
    let pg = support::shared();
    let direct = pg.connect("droid", DB).await;
    let pooler = Pooler::start(pg, &["--mode", "session", "--pool-size", "2"]);
    let other = pooler.connect("droid", DB).await;
    assert_eq!(scalar(&other, "select 'other'").await, "other");

    // Idle holder (session mode).
    let (mut a, _) = Raw::logged_in(pooler.port(), "droid", DB).await;
    let pid = backend_pid(&mut a).await;
    let killed: bool = direct
        .query_one("select pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap()
        .get(0);
    assert!(killed);
    crate::session_signal::wait_gone(&pid.to_string()).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The idle client keeps its session: its next query runs on another server.
    let pid_after = backend_pid(&mut a).await;
    assert_ne!(pid_after, pid);
    drop(a);
    assert_eq!(
        scalar(&other, "select 'other still works'").await,
        "other still works"
    );

    // A new client gets a working (new) server.
    let (mut c, _) = Raw::logged_in(pooler.port(), "droid", DB).await;
    let pid2 = backend_pid(&mut c).await;
    assert_ne!(pid2, pid);
    drop(c);

    // Mid-query.
    let (mut a, _) = Raw::logged_in(pooler.port(), "droid", DB).await;
    let pid = backend_pid(&mut a).await;
    a.send(&raw::query("select pg_sleep(20)")).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    direct
        .query_one("select pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap();
    let frames = a.until_eof(5).await.expect("closed after the server died");
    let codes = error_codes(&frames);
    assert_eq!(codes, ["57P01"], "the server's FATAL and nothing more");
    assert_eq!(scalar(&other, "select 'still'").await, "still");
    // The harness reads the pooler's output on a thread of its own: wait for it to catch up.
    let closed = |lines: &[String]| {
        count_lines(lines, |l| {
            l.starts_with("[POOL] server ") && l.ends_with(" closed")
        }) >= 2
    };
    assert!(
        pooler.wait_for(closed, Duration::from_secs(5)),
        "dead servers must be closed: {:?}",
        pooler.lines()
    );
    assert!(!pooler.has_exited());
}

/// A server that dies while idle in the pool must not break the next client that gets it
/// (transaction mode: the client holds nothing between transactions).
#[tokio::test]
async fn idle_server_killed_is_replaced() {
    let pg = support::shared();
    let direct = pg.connect("droid", DB).await;
    let pooler = Pooler::start(pg, &["--mode", "transaction", "--pool-size", "1"]);
    let client = pooler.connect("droid", DB).await;
    let pid: i32 = scalar(&client, "select pg_backend_pid()")
        .await
        .parse()
        .unwrap();
    direct
        .query_one("select pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap();
    // Wait until PostgreSQL has really ended that backend.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let n: i64 = direct
            .query_one(
                "select count(*) from pg_stat_activity where pid = $1",
                &[&pid],
            )
            .await
            .unwrap()
            .get(0);
        if n == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "backend {pid} still there");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let res = client.simple_query("select pg_backend_pid()").await;
    match res {
        Ok(msgs) => {
            let new_pid: i32 = rows(&msgs)[0][0].as_deref().unwrap().parse().unwrap();
            assert_ne!(new_pid, pid);
        }
        Err(e) => panic!(
            "a client that held nothing got the dead server: {e} ({}); is_closed={}",
            code(&e),
            client.is_closed()
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// Limits.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn max_client_connections() {
    let pg = support::shared();
    let pooler = Pooler::start_with_config(pg, "client:\n  max_connections: 3\n", &[]);
    let mut clients = Vec::new();
    for _ in 0..3 {
        let c = pooler.connect("droid", DB).await;
        assert_eq!(scalar(&c, "select 1").await, "1");
        clients.push(c);
    }
    let Err(err) = pooler.try_connect("droid", DB).await else {
        panic!("the 4th client must be refused");
    };
    assert_eq!(code(&err), "53300");
    // Raw: FATAL then close.
    let mut w = Raw::open(pooler.port()).await;
    w.send(&startup_bytes(0, &[("user", "droid"), ("database", DB)]))
        .await;
    let frames = w.until_eof(5).await.expect("closed");
    assert_eq!(error_codes(&frames), vec!["53300"]);
    // The others are unaffected; when one leaves, a new one gets in.
    assert_eq!(scalar(&clients[2], "select 3").await, "3");
    clients.pop();
    expect_line(&pooler, "[POOL] client 3 disconnected", 5).await;
    let c = pooler.connect("droid", DB).await;
    assert_eq!(scalar(&c, "select 'in'").await, "in");
}

/// Query wait timeout: with the only server held, another client's query gets 57014 after
/// about query_wait_timeout and its session stays usable.
#[tokio::test]
async fn query_wait_timeout() {
    let pg = support::shared();
    let yaml = "pool:\n  size: 1\n  query_wait_timeout: 1s\nserver:\n  connect_timeout: 500ms\n";
    let pooler = Pooler::start_with_config(pg, yaml, &["--mode", "transaction"]);
    let holder = pooler.connect("droid", DB).await;
    let waiter = pooler.connect("droid", DB).await;
    holder.simple_query("BEGIN").await.expect("begin");

    let t0 = Instant::now();
    let err = within(10, "wait timeout", waiter.simple_query("select 1"))
        .await
        .expect_err("no server within 1 s");
    let took = t0.elapsed();
    assert_eq!(code(&err), "57014");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(3),
        "timed out after {took:?}, want about 1 s"
    );
    // Extended protocol too.
    let err = within(
        10,
        "wait timeout (extended)",
        waiter.query_typed("select 1", &[]),
    )
    .await
    .expect_err("no server within 1 s");
    assert_eq!(code(&err), "57014");

    holder.simple_query("COMMIT").await.expect("commit");
    assert_eq!(scalar(&waiter, "select 'served'").await, "served");
    let r = waiter
        .query_typed("select 5::int4", &[])
        .await
        .expect("extended after");
    assert_eq!(r[0].get::<_, i32>(0), 5);
}

/// Beyond max_waiting_clients a query is refused at once with 53300; the waiting one is served.
#[tokio::test]
async fn max_waiting_clients() {
    let pg = support::shared();
    let yaml = "pool:\n  size: 1\n  max_waiting_clients: 1\n  query_wait_timeout: 20s\n";
    let pooler = Pooler::start_with_config(pg, yaml, &["--mode", "transaction"]);
    let holder = pooler.connect("droid", DB).await;
    let waiter = pooler.connect("droid", DB).await;
    let refused = pooler.connect("droid", DB).await;
    holder.simple_query("BEGIN").await.expect("begin");
    let waiting = tokio::spawn(async move {
        let r = waiter.simple_query("select 'waited'").await;
        (r, waiter)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t0 = Instant::now();
    let err = within(5, "refusal", refused.simple_query("select 1"))
        .await
        .expect_err("over max_waiting_clients");
    assert_eq!(code(&err), "53300");
    assert!(
        t0.elapsed() < Duration::from_millis(500),
        "refused only after {:?}",
        t0.elapsed()
    );
    holder.simple_query("COMMIT").await.expect("commit");
    let (r, _waiter) = within(5, "the waiter is served", waiting).await.unwrap();
    assert_eq!(
        rows(&r.expect("waited query"))[0][0].as_deref(),
        Some("waited")
    );
    assert_eq!(scalar(&refused, "select 'later'").await, "later");
}

// ---------------------------------------------------------------------------------------------
// Startup: protocol negotiation, SSL/GSS requests, missing user.
// ---------------------------------------------------------------------------------------------

/// NegotiateProtocolVersion body: newest minor, then the unrecognized options.
fn negotiate_body(f: &Frame) -> (i32, Vec<String>) {
    let b = f.body();
    let minor = i32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let n = i32::from_be_bytes([b[4], b[5], b[6], b[7]]) as usize;
    let names: Vec<String> = b[8..]
        .split(|&c| c == 0)
        .take(n)
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect();
    (minor, names)
}

#[tokio::test]
async fn protocol_version_negotiation() {
    let pg = support::shared();
    let pooler = Pooler::start(pg, &["--pool-size", "2"]);
    for (minor, opts) in [
        (2u16, vec![("_pq_.test", "1")]),
        (9999u16, vec![("_pq_.test", "1")]),
        (2u16, vec![]),
        (0u16, vec![("_pq_.test", "1"), ("_pq_.other", "x")]),
    ] {
        let mut params = vec![("user", "droid"), ("database", DB)];
        params.extend(opts.iter().copied());
        let mut w = Raw::open(pooler.port()).await;
        w.send(&startup_bytes(minor, &params)).await;
        let frames = w.until_ready().await;
        let tags = raw::tags(&frames);
        assert_eq!(&tags[..2], "vR", "3.{minor} {opts:?}: {tags}");
        assert!(tags.ends_with("KZ"), "3.{minor}: {tags}");
        let (newest, names) = negotiate_body(&frames[0]);
        assert_eq!(newest, 0, "newest minor version supported");
        let want: Vec<String> = opts.iter().map(|(k, _)| k.to_string()).collect();
        assert_eq!(names, want, "3.{minor}: unrecognized options");
        assert_eq!(frames[1].body(), &0i32.to_be_bytes(), "AuthenticationOk");
        let q = w.query("select 'negotiated'").await;
        assert_eq!(raw::tags(&q), "TDCZ");
        assert_eq!(raw::first_col(&q[1]).as_deref(), Some("negotiated"));
    }
    // Plain 3.0 gets no NegotiateProtocolVersion.
    let (mut w, frames) = Raw::logged_in(pooler.port(), "droid", DB).await;
    assert!(!raw::tags(&frames).contains('v'));
    assert_eq!(raw::tags(&w.query("select 1").await), "TDCZ");
}

#[tokio::test]
async fn ssl_and_gss_requests_get_n() {
    let pg = support::shared();
    let pooler = Pooler::start(pg, &["--pool-size", "2"]);
    let ssl = [0u8, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
    let gss = [0u8, 0, 0, 8, 0x04, 0xd2, 0x16, 0x30];
    for seq in [vec![&ssl], vec![&gss], vec![&gss, &ssl]] {
        let mut w = Raw::open(pooler.port()).await;
        for req in &seq {
            w.send(&req[..]).await;
            assert_eq!(w.read_byte().await, b'N');
        }
        w.send(&startup_bytes(0, &[("user", "droid"), ("database", DB)]))
            .await;
        let frames = w.until_ready().await;
        assert_eq!(&raw::tags(&frames)[..1], "R");
        let q = w.query("select 'after N'").await;
        assert_eq!(raw::first_col(&q[1]).as_deref(), Some("after N"));
    }
    // tokio-postgres with sslmode=prefer falls back to plain after N.
    let c = support::connect(&format!(
        "{} sslmode=prefer",
        pooler.conn_string("droid", DB)
    ))
    .await;
    assert_eq!(scalar(&c, "select 'prefer'").await, "prefer");
}

#[tokio::test]
async fn startup_without_user_is_refused() {
    let pg = support::shared();
    let pooler = Pooler::start(pg, &["--pool-size", "1"]);
    for params in [vec![("database", DB)], vec![("user", ""), ("database", DB)]] {
        let mut w = Raw::open(pooler.port()).await;
        w.send(&startup_bytes(0, &params)).await;
        let frames = w.until_eof(5).await.expect("closed");
        assert_eq!(raw::tags(&frames), "E", "{params:?}");
        assert_eq!(raw::sqlstate(&frames[0]), "28000");
        let fields = backend::parse_error(frames[0].body()).unwrap();
        assert_eq!(fields.severity, "FATAL");
    }
    let c = pooler.connect("droid", DB).await;
    assert_eq!(scalar(&c, "select 1").await, "1");
}

// ---------------------------------------------------------------------------------------------
// Event lines.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn event_lines_in_order() {
    let pg = support::shared();
    let pooler = Pooler::start(pg, &["--mode", "transaction", "--pool-size", "2"]);
    let port = pooler.port();
    let c = pooler.connect("droid", DB).await;
    assert_eq!(scalar(&c, "select 1").await, "1");
    drop(c);
    expect_line(&pooler, "[POOL] client 1 disconnected", 5).await;
    let want = vec![
        format!("[POOL] listening on 127.0.0.1:{port}"),
        "[POOL] client 1 connected".to_owned(),
        "[POOL] server 1 connected".to_owned(),
        "[POOL] client 1 uses server 1".to_owned(),
        "[POOL] client 1 released server 1".to_owned(),
        "[POOL] client 1 disconnected".to_owned(),
    ];
    assert_eq!(pooler.lines(), want);

    let c = pooler.connect("droid", DB).await;
    c.simple_query("select 2").await.unwrap();
    drop(c);
    expect_line(&pooler, "[POOL] client 2 disconnected", 5).await;
    let mut want2 = want.clone();
    want2.extend([
        "[POOL] client 2 connected".to_owned(),
        "[POOL] client 2 uses server 1".to_owned(),
        "[POOL] client 2 released server 1".to_owned(),
        "[POOL] client 2 disconnected".to_owned(),
    ]);
    assert_eq!(pooler.lines(), want2);
    // stdout holds nothing but event lines.
    assert_eq!(pooler.all_lines(), want2);
}

// ---------------------------------------------------------------------------------------------
// More parameter sync and raw COPY.
// ---------------------------------------------------------------------------------------------

/// Startup settings that PostgreSQL does not report (work_mem, search_path given with
/// `options`) apply to the client that asked for them only: another client later sharing the
/// same server (pool size 1) sees the defaults.
#[tokio::test]
async fn startup_settings_do_not_leak_to_other_clients() {
    let pg = support::shared();
    let pooler = Pooler::start(pg, &["--mode", "transaction", "--pool-size", "1"]);
    let options = "-c work_mem=7MB -c search_path=core_nowhere,public -c DateStyle=German";
    let a = connect_with_options(&pooler, options).await;
    // A direct connection with the same options is the reference.
    let mut cfg = tokio_postgres::Config::new();
    cfg.host("127.0.0.1")
        .port(pg.port)
        .user("droid")
        .dbname(DB)
        .options(options);
    let (direct, connection) = cfg.connect(NoTls).await.expect("direct connect");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    // Every difference is collected, so one run shows them all.
    let mut problems = Vec::new();
    for sql in [
        "show search_path",
        "select current_schemas(true)::text",
        "show DateStyle",
        "select '2024-01-02'::date::text",
        "show work_mem",
    ] {
        let (via, want) = (scalar(&a, sql).await, scalar(&direct, sql).await);
        if via != want {
            problems.push(format!(
                "client A `{sql}`: {via:?} through the pooler, {want:?} directly"
            ));
        }
    }
    let b = pooler.connect("droid", DB).await;
    for (sql, want) in [
        ("select '2024-01-02'::date::text", "2024-01-02"),
        ("show work_mem", "4MB"),
        ("show search_path", "\"$user\", public"),
    ] {
        let got = scalar(&b, sql).await;
        if got != want {
            problems.push(format!(
                "client B `{sql}`: {got:?}, want {want:?} (client A's startup setting leaked)"
            ));
        }
    }
    let got = scalar(&a, "show work_mem").await;
    if got != "7MB" {
        problems.push(format!("client A lost its work_mem: {got:?}"));
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

/// A startup setting PostgreSQL refuses (bad TimeZone, unknown parameter) is refused as a
/// direct connection would refuse it (22023 / 42704), at login or at the latest at the first
/// query, instead of being silently ignored.
#[tokio::test]
async fn invalid_startup_setting_is_an_error() {
    let pg = support::shared();
    let pooler = Pooler::start(pg, &["--mode", "transaction", "--pool-size", "1"]);
    for (options, want) in [
        ("-c TimeZone=Not/AZone", "22023"),
        ("-c core_no_such_guc=1", "42704"),
    ] {
        // What PostgreSQL itself says.
        let mut direct = tokio_postgres::Config::new();
        direct
            .host("127.0.0.1")
            .port(pg.port)
            .user("droid")
            .dbname(DB)
            .options(options);
        let Err(err) = direct.connect(NoTls).await else {
            panic!("PostgreSQL must refuse {options}");
        };
        assert_eq!(code(&err), want, "direct {options}");

        let mut cfg = tokio_postgres::Config::new();
        cfg.host("127.0.0.1")
            .port(pooler.port())
            .user("droid")
            .dbname(DB)
            .options(options);
        let got = match cfg.connect(NoTls).await {
            Err(e) => code(&e),
            Ok((client, connection)) => {
                tokio::spawn(async move {
                    let _ = connection.await;
                });
                match client.simple_query("show timezone").await {
                    Err(e) => code(&e),
                    Ok(m) => format!("no error; the query ran with timezone {:?}", rows(&m)),
                }
            }
        };
        assert_eq!(got, want, "through the pooler with {options}");
    }
}

/// client_encoding from the startup packet: the pooler says it at login, spelled as
/// PostgreSQL reports it, and the server converts for that client only.
#[tokio::test]
async fn client_encoding_is_per_client() {
    let pg = support::shared();
    let pooler = Pooler::start(pg, &["--mode", "transaction", "--pool-size", "1"]);
    client_encoding_is_reported_as_postgresql_spells_it(&pooler).await;
    let mut latin = Raw::open(pooler.port()).await;
    latin
        .send(&startup_bytes(
            0,
            &[
                ("user", "droid"),
                ("database", DB),
                ("client_encoding", "LATIN1"),
            ],
        ))
        .await;
    let login = latin.until_ready().await;
    let told: Vec<(String, String)> = login
        .iter()
        .filter(|f| f.tag == backend::PARAMETER_STATUS_TAG)
        .map(|f| {
            let (k, v) = backend::parse_parameter_status(f.body()).unwrap();
            (k.to_owned(), v.to_owned())
        })
        .collect();
    assert!(
        told.contains(&("client_encoding".to_owned(), "LATIN1".to_owned())),
        "{told:?}"
    );
    let (mut utf8, _) = Raw::logged_in(pooler.port(), "droid", DB).await;
    for _ in 0..2 {
        let f = latin.query("select chr(233)").await;
        assert_eq!(raw::tags(&f), "TDCZ");
        assert_eq!(&f[1].body()[6..], &[0xe9]);
        let f = utf8.query("select chr(233)").await;
        assert_eq!(&f[1].body()[6..], &[0xc3, 0xa9]);
    }
}

/// COPY through the simple protocol at top level in transaction mode, raw: FROM STDIN with
/// CopyDone, with CopyFail, and TO STDOUT; the server is released after each.
#[tokio::test]
async fn raw_copy_in_transaction_mode() {
    let pg = support::shared();
    pg.psql("drop table if exists core_rawcopy; create table core_rawcopy (a int, b text)");
    let pooler = Pooler::start(pg, &["--mode", "transaction", "--pool-size", "1"]);
    let mut c = Raw::connect(pooler.port(), "droid", DB).await;
    let copy_data = |data: &[u8]| {
        let mut b = BytesMut::new();
        let at = frame::begin(&mut b, frontend::COPY_DATA_TAG);
        b.put_slice(data);
        frame::finish(&mut b, at);
        b
    };
    let copy_done = || {
        let mut b = BytesMut::new();
        let at = frame::begin(&mut b, frontend::COPY_DONE_TAG);
        frame::finish(&mut b, at);
        b
    };
    let copy_fail = |why: &str| {
        let mut b = BytesMut::new();
        let at = frame::begin(&mut b, frontend::COPY_FAIL_TAG);
        b.put_slice(why.as_bytes());
        b.put_u8(0);
        frame::finish(&mut b, at);
        b
    };

    c.send(&raw::query("COPY core_rawcopy FROM STDIN")).await;
    assert_eq!(c.recv().await.tag, backend::COPY_IN_RESPONSE_TAG);
    c.send(&copy_data(b"1\tone\n2\ttwo\n")).await;
    c.send(&copy_data(b"3\tthree\n")).await;
    c.send(&copy_done()).await;
    let f = c.until_ready().await;
    assert_eq!(raw::tags(&f), "CZ");
    assert_eq!(&f[0].body()[..f[0].body().len() - 1], b"COPY 3");

    c.send(&raw::query("COPY core_rawcopy FROM STDIN")).await;
    assert_eq!(c.recv().await.tag, backend::COPY_IN_RESPONSE_TAG);
    c.send(&copy_data(b"4\tfour\n")).await;
    c.send(&copy_fail("changed my mind")).await;
    let f = c.until_ready().await;
    assert_eq!(raw::tags(&f), "EZ");
    assert_eq!(raw::sqlstate(&f[0]), "57014");

    // Everything in one write: the query, the data and the end.
    let mut all = raw::query("COPY core_rawcopy FROM STDIN").to_vec();
    all.extend_from_slice(&copy_data(b"5\tfive\n"));
    all.extend_from_slice(&copy_done());
    c.send(&all).await;
    let f = c.until_ready().await;
    assert_eq!(raw::tags(&f), "GCZ");

    c.send(&raw::query(
        "COPY (select a, b from core_rawcopy order by a) TO STDOUT",
    ))
    .await;
    let f = c.until_ready().await;
    assert_eq!(raw::tags(&f), "HddddcCZ");
    let rows: Vec<&[u8]> = f[1..5].iter().map(|m| m.body()).collect();
    assert_eq!(
        rows,
        vec![&b"1\tone\n"[..], b"2\ttwo\n", b"3\tthree\n", b"5\tfive\n"]
    );
    // The event lines come through a reader thread: wait for them rather than race it.
    let released =
        |lines: &[String]| count_lines(lines, |l| l == "[POOL] client 1 released server 1") == 4;
    assert!(
        pooler.wait_for(released, Duration::from_secs(5)),
        "{:?}",
        pooler.lines()
    );
    drop(c);
    pg.psql("drop table core_rawcopy");
}

/// Large values both ways: a 10 MB parameter and a 20 MB result row.
#[tokio::test]
async fn large_values() {
    let pg = support::shared();
    let pooler = Pooler::start(pg, &["--mode", "transaction", "--pool-size", "1"]);
    let client = pooler.connect("droid", DB).await;
    let big = "abcdefghij".repeat(1_000_000);
    let r = within(
        30,
        "10 MB parameter",
        client.query_typed(
            "select length($1::text), md5($1::text)",
            &[(&big, Type::TEXT)],
        ),
    )
    .await
    .expect("big parameter");
    assert_eq!(r[0].get::<_, i32>(0), 10_000_000);
    let direct = pg.connect("droid", DB).await;
    let want: String = direct
        .query_one("select md5(repeat('abcdefghij', 1000000))", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(r[0].get::<_, String>(1), want);
    let r = within(
        30,
        "20 MB row",
        client.query_typed("select repeat('z', 20000000)", &[]),
    )
    .await
    .expect("big row");
    let s: String = r[0].get(0);
    assert_eq!(s.len(), 20_000_000);
    assert!(s.bytes().all(|b| b == b'z'));
    assert_eq!(scalar(&client, "select 'after'").await, "after");
}

/// Writes `n` copies of a simple query in one stream while reading every answer concurrently
/// (as a pipelining client does); returns how many ReadyForQuery arrived, or None if the
/// exchange stalled for `stall_secs`.
async fn big_pipeline(w: Raw, n: usize, sql: &str, stall_secs: u64) -> Option<usize> {
    let (stream, mut buf) = w.into_parts();
    let (mut rd, mut wr) = stream.into_split();
    let q = raw::query(sql);
    let writer = tokio::spawn(async move {
        let mut chunk = Vec::with_capacity(q.len() * 1000);
        let mut sent = 0;
        while sent < n {
            chunk.clear();
            for _ in 0..1000.min(n - sent) {
                chunk.extend_from_slice(&q);
                sent += 1;
            }
            if wr.write_all(&chunk).await.is_err() {
                break;
            }
        }
        wr
    });
    let mut ready = 0;
    while ready < n {
        while let Some(f) = frame::cut(&mut buf, 1 << 30).expect("frame") {
            if f.tag == backend::READY_FOR_QUERY_TAG {
                ready += 1;
            }
        }
        if ready >= n {
            break;
        }
        match tokio::time::timeout(Duration::from_secs(stall_secs), rd.read_buf(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(_)) => {}
            Err(_) => {
                writer.abort();
                return None;
            }
        }
    }
    let _ = writer.await;
    Some(ready)
}

/// A client that pipelines a lot (writing while it reads) must not deadlock the pooler: the
/// pooler may not block writing to the server while the server is blocked writing results.
#[tokio::test]
async fn large_pipeline_does_not_deadlock() {
    let pg = support::shared();
    let n = 20_000;
    // Big queries and big answers: megabytes in flight both ways.
    let sql = format!("select repeat('x', 4000) -- {}", "p".repeat(2000));
    let sql = sql.as_str();
    // Directly against PostgreSQL the same client works.
    let (w, _) = Raw::logged_in(pg.port, "droid", DB).await;
    assert_eq!(
        big_pipeline(w, n, sql, 10).await,
        Some(n),
        "the client itself must work directly"
    );
    let pooler = Pooler::start(pg, &["--mode", "transaction", "--pool-size", "1"]);
    let (w, _) = Raw::logged_in(pooler.port(), "droid", DB).await;
    let got = big_pipeline(w, n, sql, 10).await;
    if got != Some(n) {
        // What the server was doing meanwhile (ClientWrite: blocked writing to the pooler).
        let direct = pg.connect("droid", DB).await;
        let waits: Vec<String> = direct
            .query(
                "select coalesce(wait_event, '-') || ' / ' || state from pg_stat_activity \
                 where backend_type = 'client backend' and query like 'select repeat(%'",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        panic!(
            "the pipeline through the pooler stalled for 10 s (got {got:?} of {n} answers); \
             server backends: {waits:?}"
        );
    }
    let c = pooler.connect("droid", DB).await;
    assert_eq!(scalar(&c, "select 'alive'").await, "alive");
}

/// After PostgreSQL restarts, a transaction-mode client that held no server keeps working: the
/// pool's dead idle servers are replaced, not handed out.
#[tokio::test]
async fn postgres_restart_is_survived_by_idle_clients() {
    let pg = PgServer::start_new();
    let pooler = Pooler::start(&pg, &["--mode", "transaction", "--pool-size", "2"]);
    let a = pooler.connect("droid", DB).await;
    assert_eq!(scalar(&a, "select 'before'").await, "before");
    pg.restart();
    let res = within(10, "query after restart", a.simple_query("select 'after'")).await;
    let got = match res {
        Ok(m) => rows(&m),
        Err(e) => panic!(
            "a client that held nothing failed after a PostgreSQL restart: {e} ({})",
            code(&e)
        ),
    };
    assert_eq!(got, vec![vec![Some("after".to_owned())]]);
    let b = pooler.connect("droid", DB).await;
    assert_eq!(scalar(&b, "select 'new client'").await, "new client");
}

/// A pool per (database, user): each pair gets its own servers, logged in as that user to that
/// database; application_name is per client.
#[tokio::test]
async fn pools_per_database_and_user() {
    let pg = support::shared();
    let pooler = Pooler::start(pg, &["--mode", "transaction", "--pool-size", "1"]);
    let mut clients = Vec::new();
    for (user, db) in [
        ("droid", "droid"),
        ("droid", "postgres"),
        ("postgres", "droid"),
        ("postgres", "postgres"),
    ] {
        let conn = format!(
            "{} application_name=app_{user}_{db}",
            pooler.conn_string(user, db)
        );
        clients.push((user, db, support::connect(&conn).await));
    }
    for _ in 0..2 {
        for (user, db, c) in &clients {
            let msgs = c
                .simple_query(
                    "select current_user, current_database(), current_setting('application_name')",
                )
                .await
                .expect("query");
            assert_eq!(
                rows(&msgs),
                vec![vec![
                    Some(user.to_string()),
                    Some(db.to_string()),
                    Some(format!("app_{user}_{db}"))
                ]]
            );
        }
    }
    let lines = pooler.lines();
    assert_eq!(
        count_lines(&lines, |l| l.starts_with("[POOL] server ")
            && l.ends_with(" connected")),
        4,
        "{lines:?}"
    );
}

/// Messages sent in the same write as the startup packet (no waiting for ReadyForQuery) are
/// kept and answered after the login.
#[tokio::test]
async fn query_pipelined_with_startup() {
    let pg = support::shared();
    let pooler = Pooler::start(pg, &["--mode", "transaction", "--pool-size", "1"]);
    let mut w = Raw::open(pooler.port()).await;
    let mut bytes = startup_bytes(0, &[("user", "droid"), ("database", DB)]).to_vec();
    bytes.extend_from_slice(&raw::query("select 'eager'"));
    bytes.extend_from_slice(&raw::batch(&[
        raw::parse("", "select $1::int4 + 1"),
        raw::bind("", "", &[Some("41")]),
        raw::execute(""),
        raw::sync(),
    ]));
    w.send(&bytes).await;
    let login = w.until_ready().await;
    assert_eq!(&raw::tags(&login)[..1], "R");
    let q = w.until_ready().await;
    assert_eq!(raw::tags(&q), "TDCZ");
    assert_eq!(raw::first_col(&q[1]).as_deref(), Some("eager"));
    let e = w.until_ready().await;
    assert_eq!(raw::tags(&e), "12DCZ");
    assert_eq!(raw::first_col(&e[2]).as_deref(), Some("42"));
}

/// Statement mode: a transaction block sent as pipelined queries (BEGIN, INSERT, COMMIT in one
/// write, before any answer) is refused as a whole: nothing of it is committed, and the client
/// is told.
#[tokio::test]
async fn statement_mode_refuses_pipelined_transaction() {
    let pg = support::shared();
    pg.psql("drop table if exists core_stmt_pipe; create table core_stmt_pipe (x int)");
    let pooler = Pooler::start(pg, &["--mode", "statement", "--pool-size", "1"]);
    let mut c = Raw::connect(pooler.port(), "droid", DB).await;
    c.send(&raw::batch(&[
        raw::query("BEGIN"),
        raw::query("INSERT INTO core_stmt_pipe VALUES (1)"),
        raw::query("COMMIT"),
    ]))
    .await;
    let mut frames = Vec::new();
    for _ in 0..3 {
        frames.extend(c.until_ready().await);
    }
    let codes = error_codes(&frames);
    assert!(
        codes.contains(&"0A000".to_owned()),
        "BEGIN must be refused: {} {codes:?}",
        raw::tags(&frames)
    );
    let direct = pg.connect("droid", DB).await;
    let n: i64 = direct
        .query_one("select count(*) from core_stmt_pipe", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        n,
        0,
        "a refused transaction block committed its INSERT (client saw {} {codes:?})",
        raw::tags(&frames)
    );
    // The session goes on, outside any transaction.
    c.send(&raw::query("select 'usable'")).await;
    let f = c.until_ready().await;
    assert_eq!(raw::first_col(&f[1]).as_deref(), Some("usable"));
    pg.psql("drop table core_stmt_pipe");
}

/// A client that reads late: a 20 MB result fills its socket, so the pooler's writes straight
/// from the server's buffer are cut short and the rest waits in the client buffer. Every row
/// arrives, in order and intact, and the session goes on.
#[tokio::test]
async fn large_result_to_a_client_that_reads_late() {
    let pooler = Pooler::start(support::shared(), &["--mode", "transaction"]);
    let mut c = Raw::connect(pooler.port(), "droid", DB).await;
    c.send(&raw::query(
        "select g, repeat(chr(65 + g % 26), 10000) from generate_series(1, 2000) g",
    ))
    .await;
    // Not reading meanwhile: the socket fills.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let frames = c.until_ready().await;
    assert_eq!(raw::tags(&frames), format!("T{}CZ", "D".repeat(2000)));
    for (i, f) in frames[1..2001].iter().enumerate() {
        let g = i + 1;
        assert_eq!(raw::first_col(f).as_deref(), Some(g.to_string().as_str()));
        let want = char::from(65 + (g % 26) as u8).to_string().repeat(10000);
        assert!(f.body().ends_with(want.as_bytes()), "row {g} is damaged");
    }
    c.send(&raw::query("select 'after'")).await;
    let f = c.until_ready().await;
    assert_eq!(raw::first_col(&f[1]).as_deref(), Some("after"));
}

/// Busy clients keep their buffers between transactions, but only a bounded number of them:
/// past that, a client that goes idle frees its buffers, and a client that leaves gives its
/// slot back (the per-client idle memory bound of issue 4 holds however many ran queries).
/// The bound is `client.warm_sessions` (1024 by default; smaller here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_sessions_are_bounded_and_given_back() {
    const WARM_MAX: u64 = 100;
    let pooler = Pooler::start_with_config(
        support::shared(),
        "client:\n  max_connections: 2000\n  warm_sessions: 100\npool:\n  size: 2\n",
        &["--mode", "transaction"],
    );
    let warm_now = |p: &Pooler| -> u64 {
        let (code, body) = tokio::task::block_in_place(|| p.admin_get("/status"));
        assert_eq!(code, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).expect("status JSON");
        v["warm_sessions"]
            .as_u64()
            .expect("warm_sessions in /status")
    };
    // A session takes its slot just after it wrote the reply: give it a moment.
    let warm = |p: &Pooler, want: u64| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let n = warm_now(p);
            if n == want || Instant::now() > deadline {
                return n;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let mut clients = Vec::new();
    for i in 0..WARM_MAX + 50 {
        let (mut w, _) = Raw::logged_in(pooler.port(), "droid", DB).await;
        let frames = w.query("SELECT 1").await;
        assert_eq!(raw::tags(&frames), "TDCZ", "client {i}");
        clients.push(w);
        if i == 9 {
            assert_eq!(
                warm(&pooler, 10),
                10,
                "each client that ran a query is warm"
            );
        }
    }
    assert_eq!(warm(&pooler, WARM_MAX), WARM_MAX, "the warm set is bounded");
    // And stays bounded (no late taker beyond it).
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(warm_now(&pooler), WARM_MAX, "the warm set is bounded");
    // Clients beyond the bound still work (cold: buffers taken per transaction).
    for w in clients.iter_mut().rev().take(5) {
        assert_eq!(raw::tags(&w.query("SELECT 1").await), "TDCZ");
    }
    let rss_busy = vm_rss_kb(pooler.pid());
    for mut w in clients.drain(..) {
        let mut b = BytesMut::new();
        frontend::terminate(&mut b);
        w.send(&b).await;
        assert!(w.until_eof(10).await.is_some(), "closed after Terminate");
    }
    assert_eq!(warm(&pooler, 0), 0, "slots come back when clients leave");
    // A new client becomes warm again.
    let (mut w, _) = Raw::logged_in(pooler.port(), "droid", DB).await;
    assert_eq!(raw::tags(&w.query("SELECT 1").await), "TDCZ");
    assert_eq!(warm(&pooler, 1), 1);
    eprintln!(
        "VmRSS with {} clients after a query each: {rss_busy} kB",
        WARM_MAX + 50
    );
}

/// The client encoding a client asks for at startup is reported back as PostgreSQL spells it
/// (asyncpg sends `utf-8` and checks for `UTF8`): the pooler greets the client itself, before
/// any server has seen the setting, so it must spell it as a server would.
async fn client_encoding_is_reported_as_postgresql_spells_it(pooler: &Pooler) {
    let reported = |frames: Vec<Frame>| {
        frames
            .iter()
            .filter(|f| f.tag == backend::PARAMETER_STATUS_TAG)
            .filter_map(|f| backend::parse_parameter_status(f.body()).ok())
            .find(|(k, _)| *k == "client_encoding")
            .map(|(_, v)| v.to_owned())
    };
    for asked in [
        "utf-8",
        "Unicode",
        "latin1",
        "ISO-8859-1",
        "sql_ascii",
        "UTF8",
    ] {
        let params = [
            ("user", "droid"),
            ("database", DB),
            ("client_encoding", asked),
        ];
        let direct = reported(Raw::login_frames_with(support::shared().port, &params).await);
        let pooled = reported(Raw::login_frames_with(pooler.port(), &params).await);
        assert!(
            direct.is_some(),
            "{asked}: PostgreSQL reports client_encoding"
        );
        assert_eq!(pooled, direct, "{asked}");
        // And the session runs in it.
        let mut c = Raw::connect_with(pooler.port(), &params).await;
        c.send(&raw::query("show client_encoding")).await;
        let f = c.until_ready().await;
        assert_eq!(raw::first_col(&f[1]), direct, "{asked}");
    }
}
