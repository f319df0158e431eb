//! The model's tricky rules, one exchange each: skip-to-Sync, COPY with Sync inside, failed
//! blocks, portal suspension, notices, FATAL, what stays in the send buffer, notifications
//! and locks between sessions, and that any split of the input gives the same output.

mod sessions;

use bytes::BytesMut;

use super::*;
use crate::protocol::backend as be;
use crate::sim::program::{Msg, Param};

/// One session on its own database with the table `t`.
struct S {
    db: ModelDb,
    s: ModelServer,
}

fn session() -> S {
    S {
        db: ModelDb::with_tables(["t"]),
        s: ModelServer::new(7),
    }
}

fn bytes(msgs: &[Msg]) -> BytesMut {
    let mut b = BytesMut::new();
    msgs.iter().for_each(|m| m.encode(&mut b));
    b
}

/// Messages as short strings: `E:26000`, `C:SELECT 1`, `Z:I`, `D:[1]`, else the tag.
fn short(out: &mut BytesMut) -> Vec<String> {
    let mut v = Vec::new();
    while let Ok(Some(f)) = frame::cut(out, usize::MAX) {
        let body = f.body();
        v.push(match f.tag {
            be::ERROR_RESPONSE_TAG | be::NOTICE_RESPONSE_TAG => {
                let e = be::parse_error(body).expect("fields");
                format!("{}:{}", f.tag as char, e.code)
            }
            be::COMMAND_COMPLETE_TAG => {
                format!("C:{}", String::from_utf8_lossy(&body[..body.len() - 1]))
            }
            be::READY_FOR_QUERY_TAG => format!("Z:{}", body[0] as char),
            be::DATA_ROW_TAG => {
                let cols = be::parse_data_row(body).expect("row");
                let cols: Vec<String> = cols
                    .iter()
                    .map(|c| c.map_or("NULL".into(), |c| String::from_utf8_lossy(c).into()))
                    .collect();
                format!("D:[{}]", cols.join(","))
            }
            be::PARAMETER_STATUS_TAG => {
                let (k, v) = be::parse_parameter_status(body).expect("status");
                format!("S:{k}={v}")
            }
            tag => (tag as char).to_string(),
        });
    }
    v
}

impl S {
    fn send(&mut self, msgs: &[Msg]) -> Vec<String> {
        let mut out = BytesMut::new();
        self.s.feed(&mut self.db, &bytes(msgs), &mut out);
        short(&mut out)
    }

    fn query(&mut self, sql: &str) -> Vec<String> {
        self.send(&[Msg::Query(sql.into())])
    }
}

fn q(sql: &str) -> Msg {
    Msg::Query(sql.into())
}

fn parse(name: &str, sql: &str) -> Msg {
    Msg::Parse(name.into(), sql.into())
}

fn bind(portal: &str, stmt: &str, params: &[&str]) -> Msg {
    let params = params.iter().map(|p| Param::Text((*p).into())).collect();
    Msg::Bind(portal.into(), stmt.into(), params)
}

fn exec(portal: &str, rows: i32) -> Msg {
    Msg::Execute(portal.into(), rows)
}

#[test]
fn an_extended_error_skips_to_sync_even_terminate() {
    let mut s = session();
    let got = s.send(&[
        parse("a", "select 1"),
        parse("b", "selec 1"),
        bind("", "a", &[]),
        exec("", 0),
        q("select 1"),
        Msg::Describe('S', "a".into()),
    ]);
    assert_eq!(got, ["1", "E:42601"]);
    let mut x = BytesMut::new();
    crate::protocol::frontend::terminate(&mut x);
    s.s.feed(&mut s.db, &x, &mut BytesMut::new());
    assert!(!s.s.is_closed() && s.s.skipping_to_sync());
    assert_eq!(s.send(&[Msg::Sync]), ["Z:I"]);
    assert_eq!(s.s.prepared_names().collect::<Vec<_>>(), ["a"]);
}

#[test]
fn copy_in_ignores_sync_and_flush_and_joins_lines_across_messages() {
    let mut s = session();
    let got = s.send(&[
        q("copy t from stdin"),
        Msg::CopyData("10".into()),
        Msg::Flush,
        Msg::Sync,
        Msg::CopyData("1\n7".into()),
        Msg::CopyDone,
    ]);
    assert_eq!(got, ["G", "C:COPY 2", "Z:I"]);
    assert_eq!(s.db.rows("t"), Some(&[Some(101), Some(7)][..]));
}

#[test]
fn bad_copy_data_fails_the_extended_copy_and_skips_to_sync() {
    let mut s = session();
    let got = s.send(&[
        parse("", "copy t from stdin"),
        bind("", "", &[]),
        exec("", 0),
        Msg::Sync,
        Msg::CopyData("100\n".into()),
        Msg::CopyData("oops\n".into()),
        Msg::CopyDone,
        Msg::Sync,
    ]);
    assert_eq!(got, ["1", "2", "G", "E:22P02", "Z:I"]);
    assert_eq!(s.db.rows("t"), Some(&[][..]));
}

#[test]
fn a_failed_block_refuses_all_but_its_end_and_undoes_its_settings() {
    let mut s = session();
    assert_eq!(s.query("begin"), ["C:BEGIN", "Z:T"]);
    assert_eq!(
        s.query("set application_name = 'x'; insert into t values (1)"),
        ["C:SET", "C:INSERT 0 1", "S:application_name=x", "Z:T"]
    );
    assert_eq!(
        s.query("select 1/0"),
        ["E:22012", "S:application_name=", "Z:E"]
    );
    assert_eq!(s.query("select 1"), ["E:25P02", "Z:E"]);
    let got = s.send(&[parse("", "select 1"), parse("", "commit"), Msg::Sync]);
    assert_eq!(got, ["E:25P02", "Z:E"]);
    assert_eq!(s.query("commit"), ["C:ROLLBACK", "Z:I"]);
    assert_eq!(s.db.rows("t"), Some(&[][..]));
}

#[test]
fn an_error_ends_the_implicit_transaction_of_a_query_or_batch() {
    let mut s = session();
    assert_eq!(
        s.query("insert into t values (7); select 1/0"),
        ["C:INSERT 0 1", "E:22012", "Z:I"]
    );
    let got = s.send(&[
        parse("", "insert into t values ($1::int)"),
        bind("", "", &["5"]),
        exec("", 0),
        bind("", "", &["nope"]),
        Msg::Sync,
    ]);
    assert_eq!(got, ["1", "2", "C:INSERT 0 1", "E:22P02", "Z:I"]);
    assert_eq!(s.db.rows("t"), Some(&[][..]));
    assert_eq!(s.query("select 1; selec 2; select 3"), ["E:42601", "Z:I"]);
}

#[test]
fn a_row_limit_suspends_the_portal_until_the_transaction_ends() {
    let mut s = session();
    s.query("insert into t values (3); insert into t values (1)");
    let got = s.send(&[
        parse("", "select n from t order by n"),
        bind("p", "", &[]),
        exec("p", 1),
        exec("p", 1),
        exec("p", 1),
        exec("p", 0),
        Msg::Sync,
        exec("p", 0),
        Msg::Sync,
    ]);
    assert_eq!(
        got,
        [
            "1",
            "2",
            "D:[1]",
            "s",
            "D:[3]",
            "s",
            "C:SELECT 0",
            "C:SELECT 0",
            "Z:I",
            "E:34000",
            "Z:I"
        ]
    );
}

#[test]
fn replies_wait_in_the_send_buffer_for_flush_but_notices_go_at_once() {
    let mut s = session();
    assert!(s
        .send(&[parse("", "select 1"), bind("", "", &[])])
        .is_empty());
    assert_eq!(s.send(&[Msg::Flush]), ["1", "2"]);
    let got = s.send(&[
        parse("", "do $$ begin raise notice 'n'; end $$"),
        bind("", "", &[]),
        exec("", 0),
    ]);
    assert_eq!(
        got,
        ["1", "2", "N:00000"],
        "CommandComplete stays in the buffer"
    );
    assert_eq!(s.send(&[Msg::Sync]), ["C:DO", "Z:I"]);
    assert_eq!(s.query("commit"), ["N:25P01", "C:COMMIT", "Z:I"]);
}

#[test]
fn terminating_itself_ends_the_session_after_the_row() {
    let mut s = session();
    let got = s.query("select 1; select pg_terminate_backend(pg_backend_pid()); select 2");
    assert_eq!(got, ["T", "D:[1]", "C:SELECT 1", "T", "D:[t]", "E:57P01"]);
    assert!(s.s.is_closed());
    assert!(s.query("select 1").is_empty());
    let mut s = session();
    let got = s.send(&[
        parse("", "select pg_terminate_backend(pg_backend_pid())"),
        bind("", "", &[]),
        exec("", 1),
        Msg::Sync,
    ]);
    assert_eq!(got, ["1", "2", "D:[t]", "s", "E:57P01"]);
}

#[test]
fn parameter_status_reports_changes_just_before_ready_for_query() {
    let mut s = session();
    assert_eq!(
        s.query("begin; set application_name = 'y'; rollback"),
        ["C:BEGIN", "C:SET", "C:ROLLBACK", "Z:I"]
    );
    assert_eq!(
        s.query("set application_name = 'x'; select 1")[..4],
        ["C:SET", "T", "D:[1]", "C:SELECT 1"]
    );
    assert_eq!(s.query("set application_name = 'x'"), ["C:SET", "Z:I"]);
    assert_eq!(
        s.query("set local application_name = 'l'"),
        ["N:25P01", "C:SET", "Z:I"]
    );
    assert_eq!(
        s.query("begin; set local application_name = 'l'"),
        ["C:BEGIN", "C:SET", "S:application_name=l", "Z:T"]
    );
    assert_eq!(
        s.query("commit"),
        ["C:COMMIT", "S:application_name=x", "Z:I"],
        "SET LOCAL ends at commit"
    );
    assert_eq!(
        s.query("discard all"),
        ["C:DISCARD ALL", "S:application_name=", "Z:I"]
    );
    assert_eq!(s.s.setting("application_name"), Some(""));
}

#[test]
fn any_split_of_the_input_gives_the_same_output() {
    let msgs = [
        q("insert into t values (1); select n from t order by n"),
        parse("a", "select $1::text"),
        bind("", "a", &["v"]),
        exec("", 0),
        Msg::Flush,
        q("copy t from stdin"),
        Msg::CopyData("5\n6".into()),
        Msg::CopyDone,
        q("select repeat('x', 20000)"),
        Msg::Sync,
    ];
    let whole = bytes(&msgs);
    let mut s = session();
    let mut want = BytesMut::new();
    s.s.feed(&mut s.db, &whole, &mut want);
    for step in [1, 2, 3, 7, 100, 5000] {
        let mut s = session();
        let mut got = BytesMut::new();
        for chunk in whole.chunks(step) {
            s.s.feed(&mut s.db, chunk, &mut got);
        }
        assert_eq!(got, want, "fed {step} bytes at a time");
    }
}

#[test]
fn megabyte_values_go_out_whole() {
    let mut s = session();
    let mut out = BytesMut::new();
    s.s.feed(
        &mut s.db,
        &bytes(&[q("select repeat('x', 3000000)")]),
        &mut out,
    );
    let got = short(&mut out.clone());
    assert_eq!(got.len(), 4);
    assert!(out.len() > 3_000_000);
}

#[test]
fn a_poolers_settings_sync_is_reported_like_set() {
    let mut s = session();
    let got = s.query("SELECT pg_catalog.set_config(E'application_name', E'x', false)");
    assert_eq!(
        got,
        ["T", "D:[x]", "C:SELECT 1", "S:application_name=x", "Z:I"]
    );
    let got = s.query(
        "RESET application_name;SELECT pg_catalog.set_config(E'TimeZone', E'Asia/Tokyo', false)",
    );
    assert_eq!(
        got,
        [
            "C:RESET",
            "T",
            "D:[Asia/Tokyo]",
            "C:SELECT 1",
            "S:application_name=",
            "S:TimeZone=Asia/Tokyo",
            "Z:I"
        ]
    );
    let got = s.query(
        "SELECT pg_catalog.pg_is_in_recovery(), (SELECT reset_val FROM pg_catalog.pg_settings \
         WHERE name = 'default_transaction_read_only')",
    );
    assert_eq!(got, ["T", "D:[f,off]", "C:SELECT 1", "Z:I"]);
}
