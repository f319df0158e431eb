//! Issue 3: prepared statements that survive transaction pooling (`--track-prepared`).
//!
//! Contract: `../shared/reference/transaction-pooling-prepared-statements.txt`. Most tests drive
//! the pooler message by message with [`Raw`] and check every reply (tags, SQLSTATEs, data) and
//! the `[POOL]` lines; the last ones run real drivers (tokio-postgres, pgbench) through a pool of
//! 2 with 20 concurrent clients. The Python and Node drivers live in `tests/drivers/`
//! (`scripts/driver-tests.sh`).
//!
//! Who answered an ErrorResponse: PostgreSQL always sends the `R` (routine) field, the pooler
//! never does; [`by_pooler`] tells them apart.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use droid_pool::protocol::frame::{begin, finish, Frame};
use droid_pool::protocol::frontend;
use tokio_postgres::types::ToSql;

use crate::support::raw::{self, batch, bind, close, describe, execute, parse, query, sync, Raw};
use crate::support::{self, Pooler, DB};

const USER: &str = "droid";
const WAIT: Duration = Duration::from_secs(10);
/// The contract's command line (plus the port flags the harness adds).
const TRACKED: &[&str] = &[
    "--pool-size",
    "2",
    "--mode",
    "transaction",
    "--track-prepared",
];
/// Transaction mode, tracking on, idle servers handed out in rotation.
const ROUND_ROBIN: &str = "pool:\n  size: 2\n  mode: transaction\n  track_prepared: true\n  \
                           server_round_robin: true\n";

// ---------------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------------

fn start_tracked() -> Pooler {
    Pooler::start(support::shared(), TRACKED)
}

fn start_round_robin() -> Pooler {
    Pooler::start_with_config(support::shared(), ROUND_ROBIN, &[])
}

async fn connect(pooler: &Pooler) -> Raw {
    Raw::connect(pooler.port(), USER, DB).await
}

/// Sends `msgs` as one write and reads up to the `n`-th ReadyForQuery.
async fn exchange_n(raw: &mut Raw, msgs: &[BytesMut], n: usize) -> Vec<Frame> {
    raw.send(&batch(msgs)).await;
    let mut out = Vec::new();
    for _ in 0..n {
        out.extend(raw.until_ready().await);
    }
    out
}

/// Sends `msgs` as one write and reads up to the next ReadyForQuery.
async fn exchange(raw: &mut Raw, msgs: &[BytesMut]) -> Vec<Frame> {
    exchange_n(raw, msgs, 1).await
}

/// A simple Query, read to its ReadyForQuery.
async fn simple(raw: &mut Raw, sql: &str) -> Vec<Frame> {
    exchange(raw, &[query(sql)]).await
}

/// The fields of an ErrorResponse or NoticeResponse: (field type, value).
fn error_fields(f: &Frame) -> Vec<(u8, String)> {
    let body = f.body();
    let mut out = Vec::new();
    let mut i = 0;
    while i < body.len() && body[i] != 0 {
        let kind = body[i];
        let end = i + 1 + body[i + 1..].iter().position(|&b| b == 0).expect("NUL");
        out.push((
            kind,
            String::from_utf8_lossy(&body[i + 1..end]).into_owned(),
        ));
        i = end + 1;
    }
    out
}

/// Whether an ErrorResponse came from the pooler: PostgreSQL always names its routine (`R`).
fn by_pooler(f: &Frame) -> bool {
    !error_fields(f).iter().any(|(k, _)| *k == b'R')
}

/// Every frame, readable, for assertion messages.
fn show(frames: &[Frame]) -> String {
    frames
        .iter()
        .map(|f| match f.tag {
            b'E' | b'N' => {
                let fields = error_fields(f);
                let get = |k: u8| {
                    fields
                        .iter()
                        .find(|(t, _)| *t == k)
                        .map(|(_, v)| v.as_str())
                        .unwrap_or("")
                };
                format!(
                    "{}({} {:?}{})",
                    f.tag as char,
                    get(b'C'),
                    get(b'M'),
                    if by_pooler(f) { " [pooler]" } else { "" }
                )
            }
            b'D' => format!("D{:?}", row(f)),
            b'C' => format!("C({})", command_tag(f)),
            b'Z' => format!("Z({})", f.body()[0] as char),
            b'T' => format!("T{:?}", columns(f)),
            t => (t as char).to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Asserts the exact tag sequence of `frames`.
#[track_caller]
fn assert_tags(frames: &[Frame], want: &str) {
    assert_eq!(
        raw::tags(frames),
        want,
        "unexpected replies: {}",
        show(frames)
    );
}

/// The ErrorResponses among `frames`: (SQLSTATE, answered by the pooler).
fn errors(frames: &[Frame]) -> Vec<(String, bool)> {
    frames
        .iter()
        .filter(|f| f.tag == b'E')
        .map(|f| (raw::sqlstate(f), by_pooler(f)))
        .collect()
}

/// The columns of a DataRow.
fn row(f: &Frame) -> Vec<Option<String>> {
    let b = f.body();
    let n = i16::from_be_bytes([b[0], b[1]]) as usize;
    let mut at = 2;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let len = i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        at += 4;
        if len < 0 {
            out.push(None);
        } else {
            let len = len as usize;
            out.push(Some(String::from_utf8_lossy(&b[at..at + len]).into_owned()));
            at += len;
        }
    }
    out
}

/// Every DataRow among `frames`.
fn rows(frames: &[Frame]) -> Vec<Vec<Option<String>>> {
    frames.iter().filter(|f| f.tag == b'D').map(row).collect()
}

/// The first column of every DataRow, as text ("NULL" for null).
fn col0(frames: &[Frame]) -> Vec<String> {
    rows(frames)
        .into_iter()
        .map(|r| r[0].clone().unwrap_or_else(|| "NULL".into()))
        .collect()
}

/// The column names of a RowDescription.
fn columns(f: &Frame) -> Vec<String> {
    let b = f.body();
    let n = i16::from_be_bytes([b[0], b[1]]) as usize;
    let mut at = 2;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let end = at + b[at..].iter().position(|&c| c == 0).expect("NUL");
        out.push(String::from_utf8_lossy(&b[at..end]).into_owned());
        at = end + 1 + 18;
    }
    out
}

/// The type OIDs of a ParameterDescription.
fn param_types(f: &Frame) -> Vec<u32> {
    let b = f.body();
    let n = i16::from_be_bytes([b[0], b[1]]) as usize;
    (0..n)
        .map(|i| u32::from_be_bytes([b[2 + 4 * i], b[3 + 4 * i], b[4 + 4 * i], b[5 + 4 * i]]))
        .collect()
}

fn command_tag(f: &Frame) -> String {
    let b = f.body();
    String::from_utf8_lossy(&b[..b.len().saturating_sub(1)]).into_owned()
}

/// The transaction status of the last ReadyForQuery.
fn status(frames: &[Frame]) -> char {
    let z = frames
        .iter()
        .rev()
        .find(|f| f.tag == b'Z')
        .expect("a ReadyForQuery");
    z.body()[0] as char
}

/// Parse with declared parameter type OIDs.
fn parse_typed(name: &str, sql: &str, types: &[u32]) -> BytesMut {
    let mut b = BytesMut::new();
    let at = begin(&mut b, frontend::PARSE_TAG);
    b.put_slice(name.as_bytes());
    b.put_u8(0);
    b.put_slice(sql.as_bytes());
    b.put_u8(0);
    b.put_i16(types.len() as i16);
    for t in types {
        b.put_u32(*t);
    }
    finish(&mut b, at);
    b
}

/// Bind with binary int4 parameters and binary results (exercises the bytes after the name).
fn bind_binary_int4(portal: &str, stmt: &str, params: &[i32]) -> BytesMut {
    let mut b = BytesMut::new();
    let at = begin(&mut b, frontend::BIND_TAG);
    b.put_slice(portal.as_bytes());
    b.put_u8(0);
    b.put_slice(stmt.as_bytes());
    b.put_u8(0);
    b.put_i16(1);
    b.put_i16(1); // every parameter binary
    b.put_i16(params.len() as i16);
    for p in params {
        b.put_i32(4);
        b.put_i32(*p);
    }
    b.put_i16(1);
    b.put_i16(1); // every result binary
    finish(&mut b, at);
    b
}

/// The `[POOL]` lines without the listening line.
fn events(pooler: &Pooler) -> Vec<String> {
    // The lines reach us through a pipe and a reader thread: on a loaded machine they can trail
    // the replies the client already has by a little. Give the reader that moment.
    std::thread::sleep(Duration::from_millis(60));
    pooler
        .lines()
        .into_iter()
        .filter(|l| !l.starts_with("[POOL] listening on"))
        .collect()
}

/// The `prepares` lines so far.
fn prepares(pooler: &Pooler) -> Vec<String> {
    events(pooler)
        .into_iter()
        .filter(|l| l.contains(" prepares "))
        .collect()
}

/// The `client <c> uses server <s>` lines so far.
fn uses(pooler: &Pooler, client: u64) -> Vec<String> {
    let prefix = format!("[POOL] client {client} uses server ");
    events(pooler)
        .into_iter()
        .filter(|l| l.starts_with(&prefix))
        .collect()
}

#[track_caller]
fn wait_line(pooler: &Pooler, line: &str) {
    assert!(pooler.wait_for_line(line, WAIT), "no `{line}`");
}

/// Lets the pooler print what it is about to print (the client has its replies already; the
/// release line follows them).
async fn settle() {
    tokio::time::sleep(Duration::from_millis(150)).await;
}

/// The names PostgreSQL reports in `pg_prepared_statements` for the server `raw` holds (run it
/// inside a transaction to pin the server).
async fn server_statements(raw: &mut Raw) -> Vec<String> {
    let r = simple(
        raw,
        "select name from pg_prepared_statements order by name collate \"C\"",
    )
    .await;
    assert!(errors(&r).is_empty(), "{}", show(&r));
    col0(&r)
}

/// Opens a second server: two clients hold one each at once, then both finish. Afterwards the
/// pool has servers 1 and 2 idle.
async fn open_two_servers(pooler: &Pooler, a: &mut Raw, b: &mut Raw) {
    assert_eq!(status(&simple(a, "begin").await), 'T');
    assert_eq!(status(&simple(b, "begin").await), 'T');
    assert_eq!(status(&simple(a, "commit").await), 'I');
    assert_eq!(status(&simple(b, "commit").await), 'I');
    wait_line(pooler, "[POOL] server 2 connected");
}

/// A table of one's own in the shared database (dropped first if a former run left it).
fn fresh_table(name: &str, columns: &str) {
    support::shared().psql(&format!(
        "drop table if exists {name}; create table {name} ({columns})"
    ));
}

// ---------------------------------------------------------------------------------------------
// the contract's checklist
// ---------------------------------------------------------------------------------------------

/// Checklist `prepared-statement-tracked`, with the exact sequence of "What you should see":
/// client 1 parses p on server 1 and releases it; client 2 holds server 1 inside BEGIN; client
/// 1's next Bind lands on server 2 (connected just then), where the pooler replays the Parse.
#[tokio::test]
async fn prepared_statement_tracked() {
    let pooler = start_tracked();
    let mut c1 = connect(&pooler).await;
    let r = exchange(&mut c1, &[parse("p", "select $1::int * 2"), sync()]).await;
    assert_tags(&r, "1Z");
    wait_line(&pooler, "[POOL] client 1 released server 1");

    let mut c2 = connect(&pooler).await;
    let r = simple(&mut c2, "BEGIN").await;
    assert_tags(&r, "CZ");
    assert_eq!(status(&r), 'T');

    let r = exchange(
        &mut c1,
        &[bind("", "p", &[Some("21")]), execute(""), sync()],
    )
    .await;
    // The replayed ParseComplete is not the client's: Bind, row, complete, ready.
    assert_tags(&r, "2DCZ");
    assert_eq!(col0(&r), ["42"]);
    assert_eq!(status(&r), 'I');
    wait_line(&pooler, "[POOL] client 1 released server 2");

    let want = [
        "[POOL] client 1 connected",
        "[POOL] server 1 connected",
        "[POOL] client 1 uses server 1",
        "[POOL] client 1 prepares p on server 1",
        "[POOL] client 1 released server 1",
        "[POOL] client 2 connected",
        "[POOL] client 2 uses server 1",
        "[POOL] server 2 connected",
        "[POOL] client 1 uses server 2",
        "[POOL] client 1 prepares p on server 2",
        "[POOL] client 1 released server 2",
    ];
    assert_eq!(events(&pooler), want);

    // Client 2's transaction is unaffected and ends normally.
    let r = simple(&mut c2, "COMMIT").await;
    assert_tags(&r, "CZ");
    assert_eq!(status(&r), 'I');
}

/// Checklist `names-do-not-collide`: two clients' `p` live side by side on one server
/// connection, as `p1_p` and `p2_p`, each answering with its own text.
#[tokio::test]
async fn names_do_not_collide() {
    let pooler = start_tracked();
    let mut c1 = connect(&pooler).await;
    let mut c2 = connect(&pooler).await;
    let r = exchange(&mut c1, &[parse("p", "select 'one'::text"), sync()]).await;
    assert_tags(&r, "1Z");
    wait_line(&pooler, "[POOL] client 1 released server 1");
    // The same name from another client on the same server: no 42P05 from PostgreSQL.
    let r = exchange(&mut c2, &[parse("p", "select 'two'::text"), sync()]).await;
    assert_tags(&r, "1Z");
    wait_line(&pooler, "[POOL] client 2 released server 1");
    assert_eq!(
        prepares(&pooler),
        [
            "[POOL] client 1 prepares p on server 1",
            "[POOL] client 2 prepares p on server 1",
        ]
    );

    // In one transaction on server 1: client 1's p answers 'one', and the server holds both.
    assert_eq!(status(&simple(&mut c1, "begin").await), 'T');
    let r = exchange(&mut c1, &[bind("", "p", &[]), execute(""), sync()]).await;
    assert_tags(&r, "2DCZ");
    assert_eq!(col0(&r), ["one"]);
    let names = server_statements(&mut c1).await;
    assert_eq!(names, ["p1_p", "p2_p"], "statements on server 1");
    assert_eq!(status(&simple(&mut c1, "commit").await), 'I');

    let r = exchange(&mut c2, &[bind("", "p", &[]), execute(""), sync()]).await;
    assert_tags(&r, "2DCZ");
    assert_eq!(col0(&r), ["two"]);
    // Both statements existed on server 1: nothing was prepared again.
    assert_eq!(prepares(&pooler).len(), 2, "{:?}", events(&pooler));
    assert!(!events(&pooler).iter().any(|l| l.contains("server 2")));
}

/// Checklist `close-tracked`: a statement the client closed is gone (26000 from the pooler),
/// only that client's; the Close is answered by the pooler and nothing is forwarded; the name
/// can be parsed again.
#[tokio::test]
async fn close_tracked() {
    let pooler = start_tracked();
    let mut c1 = connect(&pooler).await;
    let mut c2 = connect(&pooler).await;
    assert_tags(
        &exchange(&mut c1, &[parse("p", "select 'one'::text"), sync()]).await,
        "1Z",
    );
    assert_tags(
        &exchange(&mut c2, &[parse("p", "select 'two'::text"), sync()]).await,
        "1Z",
    );
    wait_line(&pooler, "[POOL] client 2 released server 1");
    let used = uses(&pooler, 1).len();

    let r = exchange(&mut c1, &[close(b'S', "p"), sync()]).await;
    assert_tags(&r, "3Z");
    assert_eq!(status(&r), 'I');
    settle().await;
    assert_eq!(
        uses(&pooler, 1).len(),
        used,
        "a Close of a kept statement must not take a server: {:?}",
        events(&pooler)
    );

    // Gone for client 1: 26000 from the pooler, the rest of the batch skipped.
    let r = exchange(&mut c1, &[bind("", "p", &[]), execute(""), sync()]).await;
    assert_tags(&r, "EZ");
    assert_eq!(errors(&r), [("26000".to_string(), true)]);
    // ... and the session goes on.
    let r = simple(&mut c1, "select 5").await;
    assert_tags(&r, "TDCZ");
    assert_eq!(col0(&r), ["5"]);

    // Still there for client 2.
    let r = exchange(&mut c2, &[bind("", "p", &[]), execute(""), sync()]).await;
    assert_tags(&r, "2DCZ");
    assert_eq!(col0(&r), ["two"]);

    // Client 1 may make p again, with other text; server 1 still has the old p1_p.
    let r = exchange(
        &mut c1,
        &[
            parse("p", "select 'three'::text"),
            bind("", "p", &[]),
            execute(""),
            sync(),
        ],
    )
    .await;
    assert_tags(&r, "12DCZ");
    assert_eq!(col0(&r), ["three"]);
    let r = exchange(&mut c1, &[bind("", "p", &[]), execute(""), sync()]).await;
    assert_tags(&r, "2DCZ");
    assert_eq!(col0(&r), ["three"]);
}

/// Checklist `sql-prepare-not-tracked`: SQL PREPARE inside a Query is forwarded unchanged and
/// not tracked, so EXECUTE on another server connection fails (26000 from PostgreSQL itself).
#[tokio::test]
async fn sql_prepare_not_tracked() {
    let pooler = start_tracked();
    let mut c1 = connect(&pooler).await;
    let r = simple(&mut c1, "PREPARE s AS select 7").await;
    assert_tags(&r, "CZ");
    assert_eq!(command_tag(&r[0]), "PREPARE");
    wait_line(&pooler, "[POOL] client 1 released server 1");

    // Client 2 holds server 1 and sees the statement under the client's own name `s`.
    let mut c2 = connect(&pooler).await;
    assert_eq!(status(&simple(&mut c2, "begin").await), 'T');
    assert_eq!(server_statements(&mut c2).await, ["s"]);

    // Client 1's EXECUTE lands on server 2, where `s` was never prepared.
    let r = simple(&mut c1, "EXECUTE s").await;
    assert_tags(&r, "EZ");
    assert_eq!(
        errors(&r),
        [("26000".to_string(), false)],
        "PostgreSQL, not the pooler, says so: {}",
        show(&r)
    );
    wait_line(&pooler, "[POOL] client 1 uses server 2");
    assert!(prepares(&pooler).is_empty(), "{:?}", events(&pooler));
    assert_eq!(status(&simple(&mut c2, "commit").await), 'I');

    // Back on server 1 the SQL statement still works: the pooler left it alone.
    assert_eq!(status(&simple(&mut c2, "begin").await), 'T');
    let r = simple(&mut c2, "EXECUTE s").await;
    assert_tags(&r, "TDCZ");
    assert_eq!(col0(&r), ["7"]);
    assert_eq!(status(&simple(&mut c2, "commit").await), 'I');
}

// ---------------------------------------------------------------------------------------------
// one test per rule of issue 3 and per common bug of the contract
// ---------------------------------------------------------------------------------------------

/// A raw connection straight to PostgreSQL, to show what a server itself answers.
async fn direct() -> Raw {
    Raw::connect(support::shared().port, USER, DB).await
}

fn terminate() -> BytesMut {
    let mut b = BytesMut::new();
    frontend::terminate(&mut b);
    b
}

/// The raw bytes of the first column of a DataRow.
fn first_bytes(f: &Frame) -> Vec<u8> {
    let b = f.body();
    let len = i32::from_be_bytes([b[2], b[3], b[4], b[5]]);
    assert!(len >= 0, "null column");
    b[6..6 + len as usize].to_vec()
}

/// Common bug "forwarding the replayed ParseComplete": after a replay every reply the client
/// reads is its own, in a pipeline of several batches and with Flush.
#[tokio::test]
async fn replayed_parse_complete_never_reaches_client() {
    let pooler = start_tracked();
    let mut c1 = connect(&pooler).await;
    let mut c2 = connect(&pooler).await;
    assert_tags(
        &exchange(&mut c1, &[parse("p", "select $1::int + 1 as n"), sync()]).await,
        "1Z",
    );
    wait_line(&pooler, "[POOL] client 1 released server 1");
    assert_eq!(status(&simple(&mut c2, "begin").await), 'T');

    // Bind + Flush on server 2: the Bind's answer alone, no ParseComplete before it.
    c1.send(&batch(&[bind("", "p", &[Some("1")]), raw::flush()]))
        .await;
    let f = c1.recv().await;
    assert_eq!(
        f.tag,
        b'2',
        "first reply after a replay: {}",
        show(std::slice::from_ref(&f))
    );
    assert!(
        c1.silent_for(Duration::from_millis(300)).await,
        "nothing more before Execute"
    );
    let r = exchange(&mut c1, &[execute(""), sync()]).await;
    assert_tags(&r, "DCZ");
    assert_eq!(col0(&r), ["2"]);
    // c1 is now idle; c2 still holds server 1, so c1 runs on server 2 again (no replay).
    let r = exchange_n(
        &mut c1,
        &[
            bind("", "p", &[Some("10")]),
            describe(b'P', ""),
            execute(""),
            sync(),
            bind("", "p", &[Some("20")]),
            execute(""),
            sync(),
            query("select 'after'"),
        ],
        3,
    )
    .await;
    assert_tags(&r, "2TDCZ2DCZTDCZ");
    assert_eq!(col0(&r), ["11", "21", "after"]);
    assert_eq!(
        prepares(&pooler),
        [
            "[POOL] client 1 prepares p on server 1",
            "[POOL] client 1 prepares p on server 2",
        ]
    );
    assert_eq!(status(&simple(&mut c2, "commit").await), 'I');
}

/// Common bug "rewriting the name and not the length": names of many lengths, typed
/// parameters, binary Bind formats, Describe and Close, each followed in the same write by more
/// messages (a wrong length would make the server read them from the wrong place), on the
/// server that got the Parse and on one where it is replayed.
#[tokio::test]
async fn renamed_messages_get_their_length_rewritten() {
    let pooler = start_tracked();
    let mut c1 = connect(&pooler).await;
    let mut c2 = connect(&pooler).await;
    let names: Vec<String> = [1usize, 2, 9, 30, 55]
        .iter()
        .enumerate()
        .map(|(i, &n)| format!("{}{}", (b'a' + i as u8) as char, "x".repeat(n - 1)))
        .collect();
    for (i, name) in names.iter().enumerate() {
        let sql = format!("select $1::int4 * 100 + {i}");
        let r = exchange(
            &mut c1,
            &[
                parse_typed(name, &sql, &[23]),
                describe(b'S', name),
                bind_binary_int4("", name, &[i as i32]),
                execute(""),
                sync(),
                query("select 'tail'"),
            ],
        )
        .await;
        assert_tags(&r, "1tT2DCZ");
        assert_eq!(param_types(&r[1]), [23], "{name}");
        let want = (i as i32) * 101;
        assert_eq!(first_bytes(&r[4]), want.to_be_bytes(), "{name}");
        let r = c1.until_ready().await;
        assert_tags(&r, "TDCZ");
        assert_eq!(col0(&r), ["tail"]);
    }
    // Server 2, where every statement is replayed (Describe first, then Bind).
    wait_line(&pooler, "[POOL] client 1 released server 1");
    assert_eq!(status(&simple(&mut c2, "begin").await), 'T');
    let mut msgs = Vec::new();
    for (i, name) in names.iter().enumerate() {
        msgs.push(describe(b'S', name));
        msgs.push(bind_binary_int4("", name, &[i as i32 + 1]));
        msgs.push(execute(""));
    }
    msgs.push(sync());
    let r = exchange(&mut c1, &msgs).await;
    assert_tags(&r, &format!("{}Z", "tT2DC".repeat(names.len())));
    let got: Vec<Vec<u8>> = r
        .iter()
        .filter(|f| f.tag == b'D')
        .map(first_bytes)
        .collect();
    let want: Vec<Vec<u8>> = (0..names.len() as i32)
        .map(|i| ((i + 1) * 100 + i).to_be_bytes().to_vec())
        .collect();
    assert_eq!(got, want);
    // Close of each, then the names are free again (and 26000 before that).
    let mut msgs: Vec<BytesMut> = names.iter().map(|n| close(b'S', n)).collect();
    msgs.push(sync());
    assert_tags(
        &exchange(&mut c1, &msgs).await,
        &format!("{}Z", "3".repeat(names.len())),
    );
    for name in &names {
        let r = exchange(&mut c1, &[describe(b'S', name), sync()]).await;
        assert_tags(&r, "EZ");
        assert_eq!(errors(&r), [("26000".to_string(), true)]);
    }
    let per_server: BTreeSet<String> = prepares(&pooler).into_iter().collect();
    assert_eq!(per_server.len(), 2 * names.len(), "{per_server:?}");
    assert_eq!(status(&simple(&mut c2, "commit").await), 'I');
}

/// Two long names of one client that differ only at their end are two statements directly on
/// PostgreSQL (it compares the first 63 bytes); renamed `p<c>_<name>` they must stay two.
#[tokio::test]
async fn long_names_stay_distinct_on_the_server() {
    let a = format!("{}a", "n".repeat(61));
    let b = format!("{}b", "n".repeat(61));
    let msgs = [
        parse(&a, "select 'A'::text"),
        parse(&b, "select 'B'::text"),
        bind("", &a, &[]),
        execute(""),
        bind("", &b, &[]),
        execute(""),
        sync(),
    ];
    // What PostgreSQL itself does with these names.
    let mut pg = direct().await;
    let r = exchange(&mut pg, &msgs).await;
    assert_tags(&r, "112DC2DCZ");
    assert_eq!(col0(&r), ["A", "B"]);

    let pooler = start_tracked();
    let mut c1 = connect(&pooler).await;
    let r = exchange(&mut c1, &msgs).await;
    assert_tags(&r, "112DC2DCZ");
    assert_eq!(col0(&r), ["A", "B"]);
}

/// Common bug "replaying for every Bind": once a connection has the statement it is never
/// parsed there again, however often the client moves between servers 1 and 2 (round robin).
#[tokio::test]
async fn no_replay_where_the_statement_exists() {
    let pooler = start_round_robin();
    let mut c1 = connect(&pooler).await;
    let mut c2 = connect(&pooler).await;
    open_two_servers(&pooler, &mut c1, &mut c2).await;
    let before = uses(&pooler, 1).len();
    assert_tags(
        &exchange(&mut c1, &[parse("p", "select $1::int * 3"), sync()]).await,
        "1Z",
    );
    for i in 0..10 {
        let v = i.to_string();
        let r = exchange(&mut c1, &[bind("", "p", &[Some(&v)]), execute(""), sync()]).await;
        assert_tags(&r, "2DCZ");
        assert_eq!(col0(&r), [(i * 3).to_string()]);
    }
    settle().await;
    let servers: BTreeSet<String> = uses(&pooler, 1)[before..]
        .iter()
        .map(|l| l.rsplit(' ').next().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        servers.into_iter().collect::<Vec<_>>(),
        ["1", "2"],
        "round robin must move client 1 between servers: {:?}",
        events(&pooler)
    );
    let mut p = prepares(&pooler);
    p.sort();
    assert_eq!(
        p,
        [
            "[POOL] client 1 prepares p on server 1",
            "[POOL] client 1 prepares p on server 2",
        ]
    );
}

/// The same, with most-recently-used hand-out: one client, one server, one Parse.
#[tokio::test]
async fn no_replay_on_the_same_server() {
    let pooler = start_tracked();
    let mut c1 = connect(&pooler).await;
    assert_tags(
        &exchange(&mut c1, &[parse("p", "select $1::int * 3"), sync()]).await,
        "1Z",
    );
    for i in 0..10 {
        let v = i.to_string();
        let msgs = if i % 2 == 0 {
            vec![bind("", "p", &[Some(&v)]), execute(""), sync()]
        } else {
            vec![
                describe(b'S', "p"),
                bind("", "p", &[Some(&v)]),
                execute(""),
                sync(),
            ]
        };
        let r = exchange(&mut c1, &msgs).await;
        assert_tags(&r, if i % 2 == 0 { "2DCZ" } else { "tT2DCZ" });
        assert_eq!(col0(&r), [(i * 3).to_string()]);
    }
    settle().await;
    assert_eq!(
        prepares(&pooler),
        ["[POOL] client 1 prepares p on server 1"]
    );
    assert_eq!(uses(&pooler, 1).len(), 11);
}

/// Bind or Describe S of a name never parsed: 26000 from the pooler, the client's messages
/// skipped to Sync (a Parse among them is not kept), and the session stays usable.
#[tokio::test]
async fn unknown_name_gets_26000_from_the_pooler() {
    let pooler = start_tracked();
    let mut c1 = connect(&pooler).await;

    let r = exchange(&mut c1, &[bind("", "nope", &[]), execute(""), sync()]).await;
    assert_tags(&r, "EZ");
    assert_eq!(errors(&r), [("26000".to_string(), true)]);
    assert_eq!(status(&r), 'I');

    let r = exchange(&mut c1, &[describe(b'S', "nope"), sync()]).await;
    assert_tags(&r, "EZ");
    assert_eq!(errors(&r), [("26000".to_string(), true)]);

    // Skipped to Sync: the Parse after the error is not run, so `q` does not exist after it.
    let r = exchange(
        &mut c1,
        &[
            bind("", "nope", &[]),
            parse("q", "select 'q'::text"),
            bind("", "q", &[]),
            execute(""),
            sync(),
            query("select 'next'"),
        ],
    )
    .await;
    assert_tags(&r, "EZ");
    assert_eq!(errors(&r), [("26000".to_string(), true)]);
    let r = c1.until_ready().await;
    assert_tags(&r, "TDCZ");
    assert_eq!(col0(&r), ["next"]);
    let r = exchange(&mut c1, &[bind("", "q", &[]), execute(""), sync()]).await;
    assert_tags(&r, "EZ");
    assert_eq!(errors(&r), [("26000".to_string(), true)]);
    // The name is free: a Parse of it works (no 42P05).
    let r = exchange(
        &mut c1,
        &[
            parse("q", "select 'q'::text"),
            bind("", "q", &[]),
            execute(""),
            sync(),
        ],
    )
    .await;
    assert_tags(&r, "12DCZ");
    assert_eq!(col0(&r), ["q"]);

    // Inside a transaction (a server held): the same answer, in its place.
    assert_eq!(status(&simple(&mut c1, "begin").await), 'T');
    let r = exchange(
        &mut c1,
        &[
            bind("", "q", &[]),
            execute(""),
            bind("", "nope", &[]),
            execute(""),
            sync(),
        ],
    )
    .await;
    assert_eq!(&raw::tags(&r)[..4], "2DCE", "{}", show(&r));
    assert_eq!(errors(&r), [("26000".to_string(), true)]);
    let _ = simple(&mut c1, "rollback").await;
    let r = simple(&mut c1, "select 1").await;
    assert_tags(&r, "TDCZ");
}

/// An error the pooler answers inside a transaction fails that transaction, as PostgreSQL's
/// own 26000 would: the ReadyForQuery says `E` and the COMMIT after it rolls back. (Beyond the
/// letter of the contract, but "as a server would": a client that COMMITs after the error must
/// not commit the work before it.)
#[tokio::test]
async fn pooler_error_inside_a_transaction_fails_it() {
    let table = "prep_tx_fail";
    fresh_table(table, "v int");
    let seq = [
        query("begin"),
        query(&format!("insert into {table} values (1)")),
        bind("", "nope", &[]),
        execute(""),
        sync(),
        query("commit"),
    ];
    let statuses = |r: &[Frame]| -> String {
        r.iter()
            .filter(|f| f.tag == b'Z')
            .map(|f| f.body()[0] as char)
            .collect()
    };
    let count = || support::shared().psql(&format!("select count(*) from {table}"));

    // PostgreSQL itself.
    let mut pg = direct().await;
    let r = exchange_n(&mut pg, &seq, 4).await;
    assert_eq!(statuses(&r), "TTEI", "{}", show(&r));
    assert_eq!(command_tag(&r[r.len() - 2]), "ROLLBACK");
    assert_eq!(count(), "0");

    let pooler = start_tracked();
    let mut c1 = connect(&pooler).await;
    let r = exchange_n(&mut c1, &seq, 4).await;
    assert_eq!(errors(&r), [("26000".to_string(), true)], "{}", show(&r));
    assert_eq!(statuses(&r), "TTEI", "{}", show(&r));
    assert_eq!(command_tag(&r[r.len() - 2]), "ROLLBACK", "{}", show(&r));
    assert_eq!(count(), "0", "the insert before the error was committed");
}

/// Close S of a kept statement: CloseComplete from the pooler, nothing forwarded (the server
/// copy stays, unused); Close of a name never parsed is a CloseComplete too, as on PostgreSQL;
/// Close of a portal goes to the server.
#[tokio::test]
async fn close_is_answered_by_the_pooler_and_forwards_nothing() {
    let pooler = start_tracked();
    let mut c1 = connect(&pooler).await;
    assert_tags(
        &exchange(&mut c1, &[parse("p", "select 'p'::text"), sync()]).await,
        "1Z",
    );
    assert_eq!(status(&simple(&mut c1, "begin").await), 'T');
    let r = exchange(&mut c1, &[close(b'S', "p"), sync()]).await;
    assert_tags(&r, "3Z");
    assert_eq!(status(&r), 'T');
    // Not forwarded: PostgreSQL still has p1_p in this very session.
    assert_eq!(server_statements(&mut c1).await, ["p1_p"]);
    let r = exchange(&mut c1, &[bind("", "p", &[]), execute(""), sync()]).await;
    assert_tags(&r, "EZ");
    assert_eq!(errors(&r), [("26000".to_string(), true)]);
    let _ = simple(&mut c1, "rollback").await;

    let r = exchange(&mut c1, &[close(b'S', "never"), sync()]).await;
    assert_tags(&r, "3Z");

    // A portal Close is the server's business.
    assert_tags(
        &exchange(&mut c1, &[parse("q", "select 'q'::text"), sync()]).await,
        "1Z",
    );
    assert_eq!(status(&simple(&mut c1, "begin").await), 'T');
    let r = exchange(
        &mut c1,
        &[
            bind("po", "q", &[]),
            close(b'P', "po"),
            execute("po"),
            sync(),
        ],
    )
    .await;
    // PostgreSQL: the portal is gone, so Execute fails with 34000.
    assert_tags(&r, "23EZ");
    assert_eq!(errors(&r), [("34000".to_string(), false)]);
    let _ = simple(&mut c1, "rollback").await;
}

/// Parse of a name the client already has: 42P05 from the pooler, not forwarded; the first
/// statement stays; a second Parse in the same batch gets it after the first one's answer.
#[tokio::test]
async fn duplicate_parse_gets_42p05_from_the_pooler() {
    let pooler = start_tracked();
    let mut c1 = connect(&pooler).await;
    assert_tags(
        &exchange(&mut c1, &[parse("p", "select 'one'::text"), sync()]).await,
        "1Z",
    );
    // Let the event lines of that exchange arrive before counting them.
    settle().await;
    let used = uses(&pooler, 1).len();
    let r = exchange(
        &mut c1,
        &[
            parse("p", "select 'two'::text"),
            bind("", "p", &[]),
            execute(""),
            sync(),
        ],
    )
    .await;
    assert_tags(&r, "EZ");
    assert_eq!(errors(&r), [("42P05".to_string(), true)]);
    settle().await;
    assert_eq!(uses(&pooler, 1).len(), used, "not forwarded");
    assert_eq!(prepares(&pooler).len(), 1);
    let r = exchange(&mut c1, &[bind("", "p", &[]), execute(""), sync()]).await;
    assert_tags(&r, "2DCZ");
    assert_eq!(col0(&r), ["one"], "the first statement stays");

    // Twice in one batch: ParseComplete for the first, then the pooler's 42P05.
    let r = exchange(
        &mut c1,
        &[
            parse("q", "select 'q1'::text"),
            parse("q", "select 'q2'::text"),
            bind("", "q", &[]),
            execute(""),
            sync(),
        ],
    )
    .await;
    assert_tags(&r, "1EZ");
    assert_eq!(errors(&r), [("42P05".to_string(), true)]);
    let r = exchange(&mut c1, &[bind("", "q", &[]), execute(""), sync()]).await;
    assert_tags(&r, "2DCZ");
    assert_eq!(col0(&r), ["q1"]);
    let r = simple(&mut c1, "select 'usable'").await;
    assert_eq!(col0(&r), ["usable"]);
}

/// A statement is kept from the moment its Parse is forwarded: Parse, Bind, Describe and
/// Execute in one batch work, on a fresh server as on one with other statements.
#[tokio::test]
async fn statement_is_kept_from_its_forwarded_parse() {
    let pooler = start_tracked();
    let mut c1 = connect(&pooler).await;
    let r = exchange(
        &mut c1,
        &[
            parse("a", "select $1::text || '!' as t"),
            bind("", "a", &[Some("hi")]),
            describe(b'P', ""),
            execute(""),
            parse("b", "select 2 as two"),
            describe(b'S', "b"),
            bind("", "b", &[]),
            execute(""),
            sync(),
        ],
    )
    .await;
    assert_tags(&r, "12TDC1tT2DCZ");
    assert_eq!(col0(&r), ["hi!", "2"]);
    assert_eq!(
        prepares(&pooler),
        [
            "[POOL] client 1 prepares a on server 1",
            "[POOL] client 1 prepares b on server 1",
        ]
    );
}

/// A Parse the server rejects is dropped: a later Bind gets 26000 from the pooler, and a new
/// Parse of the same name succeeds. A Bind in the same batch is skipped by the server (one
/// error only).
#[tokio::test]
async fn parse_rejected_by_the_server_is_dropped() {
    let pooler = start_tracked();
    let mut c1 = connect(&pooler).await;
    let r = exchange(&mut c1, &[parse("bad", "selec 1"), sync()]).await;
    assert_tags(&r, "EZ");
    assert_eq!(errors(&r), [("42601".to_string(), false)]);
    let r = exchange(&mut c1, &[bind("", "bad", &[]), execute(""), sync()]).await;
    assert_tags(&r, "EZ");
    assert_eq!(errors(&r), [("26000".to_string(), true)]);
    let r = exchange(
        &mut c1,
        &[
            parse("bad", "select 11"),
            bind("", "bad", &[]),
            execute(""),
            sync(),
        ],
    )
    .await;
    assert_tags(&r, "12DCZ");
    assert_eq!(col0(&r), ["11"]);

    // In one batch: only the Parse's error; the Bind and Execute were skipped.
    let r = exchange(
        &mut c1,
        &[
            parse("bad2", "select * from no_such_table_prep"),
            bind("", "bad2", &[]),
            execute(""),
            sync(),
        ],
    )
    .await;
    assert_tags(&r, "EZ");
    assert_eq!(errors(&r), [("42P01".to_string(), false)]);
    let r = exchange(&mut c1, &[describe(b'S', "bad2"), sync()]).await;
    assert_tags(&r, "EZ");
    assert_eq!(errors(&r), [("26000".to_string(), true)]);
    let r = exchange(
        &mut c1,
        &[
            parse("bad2", "select 12"),
            bind("", "bad2", &[]),
            execute(""),
            sync(),
        ],
    )
    .await;
    assert_tags(&r, "12DCZ");
    assert_eq!(col0(&r), ["12"]);

    // A Parse skipped after an earlier error of its batch is dropped too.
    let r = exchange(
        &mut c1,
        &[parse("", "selec"), parse("skipped", "select 13"), sync()],
    )
    .await;
    assert_tags(&r, "EZ");
    let r = exchange(
        &mut c1,
        &[
            parse("skipped", "select 13"),
            bind("", "skipped", &[]),
            execute(""),
            sync(),
        ],
    )
    .await;
    assert_tags(&r, "12DCZ");
    assert_eq!(col0(&r), ["13"]);
}

/// A pipelined retry after a rejected Parse: `Parse r (bad), Sync, Parse r (good), Bind r,
/// Execute, Sync` in one write. On PostgreSQL the second Parse succeeds (the first left no
/// statement); the pooler must not answer it 42P05 just because the first one's answer had
/// not arrived yet.
#[tokio::test]
async fn reparse_after_rejected_parse_in_one_pipeline() {
    let msgs = [
        parse("r", "selec 1"),
        sync(),
        parse("r", "select 12"),
        bind("", "r", &[]),
        execute(""),
        sync(),
    ];
    let mut pg = direct().await;
    let r = exchange_n(&mut pg, &msgs, 2).await;
    assert_tags(&r, "EZ12DCZ");

    let pooler = start_tracked();
    let mut c1 = connect(&pooler).await;
    let r = exchange_n(&mut c1, &msgs, 2).await;
    assert_tags(&r, "EZ12DCZ");
    assert_eq!(col0(&r), ["12"]);
}

/// The pooler's own answers keep their place in a pipeline: each comes after every answer the
/// server owes for the messages before it.
#[tokio::test]
async fn pooler_answers_keep_their_order_in_a_pipeline() {
    let pooler = start_tracked();
    let mut c1 = connect(&pooler).await;
    let r = exchange(
        &mut c1,
        &[
            parse("a", "select 'a'::text"),
            parse("b", "select 'b'::text"),
            sync(),
        ],
    )
    .await;
    assert_tags(&r, "11Z");
    let msgs = [
        bind("", "a", &[]),
        execute(""),
        close(b'S', "b"), // pooler: 3, after a's C
        parse("c", "select 'c'::text"),
        bind("", "c", &[]),
        execute(""),
        parse("a", "select 'dup'"), // pooler: 42P05, after c's C
        bind("", "c", &[]),         // skipped
        execute(""),                // skipped
        sync(),
        describe(b'S', "b"), // pooler: 26000 (b closed)
        sync(),
        bind("", "a", &[]),
        execute(""),
        close(b'S', "c"), // pooler: 3
        sync(),
        query("select 'q'"),
    ];
    let r = exchange_n(&mut c1, &msgs, 4).await;
    assert_tags(&r, "2DC312DCEZEZ2DC3ZTDCZ");
    assert_eq!(col0(&r), ["a", "c", "a", "q"]);
    assert_eq!(
        errors(&r),
        [("42P05".to_string(), true), ("26000".to_string(), true)]
    );

    // With Flush: the pooler's answer is delivered after the server's, before the Sync.
    assert_tags(
        &exchange(&mut c1, &[parse("d", "select 'd'::text"), sync()]).await,
        "1Z",
    );
    c1.send(&batch(&[
        bind("", "a", &[]),
        execute(""),
        close(b'S', "d"),
        raw::flush(),
    ]))
    .await;
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(c1.recv().await);
    }
    assert_tags(&got, "2DC3");
    assert!(c1.silent_for(Duration::from_millis(200)).await);
    assert_tags(&exchange(&mut c1, &[sync()]).await, "Z");
}

/// A batch nothing of which reached a server gets its ReadyForQuery from the pool, and no
/// server is taken for it.
#[tokio::test]
async fn pool_answers_sync_when_nothing_reached_a_server() {
    let pooler = start_tracked();
    let mut c1 = connect(&pooler).await;
    assert_tags(
        &exchange(&mut c1, &[parse("p", "select 1"), sync()]).await,
        "1Z",
    );
    wait_line(&pooler, "[POOL] client 1 released server 1");
    let used = uses(&pooler, 1).len();

    let r = exchange(&mut c1, &[close(b'S', "p"), sync()]).await;
    assert_tags(&r, "3Z");
    assert_eq!(status(&r), 'I');
    let r = exchange(&mut c1, &[bind("", "nope", &[]), execute(""), sync()]).await;
    assert_tags(&r, "EZ");
    assert_eq!(errors(&r), [("26000".to_string(), true)]);
    let r = exchange(&mut c1, &[describe(b'S', "nope"), sync()]).await;
    assert_tags(&r, "EZ");
    assert_tags(
        &exchange(&mut c1, &[parse("q", "select 2"), sync()]).await,
        "1Z",
    );
    let used = used + 1;
    let r = exchange(&mut c1, &[parse("q", "select 3"), sync()]).await;
    assert_tags(&r, "EZ");
    assert_eq!(errors(&r), [("42P05".to_string(), true)]);
    // Several batches in one write, none reaching a server.
    let r = exchange_n(
        &mut c1,
        &[
            close(b'S', "q"),
            sync(),
            bind("", "q", &[]),
            execute(""),
            sync(),
            close(b'S', "zz"),
            sync(),
        ],
        3,
    )
    .await;
    assert_tags(&r, "3ZEZ3Z");
    // Flush with no server: the pooler's answer still comes at once.
    c1.send(&close(b'S', "zz")).await;
    c1.send(&raw::flush()).await;
    assert_eq!(c1.recv().await.tag, b'3');
    assert_tags(&exchange(&mut c1, &[sync()]).await, "Z");
    settle().await;
    assert_eq!(
        uses(&pooler, 1).len(),
        used,
        "no server taken: {:?}",
        events(&pooler)
    );
}

/// Common bug "forgetting the client's statements when it leaves": the pooler's record goes with
/// the client. A new client (another number) using the same name gets 26000 from the pooler and
/// can make its own.
#[tokio::test]
async fn statements_forgotten_when_the_client_leaves() {
    let pooler = start_tracked();
    let mut c1 = connect(&pooler).await;
    assert_tags(
        &exchange(&mut c1, &[parse("p", "select 'old'::text"), sync()]).await,
        "1Z",
    );
    c1.send(&terminate()).await;
    wait_line(&pooler, "[POOL] client 1 disconnected");

    let mut c2 = connect(&pooler).await;
    wait_line(&pooler, "[POOL] client 2 connected");
    let r = exchange(&mut c2, &[bind("", "p", &[]), execute(""), sync()]).await;
    assert_tags(&r, "EZ");
    assert_eq!(errors(&r), [("26000".to_string(), true)]);
    let r = exchange(
        &mut c2,
        &[
            parse("p", "select 'new'::text"),
            bind("", "p", &[]),
            execute(""),
            sync(),
        ],
    )
    .await;
    assert_tags(&r, "12DCZ");
    assert_eq!(col0(&r), ["new"]);
    assert_eq!(
        prepares(&pooler),
        [
            "[POOL] client 1 prepares p on server 1",
            "[POOL] client 2 prepares p on server 1",
        ]
    );
    // Dropping the connection without Terminate forgets as well.
    drop(c2);
    wait_line(&pooler, "[POOL] client 2 disconnected");
    let mut c3 = connect(&pooler).await;
    let r = exchange(&mut c3, &[describe(b'S', "p"), sync()]).await;
    assert_tags(&r, "EZ");
    assert_eq!(errors(&r), [("26000".to_string(), true)]);

    // Their copies go too: the next client on a server closes what departed clients left
    // there (no one can bind a `p<c>_` name of a client that left), so PostgreSQL's list is
    // what a session of its own would show.
    assert_eq!(status(&simple(&mut c3, "begin").await), 'T');
    assert_eq!(server_statements(&mut c3).await, Vec::<String>::new());
    assert_eq!(status(&simple(&mut c3, "commit").await), 'I');
    settle().await;
    let used = uses(&pooler, 3);
    assert!(
        !used.is_empty() && used.iter().all(|l| l.ends_with("server 1")),
        "c3 on the server the others used: {used:?}"
    );
}

/// `DEALLOCATE ALL` in a Query clears the client's kept statements in pipeline order (a Parse
/// after it in the same write survives, one before it does not), and the server connection's
/// record: another client's statement it dropped on that server is replayed there.
#[tokio::test]
async fn deallocate_all_clears_in_pipeline_order() {
    let pooler = start_tracked();
    let mut c1 = connect(&pooler).await;
    let mut c2 = connect(&pooler).await;
    assert_tags(
        &exchange(&mut c1, &[parse("a", "select 'a'::text"), sync()]).await,
        "1Z",
    );
    assert_tags(
        &exchange(&mut c2, &[parse("x", "select 'x'::text"), sync()]).await,
        "1Z",
    );
    wait_line(&pooler, "[POOL] client 2 released server 1");

    let r = exchange_n(
        &mut c1,
        &[
            query("DEALLOCATE ALL"),
            parse("b", "select 'b'::text"),
            bind("", "b", &[]),
            execute(""),
            sync(),
            bind("", "a", &[]),
            execute(""),
            sync(),
        ],
        3,
    )
    .await;
    assert_tags(&r, "CZ12DCZEZ");
    assert_eq!(command_tag(&r[0]), "DEALLOCATE ALL");
    assert_eq!(col0(&r), ["b"]);
    // The pooler learns of the DEALLOCATE from its CommandComplete, so a Bind of `a` pipelined
    // behind it reaches the server, which answers 26000 as it would without a pooler (with the
    // client's name: the pooler rewrites its own names out of server errors).
    assert_eq!(errors(&r).len(), 1);
    assert_eq!(errors(&r)[0].0, "26000");
    assert!(
        !error_texts(&r).iter().any(|m| m.contains("p1_")),
        "{:?}",
        error_texts(&r)
    );

    // `a` is free again; `b` survived.
    let r = exchange(
        &mut c1,
        &[
            parse("a", "select 'a2'::text"),
            bind("", "a", &[]),
            execute(""),
            bind("", "b", &[]),
            execute(""),
            sync(),
        ],
    )
    .await;
    assert_tags(&r, "12DC2DCZ");
    assert_eq!(col0(&r), ["a2", "b"]);

    // Client 2's x was dropped on server 1 too: it must be prepared there again.
    let r = exchange(&mut c2, &[bind("", "x", &[]), execute(""), sync()]).await;
    assert_tags(&r, "2DCZ");
    assert_eq!(col0(&r), ["x"]);
    let x_on_1 = prepares(&pooler)
        .iter()
        .filter(|l| *l == "[POOL] client 2 prepares x on server 1")
        .count();
    assert_eq!(x_on_1, 2, "{:?}", events(&pooler));

    // A Parse before DEALLOCATE ALL in the same write is gone after it.
    let r = exchange_n(
        &mut c1,
        &[
            parse("d", "select 'd'::text"),
            sync(),
            query("deallocate prepare all"),
            bind("", "d", &[]),
            execute(""),
            sync(),
        ],
        3,
    )
    .await;
    assert_tags(&r, "1ZCZEZ");
    // Pipelined behind the DEALLOCATE, the Bind reaches the server, which answers 26000.
    assert_eq!(errors(&r).len(), 1);
    assert_eq!(errors(&r)[0].0, "26000");
    assert!(
        !error_texts(&r).iter().any(|m| m.contains("p1_")),
        "{:?}",
        error_texts(&r)
    );
}

/// `DISCARD ALL` clears the same way, and both commands work through the extended protocol
/// (unnamed Parse, Bind, Execute) as well.
#[tokio::test]
async fn discard_all_clears_in_both_protocols() {
    let pooler = start_tracked();
    let mut c1 = connect(&pooler).await;
    for (i, sql) in ["DISCARD ALL", "DEALLOCATE ALL", "discard all"]
        .iter()
        .enumerate()
    {
        assert_tags(
            &exchange(&mut c1, &[parse("k", "select 'k'::text"), sync()]).await,
            "1Z",
        );
        let msgs = if i == 0 {
            vec![query(sql)]
        } else {
            vec![parse("", sql), bind("", "", &[]), execute(""), sync()]
        };
        let r = exchange(&mut c1, &msgs).await;
        let want = if i == 0 { "CZ" } else { "12CZ" };
        assert_tags(&r, want);
        let r = exchange(&mut c1, &[bind("", "k", &[]), execute(""), sync()]).await;
        assert_tags(&r, "EZ");
        assert_eq!(errors(&r), [("26000".to_string(), true)], "after {sql}");
        // The server copy is gone too: a new k is prepared again and answers.
        let r = exchange(
            &mut c1,
            &[
                parse("k", "select 'k2'::text"),
                bind("", "k", &[]),
                execute(""),
                close(b'S', "k"),
                sync(),
            ],
        )
        .await;
        assert_tags(&r, "12DC3Z");
        assert_eq!(col0(&r), ["k2"]);
    }
}

/// A DISCARD ALL / DEALLOCATE ALL that PostgreSQL refuses (inside a transaction block, or in a
/// failed transaction) drops nothing: the client's statements still work afterwards, as they
/// do directly on PostgreSQL.
#[tokio::test]
async fn refused_discard_all_keeps_statements() {
    let use_p = |name: &str| vec![bind("", name, &[]), execute(""), sync()];
    let mut seq = vec![
        parse("p", "select 'p'::text"),
        sync(),
        query("begin"),
        query("discard all"), // 25001: cannot run inside a transaction block
        query("rollback"),
    ];
    seq.extend(use_p("p"));
    // A statement of its own for the second case, so that it does not depend on the first.
    seq.extend([parse("q", "select 'q'::text"), sync()]);
    seq.extend([
        query("begin"),
        query("select 1/0"),     // 22012
        query("deallocate all"), // 25P02: ignored until the end of the transaction
        query("rollback"),
    ]);
    seq.extend(use_p("q"));
    let mut pg = direct().await;
    let want = exchange_n(&mut pg, &seq, 11).await;
    assert_eq!(
        errors(&want)
            .into_iter()
            .map(|(c, _)| c)
            .collect::<Vec<_>>(),
        ["25001", "22012", "25P02"]
    );
    assert_eq!(col0(&want), ["p", "q"], "{}", show(&want));

    let pooler = start_tracked();
    let mut c1 = connect(&pooler).await;
    let r = exchange_n(&mut c1, &seq, 11).await;
    assert_eq!(raw::tags(&r), raw::tags(&want), "{}", show(&r));
    assert_eq!(col0(&r), ["p", "q"], "{}", show(&r));
}

/// After an error the server skips the rest of the batch, Close included: the statement then
/// still exists on PostgreSQL, so it must for the pooler too.
#[tokio::test]
async fn close_skipped_after_an_error_keeps_the_statement() {
    let seq = [
        parse("p", "select 'p'::text"),
        sync(),
        // 1 parameter for a statement that takes none: 08P01 from the server.
        bind("", "p", &[Some("1")]),
        close(b'S', "p"),
        sync(),
        bind("", "p", &[]),
        execute(""),
        sync(),
    ];
    let mut pg = direct().await;
    let want = exchange_n(&mut pg, &seq, 3).await;
    assert_tags(&want, "1ZEZ2DCZ");

    // Through the pooler the Close is answered (and the statement forgotten) when it is read,
    // and brought back when the server's error shows it was skipped: a Bind sent after that
    // reply finds it. (Pipelined in the same write as the failing batch, it would get 26000;
    // see the README's note on tracking.)
    let pooler = start_tracked();
    let mut c1 = connect(&pooler).await;
    let mut r = exchange_n(&mut c1, &seq[..5], 2).await;
    r.extend(exchange_n(&mut c1, &seq[5..], 1).await);
    assert_tags(&r, "1ZEZ2DCZ");
    assert_eq!(col0(&r), ["p"]);
}

/// Describe S replays too (JDBC's metadata calls): on a server without the statement the
/// pooler sends the kept Parse first and the client sees only its ParameterDescription and
/// RowDescription.
#[tokio::test]
async fn describe_statement_replays() {
    let pooler = start_tracked();
    let mut c1 = connect(&pooler).await;
    let mut c2 = connect(&pooler).await;
    let r = exchange(
        &mut c1,
        &[
            parse("p", "select $1::int4 as x, 'y'::text as y, $2::int8 as z"),
            sync(),
        ],
    )
    .await;
    assert_tags(&r, "1Z");
    wait_line(&pooler, "[POOL] client 1 released server 1");
    assert_eq!(status(&simple(&mut c2, "begin").await), 'T');

    let r = exchange(&mut c1, &[describe(b'S', "p"), sync()]).await;
    assert_tags(&r, "tTZ");
    assert_eq!(param_types(&r[0]), [23, 20]);
    assert_eq!(columns(&r[1]), ["x", "y", "z"]);
    wait_line(&pooler, "[POOL] client 1 prepares p on server 2");

    // Now present on server 2: a Bind there is not a replay.
    let r = exchange(
        &mut c1,
        &[bind("", "p", &[Some("1"), Some("2")]), execute(""), sync()],
    )
    .await;
    assert_tags(&r, "2DCZ");
    assert_eq!(
        rows(&r),
        [vec![Some("1".into()), Some("y".into()), Some("2".into())]]
    );
    settle().await;
    assert_eq!(prepares(&pooler).len(), 2, "{:?}", events(&pooler));
    assert_eq!(status(&simple(&mut c2, "commit").await), 'I');
}

/// Clients really move between server connections (round robin) and their statements follow:
/// two clients with the same name `p`, alternating, each always gets its own answer, and each
/// statement is prepared once per server.
#[tokio::test]
async fn statements_follow_clients_across_servers() {
    let pooler = start_round_robin();
    let mut c1 = connect(&pooler).await;
    let mut c2 = connect(&pooler).await;
    open_two_servers(&pooler, &mut c1, &mut c2).await;
    let mut clients = [c1, c2];
    for (i, c) in clients.iter_mut().enumerate() {
        let sql = format!("select 'client{}:' || $1::text", i + 1);
        assert_tags(&exchange(c, &[parse("p", &sql), sync()]).await, "1Z");
    }
    for round in 0..8 {
        for (i, c) in clients.iter_mut().enumerate() {
            if i == 0 && round % 2 == 1 {
                // One more transaction shifts the rotation, so each client meets each server.
                assert_eq!(col0(&simple(c, "select 1").await), ["1"]);
            }
            let v = round.to_string();
            let msgs = if round % 3 == 0 {
                vec![
                    query("begin"),
                    bind("", "p", &[Some(&v)]),
                    execute(""),
                    sync(),
                    query("commit"),
                ]
            } else {
                vec![bind("", "p", &[Some(&v)]), execute(""), sync()]
            };
            let n = if round % 3 == 0 { 3 } else { 1 };
            let r = exchange_n(c, &msgs, n).await;
            assert!(errors(&r).is_empty(), "{}", show(&r));
            assert_eq!(col0(&r), [format!("client{}:{round}", i + 1)]);
        }
    }
    settle().await;
    for client in [1u64, 2] {
        let servers: BTreeSet<String> = uses(&pooler, client)
            .iter()
            .map(|l| l.rsplit(' ').next().unwrap_or_default().to_string())
            .collect();
        assert_eq!(servers.len(), 2, "client {client}: {:?}", events(&pooler));
        let mut p: Vec<String> = prepares(&pooler)
            .into_iter()
            .filter(|l| l.starts_with(&format!("[POOL] client {client} ")))
            .collect();
        p.sort();
        assert_eq!(
            p,
            [
                format!("[POOL] client {client} prepares p on server 1"),
                format!("[POOL] client {client} prepares p on server 2"),
            ]
        );
    }
}

/// `max_prepared_statements`: 500 distinct statements from one client with a bound of 50. The
/// server never holds more than 50 (pg_prepared_statements, read on the same connection), and
/// every execution answers right, also for evicted statements used again and for eviction
/// inside one pipeline.
#[tokio::test]
async fn eviction_keeps_the_server_bounded() {
    let yaml = "pool:\n  max_prepared_statements: 50\n  track_prepared: true\n  size: 2\n  \
                mode: transaction\n";
    let pooler = Pooler::start_with_config(support::shared(), yaml, &[]);
    let mut c1 = connect(&pooler).await;
    let mut max_seen = 0;
    async fn count(c: &mut Raw) -> usize {
        let r = simple(c, "select count(*) from pg_prepared_statements").await;
        assert!(errors(&r).is_empty(), "{}", show(&r));
        col0(&r)[0].parse().expect("a count")
    }
    for i in 0..500 {
        let name = format!("s{i}");
        let sql = format!("select {i} + $1::int");
        let r = exchange(
            &mut c1,
            &[
                parse(&name, &sql),
                bind("", &name, &[Some("1")]),
                execute(""),
                sync(),
            ],
        )
        .await;
        assert_tags(&r, "12DCZ");
        assert_eq!(col0(&r), [(i + 1).to_string()]);
        if i % 25 == 24 {
            let n = count(&mut c1).await;
            assert!(
                n <= 50,
                "{n} statements on the server after {} parses",
                i + 1
            );
            max_seen = max_seen.max(n);
        }
    }
    assert!(
        max_seen >= 40,
        "the bound is used, not just respected: {max_seen}"
    );
    // Every statement again, in another order: most were evicted and come back by replay.
    for k in 0..500 {
        let i = (k * 7) % 500;
        let name = format!("s{i}");
        let r = exchange(
            &mut c1,
            &[bind("", &name, &[Some("2")]), execute(""), sync()],
        )
        .await;
        assert_tags(&r, "2DCZ");
        assert_eq!(col0(&r), [(i + 2).to_string()], "{name}");
        if k % 50 == 49 {
            let n = count(&mut c1).await;
            assert!(n <= 50, "{n} statements on the server");
        }
    }
    // Eviction inside one pipeline: 60 Parses, then 60 Binds of them.
    let mut msgs = Vec::new();
    for j in 0..60 {
        msgs.push(parse(&format!("t{j}"), &format!("select {j} * 10")));
    }
    for j in 0..60 {
        msgs.push(bind("", &format!("t{j}"), &[]));
        msgs.push(execute(""));
    }
    msgs.push(sync());
    let r = exchange(&mut c1, &msgs).await;
    assert_tags(&r, &format!("{}{}Z", "1".repeat(60), "2DC".repeat(60)));
    let want: Vec<String> = (0..60).map(|j| (j * 10).to_string()).collect();
    assert_eq!(col0(&r), want);
    // And in one transaction, what the server holds is what it was said to hold.
    assert_eq!(status(&simple(&mut c1, "begin").await), 'T');
    let n = count(&mut c1).await;
    assert!(n <= 50, "{n}");
    assert_eq!(status(&simple(&mut c1, "commit").await), 'I');
    settle().await;
    // Only one server was ever used (one client, most recently used first).
    assert!(
        !events(&pooler).iter().any(|l| l.contains("server 2")),
        "{:?}",
        events(&pooler).iter().rev().take(5).collect::<Vec<_>>()
    );
}

/// Session mode with tracking on works: statements across transactions, the same name in two
/// clients, Close, Parse again, duplicate, DEALLOCATE ALL, and a server handed to a new client
/// after the reset.
#[tokio::test]
async fn session_mode_with_tracking_works() {
    let pooler = Pooler::start(
        support::shared(),
        &["--pool-size", "2", "--mode", "session", "--track-prepared"],
    );
    let mut c1 = connect(&pooler).await;
    let mut c2 = connect(&pooler).await;
    assert_tags(
        &exchange(&mut c1, &[parse("p", "select 'one'::text"), sync()]).await,
        "1Z",
    );
    assert_tags(
        &exchange(&mut c2, &[parse("p", "select 'two'::text"), sync()]).await,
        "1Z",
    );
    for _ in 0..3 {
        let r = exchange_n(
            &mut c1,
            &[
                query("begin"),
                bind("", "p", &[]),
                execute(""),
                sync(),
                query("commit"),
            ],
            3,
        )
        .await;
        assert_eq!(col0(&r), ["one"], "{}", show(&r));
        let r = exchange(&mut c2, &[bind("", "p", &[]), execute(""), sync()]).await;
        assert_tags(&r, "2DCZ");
        assert_eq!(col0(&r), ["two"]);
    }
    let r = exchange(&mut c1, &[parse("p", "select 'dup'"), sync()]).await;
    assert_tags(&r, "EZ");
    assert_eq!(errors(&r)[0].0, "42P05");
    let r = exchange(
        &mut c1,
        &[
            close(b'S', "p"),
            parse("p", "select 'again'::text"),
            bind("", "p", &[]),
            execute(""),
            sync(),
        ],
    )
    .await;
    assert_tags(&r, "312DCZ");
    assert_eq!(col0(&r), ["again"]);
    let r = exchange_n(
        &mut c1,
        &[
            query("deallocate all"),
            bind("", "p", &[]),
            execute(""),
            sync(),
        ],
        2,
    )
    .await;
    assert_tags(&r, "CZEZ");
    assert_eq!(errors(&r)[0].0, "26000");

    // c1 leaves; its server is reset and handed to c3, which may use the name p.
    drop(c1);
    wait_line(&pooler, "[POOL] client 1 disconnected");
    let mut c3 = connect(&pooler).await;
    let r = exchange(
        &mut c3,
        &[
            parse("p", "select 'three'::text"),
            bind("", "p", &[]),
            execute(""),
            sync(),
        ],
    )
    .await;
    assert_tags(&r, "12DCZ");
    assert_eq!(col0(&r), ["three"]);
    let r = exchange(&mut c2, &[bind("", "p", &[]), execute(""), sync()]).await;
    assert_eq!(col0(&r), ["two"]);
}

/// The transparent retry of "cached plan must not change result type" (0A000): after
/// `ALTER TABLE .. ADD COLUMN`, executing a kept `select *` outside a transaction gives the new
/// shape; inside one the client gets the 0A000.
#[tokio::test]
async fn plan_change_is_retried_outside_a_transaction() {
    let table = "prep_retry";
    fresh_table(table, "a int");
    support::shared().psql(&format!("insert into {table} values (1)"));
    let sql = format!("select * from {table}");
    let run = [bind("", "s", &[]), describe(b'P', ""), execute(""), sync()];
    // PostgreSQL itself answers the Bind with 0A000 after the ALTER (what the pooler retries).
    let mut pg = direct().await;
    assert_tags(&exchange(&mut pg, &[parse("s", &sql), sync()]).await, "1Z");
    support::shared().psql(&format!("alter table {table} add column x int"));
    let r = exchange(&mut pg, &run).await;
    assert_tags(&r, "EZ");
    assert_eq!(errors(&r), [("0A000".to_string(), false)]);
    drop(pg);
    support::shared().psql(&format!("alter table {table} drop column x"));

    let pooler = start_tracked();
    let mut c1 = connect(&pooler).await;
    assert_tags(&exchange(&mut c1, &[parse("s", &sql), sync()]).await, "1Z");
    let r = exchange(&mut c1, &run).await;
    assert_tags(&r, "2TDCZ");
    assert_eq!(columns(&r[1]), ["a"]);

    support::shared().psql(&format!("alter table {table} add column b int default 7"));
    // Same server (one client, most recently used): PostgreSQL would answer 0A000 to the Bind.
    let r = exchange(&mut c1, &run).await;
    assert_tags(&r, "2TDCZ");
    assert_eq!(columns(&r[1]), ["a", "b"]);
    assert_eq!(rows(&r), [vec![Some("1".into()), Some("7".into())]]);
    assert_eq!(status(&r), 'I');
    // And it keeps working afterwards, without another retry.
    let r = exchange(&mut c1, &run).await;
    assert_tags(&r, "2TDCZ");
    assert_eq!(columns(&r[1]), ["a", "b"]);

    // Inside a transaction the error is the client's.
    support::shared().psql(&format!("alter table {table} add column c int default 8"));
    assert_eq!(status(&simple(&mut c1, "begin").await), 'T');
    let r = exchange(&mut c1, &run).await;
    assert_tags(&r, "EZ");
    assert_eq!(errors(&r), [("0A000".to_string(), false)], "{}", show(&r));
    assert_eq!(status(&r), 'E');
    assert_eq!(status(&simple(&mut c1, "rollback").await), 'I');
    // Outside again: the new shape.
    let r = exchange(&mut c1, &run).await;
    assert_tags(&r, "2TDCZ");
    assert_eq!(columns(&r[1]), ["a", "b", "c"]);
    assert_eq!(
        rows(&r),
        [vec![Some("1".into()), Some("7".into()), Some("8".into())]]
    );
}

/// The retry keeps the batch it would send again, so that record is bounded: a batch of more
/// than 1,000 messages after the tracked Bind is not retried, and the client gets the 0A000,
/// as directly. A short one still is.
#[tokio::test]
async fn plan_change_retry_is_bounded() {
    let table = "prep_retry_bound";
    fresh_table(table, "a int");
    support::shared().psql(&format!("insert into {table} values (1)"));
    let sql = format!("select * from {table}");
    let pooler = start_tracked();
    let mut c1 = connect(&pooler).await;
    assert_tags(&exchange(&mut c1, &[parse("s", &sql), sync()]).await, "1Z");
    let batch_of = |flushes: usize| {
        let mut msgs = vec![bind("", "s", &[]), describe(b'P', ""), execute("")];
        msgs.extend((0..flushes).map(|_| raw::flush()));
        msgs.push(sync());
        msgs
    };
    assert_tags(&exchange(&mut c1, &batch_of(1)).await, "2TDCZ");

    support::shared().psql(&format!("alter table {table} add column b int default 7"));
    let r = exchange(&mut c1, &batch_of(1200)).await;
    assert_tags(&r, "EZ");
    assert_eq!(errors(&r), [("0A000".to_string(), false)], "{}", show(&r));
    // The statement is parsed again on the next use (the server rejected its old plan).
    let r = exchange(&mut c1, &batch_of(10)).await;
    assert_tags(&r, "2TDCZ");
    assert_eq!(columns(&r[1]), ["a", "b"]);

    support::shared().psql(&format!("alter table {table} add column c int default 8"));
    let r = exchange(&mut c1, &batch_of(10)).await;
    assert_tags(&r, "2TDCZ");
    assert_eq!(
        columns(&r[1]),
        ["a", "b", "c"],
        "a short batch is still retried"
    );
}

/// With tracking, a client keeps at most `pool.max_client_prepared_statements`: the Parse of
/// one more name gets 53400 and the batch is skipped to Sync; the session stays usable, and
/// once a name is closed a new one fits.
#[tokio::test]
async fn client_statements_are_bounded() {
    let pg = support::shared();
    let pooler =
        Pooler::start_with_config(pg, "pool:\n  max_client_prepared_statements: 3\n", TRACKED);
    let mut c1 = connect(&pooler).await;
    for name in ["s1", "s2", "s3"] {
        let r = exchange(&mut c1, &[parse(name, "select 1"), sync()]).await;
        assert_tags(&r, "1Z");
    }
    let r = exchange(
        &mut c1,
        &[
            parse("s4", "select 4"),
            bind("", "s4", &[]),
            execute(""),
            sync(),
        ],
    )
    .await;
    assert_tags(&r, "EZ");
    assert_eq!(errors(&r), [("53400".to_string(), true)], "{}", show(&r));
    // Parsing an existing name again is not a new statement: 42P05, not 53400.
    let r = exchange(&mut c1, &[parse("s1", "select 1"), sync()]).await;
    assert_eq!(errors(&r), [("42P05".to_string(), true)]);
    // Inside a transaction, on a held server: the transaction fails as on an error.
    assert_eq!(status(&simple(&mut c1, "begin").await), 'T');
    let r = exchange(&mut c1, &[parse("s4", "select 4"), sync()]).await;
    assert_eq!(errors(&r), [("53400".to_string(), true)]);
    assert_eq!(status(&r), 'E');
    assert_eq!(status(&simple(&mut c1, "rollback").await), 'I');
    let r = exchange(&mut c1, &[bind("", "s2", &[]), execute(""), sync()]).await;
    assert_tags(&r, "2DCZ");
    let r = exchange(
        &mut c1,
        &[close(b'S', "s3"), parse("s4", "select 4"), sync()],
    )
    .await;
    assert_tags(&r, "31Z");
}

/// `DEALLOCATE ALL` / `DISCARD ALL` with a comment around them (ORMs and tools add those) are
/// still those commands: the names are free again afterwards, as on PostgreSQL.
#[tokio::test]
async fn deallocate_all_with_comments_clears_too() {
    let pooler = start_tracked();
    let mut c1 = connect(&pooler).await;
    for sql in [
        "/* reset */ DEALLOCATE ALL",
        "DEALLOCATE ALL -- reset",
        "/* app=web */ DISCARD ALL",
    ] {
        let r = exchange_n(
            &mut c1,
            &[
                parse("k", "select 'k'::text"),
                sync(),
                query(sql),
                parse("k", "select 'k2'::text"),
                bind("", "k", &[]),
                execute(""),
                close(b'S', "k"),
                sync(),
            ],
            3,
        )
        .await;
        assert_tags(&r, "1ZCZ12DC3Z");
        assert_eq!(col0(&r), ["k2"], "after {sql:?}");
    }
}

/// DISCARD ALL run through a named prepared statement (what psycopg with prepare_threshold=0
/// does with `conn.execute("DISCARD ALL")`) drops every statement of that server connection,
/// other clients' too: their next use there must be prepared again, not fail with 26000.
#[tokio::test]
async fn discard_all_through_a_named_statement_clears_the_server_record() {
    let pooler = start_tracked();
    let mut c1 = connect(&pooler).await;
    let mut c2 = connect(&pooler).await;
    assert_tags(
        &exchange(&mut c2, &[parse("x", "select 'x'::text"), sync()]).await,
        "1Z",
    );
    for (i, sql) in ["DISCARD ALL", "DEALLOCATE ALL"].iter().enumerate() {
        let name = format!("d{i}");
        let r = exchange(
            &mut c1,
            &[parse(&name, sql), bind("", &name, &[]), execute(""), sync()],
        )
        .await;
        assert_tags(&r, "12CZ");
        wait_line(&pooler, "[POOL] client 1 released server 1");
        // Only server 1 exists: client 2 runs there, where x is gone.
        let r = exchange(&mut c2, &[bind("", "x", &[]), execute(""), sync()]).await;
        assert_tags(&r, "2DCZ");
        assert_eq!(col0(&r), ["x"], "after {sql} in a named statement");
    }
}

/// Statement mode with tracking on: statements survive from one statement's server to the
/// next.
#[tokio::test]
async fn statement_mode_with_tracking_works() {
    let pooler = Pooler::start(
        support::shared(),
        &[
            "--pool-size",
            "2",
            "--mode",
            "statement",
            "--track-prepared",
        ],
    );
    let mut c1 = connect(&pooler).await;
    let mut c2 = connect(&pooler).await;
    assert_tags(
        &exchange(&mut c1, &[parse("p", "select $1::int * 5"), sync()]).await,
        "1Z",
    );
    assert_tags(
        &exchange(&mut c2, &[parse("p", "select $1::int * 7"), sync()]).await,
        "1Z",
    );
    for i in 0..6 {
        let v = i.to_string();
        let r = exchange(&mut c1, &[bind("", "p", &[Some(&v)]), execute(""), sync()]).await;
        assert_tags(&r, "2DCZ");
        assert_eq!(col0(&r), [(i * 5).to_string()]);
        let r = exchange(&mut c2, &[bind("", "p", &[Some(&v)]), execute(""), sync()]).await;
        assert_tags(&r, "2DCZ");
        assert_eq!(col0(&r), [(i * 7).to_string()]);
    }
    let r = exchange(&mut c1, &[close(b'S', "p"), sync()]).await;
    assert_tags(&r, "3Z");
    let r = exchange(&mut c1, &[bind("", "p", &[Some("1")]), execute(""), sync()]).await;
    assert_eq!(errors(&r), [("26000".to_string(), true)]);
}

/// A Close the pooler slips in (for a stale copy, or to evict) is skipped by the server like
/// everything else after an error in the batch: the server still holds that statement, so the
/// pooler must not later send a Parse of the same name there (PostgreSQL would say 42P05).
///
/// Here for a stale copy: p is closed by the client (kept on the server), then made again in
/// a batch whose first message fails.
#[tokio::test]
async fn injected_close_of_a_stale_copy_skipped_after_an_error() {
    let pooler = start_tracked();
    let mut c1 = connect(&pooler).await;
    assert_tags(
        &exchange(
            &mut c1,
            &[
                parse("p", "select 'one'::text"),
                parse("q", "select 1"),
                sync(),
            ],
        )
        .await,
        "11Z",
    );
    assert_tags(&exchange(&mut c1, &[close(b'S', "p"), sync()]).await, "3Z");
    let r = exchange(
        &mut c1,
        &[
            bind("", "q", &[Some("1")]), // 08P01: q takes no parameter
            parse("p", "select 'two'::text"),
            sync(),
        ],
    )
    .await;
    assert_tags(&r, "EZ");
    assert_eq!(errors(&r), [("08P01".to_string(), false)]);
    let r = exchange(
        &mut c1,
        &[
            parse("p", "select 'three'::text"),
            bind("", "p", &[]),
            execute(""),
            sync(),
        ],
    )
    .await;
    assert_tags(&r, "12DCZ");
    assert_eq!(col0(&r), ["three"]);
}

/// The same for an eviction: with a bound of 1, making b evicts a, but the batch fails first;
/// a is then still on the server, and its next use must work.
#[tokio::test]
async fn injected_eviction_close_skipped_after_an_error() {
    let yaml = "pool:\n  max_prepared_statements: 1\n  track_prepared: true\n  size: 2\n  \
                mode: transaction\n";
    let pooler = Pooler::start_with_config(support::shared(), yaml, &[]);
    let mut c1 = connect(&pooler).await;
    assert_tags(
        &exchange(&mut c1, &[parse("a", "select 'a'::text"), sync()]).await,
        "1Z",
    );
    let r = exchange(
        &mut c1,
        &[
            bind("", "a", &[Some("1")]), // 08P01
            parse("b", "select 'b'::text"),
            sync(),
        ],
    )
    .await;
    assert_tags(&r, "EZ");
    let r = exchange(&mut c1, &[bind("", "a", &[]), execute(""), sync()]).await;
    assert_tags(&r, "2DCZ");
    assert_eq!(col0(&r), ["a"]);
}

/// The plan-change retry must not lose work the same batch did before the failing Bind: on
/// PostgreSQL the 0A000 aborts the batch's implicit transaction, rolling back an Execute that
/// ran before it. If the client is told that Execute succeeded, its row must be there.
#[tokio::test]
async fn plan_change_retry_keeps_earlier_work_of_the_batch() {
    let table = "prep_retry_batch";
    let log = "prep_retry_batch_log";
    fresh_table(table, "a int");
    fresh_table(log, "v int");
    support::shared().psql(&format!("insert into {table} values (1)"));
    let pooler = start_tracked();
    let mut c1 = connect(&pooler).await;
    let sql = format!("select * from {table}");
    assert_tags(
        &exchange(
            &mut c1,
            &[parse("s", &sql), bind("", "s", &[]), execute(""), sync()],
        )
        .await,
        "12DCZ",
    );
    support::shared().psql(&format!("alter table {table} add column b int default 7"));
    let insert = format!("insert into {log} values (1)");
    let r = exchange(
        &mut c1,
        &[
            parse("", &insert),
            bind("", "", &[]),
            execute(""),
            bind("", "s", &[]),
            describe(b'P', ""),
            execute(""),
            sync(),
        ],
    )
    .await;
    let rows_in_log = support::shared().psql(&format!("select count(*) from {log}"));
    if errors(&r).is_empty() {
        assert_tags(&r, "12C2TDCZ");
        assert_eq!(
            rows_in_log,
            "1",
            "the client was told the INSERT ran ({}), but it was rolled back",
            show(&r)
        );
    } else {
        assert_eq!(rows_in_log, "0", "{}", show(&r));
    }
}

/// The plan-change retry resends the client's batch; answers the pooler gave for that batch
/// (a CloseComplete for Close S) must still reach the client, in their place.
#[tokio::test]
async fn plan_change_retry_keeps_the_poolers_answers() {
    let table = "prep_retry_close";
    fresh_table(table, "a int");
    support::shared().psql(&format!("insert into {table} values (1)"));
    let pooler = start_tracked();
    let mut c1 = connect(&pooler).await;
    let sql = format!("select * from {table}");
    assert_tags(
        &exchange(
            &mut c1,
            &[
                parse("s", &sql),
                parse("t", "select 't'::text"),
                bind("", "s", &[]),
                execute(""),
                sync(),
            ],
        )
        .await,
        "112DCZ",
    );
    support::shared().psql(&format!("alter table {table} add column b int default 7"));
    let r = exchange(
        &mut c1,
        &[
            bind("", "s", &[]),
            describe(b'P', ""),
            execute(""),
            close(b'S', "t"),
            sync(),
        ],
    )
    .await;
    assert_tags(&r, "2TDC3Z");
    assert_eq!(columns(&r[1]), ["a", "b"]);
    let r = exchange(&mut c1, &[bind("", "t", &[]), execute(""), sync()]).await;
    assert_tags(&r, "EZ");
    assert_eq!(errors(&r), [("26000".to_string(), true)]);
}

/// A replay the server rejects (the table is gone) reports PostgreSQL's error at the client's
/// Bind, leaves the session usable, and is tried again at the next use.
#[tokio::test]
async fn failed_replay_reports_the_error_and_recovers() {
    let table = "prep_replay_fail";
    fresh_table(table, "a int");
    support::shared().psql(&format!("insert into {table} values (5)"));
    let pooler = start_tracked();
    let mut c1 = connect(&pooler).await;
    let mut c2 = connect(&pooler).await;
    let sql = format!("select a from {table}");
    assert_tags(&exchange(&mut c1, &[parse("p", &sql), sync()]).await, "1Z");
    wait_line(&pooler, "[POOL] client 1 released server 1");
    support::shared().psql(&format!("drop table {table}"));
    assert_eq!(status(&simple(&mut c2, "begin").await), 'T');
    // Server 2: the replayed Parse fails; the client sees that error, once, for its batch.
    let r = exchange(&mut c1, &[bind("", "p", &[]), execute(""), sync()]).await;
    assert_tags(&r, "EZ");
    assert_eq!(errors(&r), [("42P01".to_string(), false)]);
    assert_eq!(status(&r), 'I');
    let r = simple(&mut c1, "select 'usable'").await;
    assert_eq!(col0(&r), ["usable"]);
    // The table is back: the next use replays again and works.
    fresh_table(table, "a int");
    support::shared().psql(&format!("insert into {table} values (6)"));
    let r = exchange(&mut c1, &[bind("", "p", &[]), execute(""), sync()]).await;
    assert_tags(&r, "2DCZ");
    assert_eq!(col0(&r), ["6"]);
    assert_eq!(status(&simple(&mut c2, "commit").await), 'I');
}

/// The smallest bound: with `max_prepared_statements: 1` every use may evict the statement
/// before it, inside one pipeline too, and every answer is still right.
#[tokio::test]
async fn eviction_with_a_bound_of_one() {
    let yaml = "pool:\n  max_prepared_statements: 1\n  track_prepared: true\n  size: 2\n  \
                mode: transaction\n";
    let pooler = Pooler::start_with_config(support::shared(), yaml, &[]);
    let mut c1 = connect(&pooler).await;
    let r = exchange(
        &mut c1,
        &[
            parse("a", "select 'a'::text"),
            parse("b", "select 'b'::text"),
            bind("", "a", &[]),
            execute(""),
            bind("", "b", &[]),
            execute(""),
            describe(b'S', "a"),
            bind("", "a", &[]),
            execute(""),
            sync(),
        ],
    )
    .await;
    assert_tags(&r, "112DC2DCtT2DCZ");
    assert_eq!(col0(&r), ["a", "b", "a"]);
    assert_eq!(status(&simple(&mut c1, "begin").await), 'T');
    let n = server_statements(&mut c1).await;
    assert!(n.len() <= 1, "{n:?}");
    let r = exchange(&mut c1, &[bind("", "b", &[]), execute(""), sync()]).await;
    assert_eq!(col0(&r), ["b"]);
    assert_eq!(server_statements(&mut c1).await, ["p1_b"]);
    assert_eq!(status(&simple(&mut c1, "commit").await), 'I');
}

// ---------------------------------------------------------------------------------------------
// real drivers through a pool of 2, 20 concurrent clients, tracking on
// ---------------------------------------------------------------------------------------------

const DRIVER_CLIENTS: i32 = 20;
const DRIVER_ROUNDS: i32 = 30;

/// One tokio-postgres client's work; returns the rows it committed. Every answer is checked.
async fn tokio_postgres_client(conn: String, table: String, c: i32) -> Result<i64, String> {
    let e = |what: &str| {
        let what = what.to_string();
        move |err: tokio_postgres::Error| format!("client {c}: {what}: {err}")
    };
    let mut client = support::try_connect(&conn).await.map_err(e("connect"))?;
    let add = client
        .prepare("select $1::int4 + $2::int4")
        .await
        .map_err(e("prepare add"))?;
    let echo = client
        .prepare("select $1::text || '/' || $2::text")
        .await
        .map_err(e("prepare echo"))?;
    let ins = client
        .prepare(&format!(
            "insert into {table} (client, n) values ($1, $2) returning n"
        ))
        .await
        .map_err(e("prepare insert"))?;
    let mut committed = 0i64;
    let check = |got: String, want: String| {
        if got == want {
            Ok(())
        } else {
            Err(format!("client {c}: got {got:?}, want {want:?}"))
        }
    };
    for i in 0..DRIVER_ROUNDS {
        match i % 3 {
            0 => {
                let tx = client.transaction().await.map_err(e("begin"))?;
                let v: i32 = tx
                    .query_one(&add, &[&c, &i])
                    .await
                    .map_err(e("add"))?
                    .get(0);
                check(v.to_string(), (c + i).to_string())?;
                let n: i32 = tx
                    .query_one(&ins, &[&c, &i])
                    .await
                    .map_err(e("insert"))?
                    .get(0);
                check(n.to_string(), i.to_string())?;
                let s: String = tx
                    .query_one(&echo, &[&format!("c{c}"), &format!("i{i}")])
                    .await
                    .map_err(e("echo"))?
                    .get(0);
                check(s, format!("c{c}/i{i}"))?;
                if i % 2 == 0 {
                    tx.rollback().await.map_err(e("rollback"))?;
                } else {
                    tx.commit().await.map_err(e("commit"))?;
                    committed += 1;
                }
            }
            1 => {
                // Three statements pipelined in one write, outside a transaction.
                let text = i.to_string();
                let (p1, p2, p3): ([&(dyn ToSql + Sync); 2], [&(dyn ToSql + Sync); 2], _) =
                    ([&c, &i], [&"x", &text], [&c as &(dyn ToSql + Sync), &i]);
                let (a, b, d) = futures_util::try_join!(
                    client.query_one(&add, &p1),
                    client.query_one(&echo, &p2),
                    client.query_one(&ins, &p3),
                )
                .map_err(e("pipeline"))?;
                check(a.get::<_, i32>(0).to_string(), (c + i).to_string())?;
                check(b.get(0), format!("x/{i}"))?;
                check(d.get::<_, i32>(0).to_string(), i.to_string())?;
                committed += 1;
            }
            _ => {
                // A statement made, used and closed (tokio-postgres sends Close when it drops).
                let st = client
                    .prepare(&format!("select {c} * 1000 + $1::int4"))
                    .await
                    .map_err(e("prepare once"))?;
                let v: i32 = client
                    .query_one(&st, &[&i])
                    .await
                    .map_err(e("use once"))?
                    .get(0);
                check(v.to_string(), (c * 1000 + i).to_string())?;
                drop(st);
                // The long-lived ones again, in their own transactions.
                let v: i32 = client
                    .query_one(&add, &[&i, &i])
                    .await
                    .map_err(e("add"))?
                    .get(0);
                check(v.to_string(), (2 * i).to_string())?;
            }
        }
    }
    let n: i64 = client
        .query_one(
            &format!("select count(*) from {table} where client = $1"),
            &[&c],
        )
        .await
        .map_err(e("count"))?
        .get(0);
    check(n.to_string(), committed.to_string())?;
    Ok(committed)
}

async fn tokio_postgres_through(pooler: &Pooler, table: &str) {
    fresh_table(table, "client int, n int");
    let mut tasks = Vec::new();
    for c in 0..DRIVER_CLIENTS {
        let conn = pooler.conn_string(USER, DB);
        let table = table.to_string();
        tasks.push(tokio::spawn(tokio_postgres_client(conn, table, c)));
    }
    let mut failures = Vec::new();
    let mut total = 0;
    for t in tasks {
        match t.await {
            Ok(Ok(n)) => total += n,
            Ok(Err(msg)) => failures.push(msg),
            Err(panic) => failures.push(format!("task panicked: {panic}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    let rows = support::shared().psql(&format!("select count(*) from {table}"));
    assert_eq!(rows, total.to_string());
    let p = prepares(pooler);
    for server in ["server 1", "server 2"] {
        assert!(
            p.iter().any(|l| l.ends_with(server)),
            "no statement prepared on {server}: both servers must be used"
        );
    }
}

/// tokio-postgres, 20 clients, pool of 2, most recently used servers first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_postgres_20_clients() {
    let pooler = start_tracked();
    tokio_postgres_through(&pooler, "prep_tp_mru").await;
}

/// tokio-postgres, 20 clients, pool of 2, servers handed out in rotation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_postgres_20_clients_round_robin() {
    let pooler = start_round_robin();
    tokio_postgres_through(&pooler, "prep_tp_rr").await;
}

fn pgbench(args: &[&str]) -> (bool, String) {
    let mut cmd = Command::new(support::bin("pgbench"));
    cmd.args(args).stdin(Stdio::null());
    for var in [
        "PGHOST",
        "PGPORT",
        "PGUSER",
        "PGDATABASE",
        "PGPASSWORD",
        "PGOPTIONS",
    ] {
        cmd.env_remove(var);
    }
    let out = cmd.output().expect("run pgbench");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// A fresh database `db` owned by droid, filled by `pgbench -i -s 1` directly.
fn pgbench_init(db: &str) {
    let pg = support::shared();
    pg.psql_db("postgres", &format!("drop database if exists {db}"));
    pg.psql_db("postgres", &format!("create database {db} owner droid"));
    let port = pg.port.to_string();
    let init = [
        "-i",
        "-q",
        "-s",
        "1",
        "-h",
        "127.0.0.1",
        "-p",
        &port,
        "-U",
        USER,
        db,
    ];
    let (ok, out) = pgbench(&init);
    assert!(ok, "pgbench -i failed:\n{out}");
}

/// `pgbench -M prepared EXTRA` against database `db` through the pooler on `port`.
fn pgbench_through(port: &str, db: &str, extra: &[&str]) -> (bool, String) {
    let mut args = vec!["-M", "prepared"];
    args.extend_from_slice(extra);
    args.extend(["-h", "127.0.0.1", "-p", port, "-U", USER, db]);
    pgbench(&args)
}

/// `pgbench -M prepared`, 20 clients through a pool of 2: no failed transaction, with servers
/// handed out most recently used first and in rotation.
///
/// One pgbench thread per client (`-j 20`): pgbench prepares with the synchronous PQprepare,
/// which blocks its whole thread while that client waits for a server; with several clients per
/// thread, the clients of a blocked thread that hold servers inside a transaction cannot go on,
/// and the pool of 2 deadlocks until query_wait_timeout. That is pgbench's, not the pooler's.
#[test]
fn pgbench_prepared_20_clients() {
    let pg = support::shared();
    let db = "prep_bench";
    pgbench_init(db);
    for pooler in [
        Pooler::start(pg, TRACKED),
        Pooler::start_with_config(pg, ROUND_ROBIN, &[]),
    ] {
        let port = pooler.port().to_string();
        let (ok, out) = pgbench_through(&port, db, &["-n", "-c", "20", "-j", "20", "-t", "50"]);
        assert!(ok, "pgbench failed:\n{out}");
        assert!(
            out.contains("number of transactions actually processed: 1000/1000"),
            "{out}"
        );
        assert!(out.contains("number of failed transactions: 0 "), "{out}");
        let p = prepares(&pooler);
        assert!(
            p.iter().any(|l| l.ends_with("server 2")),
            "both servers used: {:?}",
            p.iter().take(5).collect::<Vec<_>>()
        );
    }
}

/// The relay issue's acceptance run: `pgbench -M prepared` TPC-B at `-c 16 -j 16` for a few
/// seconds through a pool of 2 with tracking: no failed and no aborted transaction, and every
/// transaction pgbench counted left its history row.
#[test]
fn pgbench_prepared_tpcb_16_clients_pool_of_2() {
    let pg = support::shared();
    let db = "prep_bench16";
    pgbench_init(db);
    let pooler = Pooler::start(pg, TRACKED);
    let port = pooler.port().to_string();
    let (ok, out) = pgbench_through(&port, db, &["-c", "16", "-j", "16", "-T", "5"]);
    assert!(ok, "pgbench failed:\n{out}");
    assert!(out.contains("number of failed transactions: 0 "), "{out}");
    assert!(!out.to_lowercase().contains("abort"), "{out}");
    let processed: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("number of transactions actually processed: "))
        .and_then(|v| v.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no processed count:\n{out}"));
    assert!(processed > 0, "{out}");
    let history = pg.psql_db(db, "select count(*) from pgbench_history");
    assert_eq!(history.trim(), processed.to_string(), "{out}");
}

/// The messages of every ErrorResponse in `frames`.
fn error_texts(frames: &[Frame]) -> Vec<String> {
    frames
        .iter()
        .filter(|f| f.tag == b'E')
        .map(|f| {
            droid_pool::protocol::backend::parse_error(f.body())
                .expect("error fields")
                .message
        })
        .collect()
}

/// A batch that runs a kept statement without describing it (asyncpg, tokio-postgres: they
/// decode rows with the description they kept) is not retried after a plan change: the
/// client gets PostgreSQL's 0A000, as directly, and not rows of a shape it does not know.
#[tokio::test]
async fn plan_change_without_a_describe_is_the_clients() {
    let table = "prep_retry_nodesc";
    fresh_table(table, "a int, b int");
    support::shared().psql(&format!("insert into {table} values (1, 2)"));
    let sql = format!("select * from {table}");
    let run = [bind("", "s", &[]), execute(""), sync()];
    let pooler = start_tracked();
    let mut c1 = connect(&pooler).await;
    assert_tags(&exchange(&mut c1, &[parse("s", &sql), sync()]).await, "1Z");
    assert_tags(&exchange(&mut c1, &run).await, "2DCZ");
    support::shared().psql(&format!("alter table {table} alter column b type text"));
    let r = exchange(&mut c1, &run).await;
    assert_tags(&r, "EZ");
    assert_eq!(errors(&r), [("0A000".to_string(), false)], "{}", show(&r));
    assert_eq!(status(&r), 'I');
}

/// The unnamed statement parsed in one transaction and bound in a later one (asyncpg does so
/// for a statement too long for its cache): the pooler replays the client's last unnamed
/// Parse where the server it lands on does not have it (no ParseComplete reaches the client),
/// never binds another client's unnamed statement, and drops it where PostgreSQL would (a
/// simple Query): then the pooler answers 26000, as PostgreSQL does.
#[tokio::test]
async fn unnamed_statement_follows_the_client() {
    let pooler = start_tracked();
    let mut c1 = connect(&pooler).await;
    let mut c2 = connect(&pooler).await;
    let r = exchange(
        &mut c1,
        &[
            parse("", "select $1::int + 100 as n"),
            describe(b'S', ""),
            sync(),
        ],
    )
    .await;
    assert_tags(&r, "1tTZ");
    wait_line(&pooler, "[POOL] client 1 released server 1");

    // Server 1 is c2's for now: c1 lands on server 2, which never saw its Parse.
    assert_eq!(status(&simple(&mut c2, "begin").await), 'T');
    c1.send(&batch(&[bind("", "", &[Some("1")]), raw::flush()]))
        .await;
    let f = c1.recv().await;
    assert_eq!(
        f.tag,
        b'2',
        "after a replay: {}",
        show(std::slice::from_ref(&f))
    );
    let r = exchange(&mut c1, &[execute(""), sync()]).await;
    assert_tags(&r, "DCZ");
    assert_eq!(col0(&r), ["101"]);
    wait_line(&pooler, "[POOL] client 1 released server 2");

    // c2's own unnamed statement, of another shape, on the server it leaves idle last.
    let r = exchange(&mut c2, &[parse("", "select $1::text || ' of c2'"), sync()]).await;
    assert_tags(&r, "1Z");
    assert_eq!(status(&simple(&mut c2, "commit").await), 'I');
    for i in 0..6 {
        let v = i.to_string();
        let msgs = if i % 2 == 0 {
            vec![bind("", "", &[Some(&v)]), execute(""), sync()]
        } else {
            vec![
                describe(b'S', ""),
                bind("", "", &[Some(&v)]),
                execute(""),
                sync(),
            ]
        };
        let r = exchange(&mut c1, &msgs).await;
        assert!(errors(&r).is_empty(), "{}", show(&r));
        assert_eq!(col0(&r), [(i + 100).to_string()], "{}", show(&r));
        // c2 takes a server in between, so c1 changes servers.
        let r = exchange(&mut c2, &[parse("", "select 'c2'"), sync()]).await;
        assert_tags(&r, "1Z");
    }

    // A simple Query drops the unnamed statement, on the server and in the pooler.
    assert_tags(&simple(&mut c1, "select 1").await, "TDCZ");
    let r = exchange(&mut c1, &[bind("", "", &[Some("1")]), execute(""), sync()]).await;
    assert_tags(&r, "EZ");
    let direct_answer = {
        let mut d = direct().await;
        simple(&mut d, "select 1").await;
        exchange(&mut d, &[bind("", "", &[Some("1")]), execute(""), sync()]).await
    };
    assert_eq!(errors(&direct_answer), [("26000".to_string(), false)]);
    assert_eq!(errors(&r), [("26000".to_string(), true)]);
    let said = |f: &Frame| -> Vec<(u8, String)> {
        let fields = error_fields(f).into_iter();
        fields
            .filter(|(k, _)| matches!(k, b'S' | b'C' | b'M'))
            .collect()
    };
    assert_eq!(said(&r[0]), said(&direct_answer[0]));
    // A client that never parsed one is refused too, whatever the server holds.
    let mut c3 = connect(&pooler).await;
    let r = exchange(&mut c3, &[bind("", "", &[Some("1")]), execute(""), sync()]).await;
    assert_eq!(errors(&r), [("26000".to_string(), true)]);
    assert_eq!(col0(&simple(&mut c3, "select 'usable'").await), ["usable"]);
}
