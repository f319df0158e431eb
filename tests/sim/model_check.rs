//! The model PostgreSQL of the simulation (`droid_pool::sim::model`) checked against a real
//! one: programs from the simulation's generator (session rules, so every piece of vocabulary,
//! with the real value sizes) run client by client directly against the harness PostgreSQL and
//! against the model, and every client must receive the same messages, normalised to what
//! matters: tags, SQLSTATE and severity of errors and notices, CommandComplete tags, DataRow
//! values, RowDescription column names, types, lengths and formats, ParameterStatus and
//! NotificationResponse contents (not the process id), COPY responses and data, ReadyForQuery
//! status, and how many messages had arrived after each Flush-ended write. Not compared: error
//! and notice texts (the model words them its own way), the table OIDs in RowDescription (only
//! whether a column comes from a table), and the login.
//!
//! Clients run one after another on their own connection, in a database of their own
//! (`model_check`, and one for each of the other two tests, apart from the differential test's
//! tables), emptied before each program.
//!
//! A third test runs what a pooler sends a server of its own accord (the settings sync through
//! `set_config`, the role question, `DISCARD ALL`, the check query).
//!
//! Deliberate differences the programs do not reach: the model's SET keeps a value as written
//! (`'60s'` stays `60s`, PostgreSQL shows `1min`) and checks no value; it knows thirteen
//! settings, with PostgreSQL's built-in defaults (the harness server's `TimeZone` comes from
//! its configuration); it detects no deadlock between advisory locks; pg_is_in_recovery() is
//! false; SQL outside the generator's vocabulary is a syntax error (PostgreSQL may accept it).
//!
//! `DROID_MODEL_SEEDS` sets how many seeds run (200), `DROID_MODEL_SEED` the first (0).
//! `DROID_MODEL_KEEP_GOING=1` reports every failing seed instead of shrinking the first.

use std::time::Duration;

use bytes::BytesMut;
use droid_pool::protocol::backend as b;
use droid_pool::protocol::frame::Frame;
use droid_pool::sim::direct::{self, DirectRun};
use droid_pool::sim::program::{self, ClientProgram, End, Program, Rules};
use tokio::io::AsyncWriteExt;

use crate::support::raw::Raw;
use crate::support::{self, PgServer};

const USER: &str = "droid";
/// How long a client waits for a message PostgreSQL should send.
const EXPECT: Duration = Duration::from_secs(10);
/// How long a client waits after a Flush-ended write for messages the model did not send.
const QUIET: Duration = Duration::from_millis(30);
/// Predicate runs the shrinker may spend on a failing program.
const SHRINK_BUDGET: usize = 150;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A database of the test's own (each of the three has one: each empties the tables before
/// every program, which would race with another's program in a shared one).
fn database(pg: &PgServer, name: &str) {
    pg.psql_db("postgres", &format!("DROP DATABASE IF EXISTS {name}"));
    pg.psql_db("postgres", &format!("CREATE DATABASE {name} OWNER {USER}"));
}

/// One message as the comparison sees it.
fn normalise(f: &Frame) -> String {
    let tag = f.tag as char;
    let body = f.body();
    match f.tag {
        b::ERROR_RESPONSE_TAG | b::NOTICE_RESPONSE_TAG => match b::parse_error(body) {
            Ok(e) => format!("{tag} {} {}", e.severity, e.code),
            Err(_) => format!("{tag} <unparsable>"),
        },
        b::ROW_DESCRIPTION_TAG => format!("T {}", row_description(body)),
        b::DATA_ROW_TAG => match b::parse_data_row(body) {
            Ok(cols) => {
                let cols: Vec<String> = cols.iter().map(|c| value(*c)).collect();
                format!("D [{}]", cols.join(", "))
            }
            Err(_) => "D <unparsable>".into(),
        },
        // The sending process's id differs; channel and payload must not.
        b::NOTIFICATION_RESPONSE_TAG => format!("A {:?}", body.get(4..).unwrap_or_default()),
        _ => format!("{tag} {}", value(Some(body))),
    }
}

fn value(v: Option<&[u8]>) -> String {
    match v {
        None => "NULL".into(),
        Some(v) if v.len() <= 64 => format!("{:?}", String::from_utf8_lossy(v)),
        Some(v) => {
            let distinct: std::collections::BTreeSet<u8> = v.iter().copied().collect();
            format!("<{} bytes of {:?}>", v.len(), distinct)
        }
    }
}

/// Column name, whether from a table, attribute number, type OID, length, modifier, format.
fn row_description(body: &[u8]) -> String {
    let mut c = droid_pool::protocol::Cursor::new(body);
    let n = c.i16().unwrap_or(0);
    let mut cols = Vec::new();
    for _ in 0..n {
        let (Ok(name), Ok(table), Ok(att), Ok(ty), Ok(len), Ok(modifier), Ok(format)) = (
            c.str(),
            c.i32(),
            c.i16(),
            c.i32(),
            c.i16(),
            c.i32(),
            c.i16(),
        ) else {
            return "<unparsable>".into();
        };
        cols.push(format!(
            "{name}:{}:{att}:{ty}:{len}:{modifier}:{format}",
            table != 0
        ));
    }
    cols.join(",")
}

/// A client's messages normalised, with markers for the end of the session, plus the
/// message counts after each Flush-ended write.
#[derive(Debug, Default, PartialEq, Eq)]
struct Seen {
    messages: Vec<String>,
    after_flush: Vec<usize>,
}

fn from_model(run: &DirectRun) -> Seen {
    let mut messages: Vec<String> = run.messages.iter().map(normalise).collect();
    if run.closed {
        messages.push("<closed>".into());
    }
    if run.stalled {
        messages.push("<no answer>".into());
    }
    Seen {
        messages,
        after_flush: run.after_flush.clone(),
    }
}

/// Runs one client's program on a new connection to the real PostgreSQL. After a Flush-ended
/// write it reads as many messages as the model sent, then waits a moment for more.
async fn from_postgres(port: u16, db: &str, client: &ClientProgram, model: &DirectRun) -> Seen {
    let mut raw = Raw::connect(port, USER, db).await;
    let mut seen = Seen::default();
    let mut flushes = model.after_flush.iter();
    for w in &client.writes {
        let mut bytes = BytesMut::new();
        w.encode(&mut bytes);
        if raw.stream.write_all(&bytes).await.is_err() {
            seen.messages.push("<closed>".into());
            return seen;
        }
        let until = match w.end {
            End::Fence => None,
            End::Flush => Some(flushes.next().copied().unwrap_or(0)),
        };
        let mut empty = false;
        loop {
            let wait = match until {
                Some(n) if seen.messages.len() >= n => QUIET,
                _ => EXPECT,
            };
            let Ok(next) = tokio::time::timeout(wait, raw.try_recv()).await else {
                if until.is_none() || seen.messages.len() < until.unwrap_or(0) {
                    seen.messages.push("<no answer>".into());
                    return seen;
                }
                break;
            };
            let Some(f) = next else {
                seen.messages.push("<closed>".into());
                return seen;
            };
            seen.messages.push(normalise(&f));
            match f.tag {
                b::EMPTY_QUERY_RESPONSE_TAG => empty = true,
                b::READY_FOR_QUERY_TAG if empty && until.is_none() => break,
                _ => empty = false,
            }
        }
        if until.is_some() {
            seen.after_flush.push(seen.messages.len());
        }
    }
    seen
}

/// Runs `program` both ways; the first client whose messages differ, described.
async fn compare(pg: &PgServer, db: &str, admin: &mut Raw, program: &Program) -> Option<String> {
    let mut reset = String::new();
    for t in program::tables(4) {
        reset += &format!("create table if not exists {t} (n int); truncate {t};");
    }
    admin.send(&raw_query(&reset)).await;
    admin.until_ready().await;
    let model = direct::run_program(program);
    for (c, (client, run)) in program.clients.iter().zip(&model).enumerate() {
        let want = from_postgres(pg.port, db, client, run).await;
        let got = from_model(run);
        if want != got {
            return Some(format!("client {c}: {}", difference(&want, &got)));
        }
    }
    None
}

fn raw_query(sql: &str) -> BytesMut {
    let mut b = BytesMut::new();
    droid_pool::protocol::frontend::query(&mut b, sql);
    b
}

fn difference(pg: &Seen, model: &Seen) -> String {
    let at = pg
        .messages
        .iter()
        .zip(&model.messages)
        .position(|(a, b)| a != b)
        .unwrap_or(pg.messages.len().min(model.messages.len()));
    let show = |s: &Seen| {
        let lines: Vec<String> = s
            .messages
            .iter()
            .enumerate()
            .skip(at.saturating_sub(4))
            .take(9)
            .map(|(i, m)| format!("    {i}: {m}"))
            .collect();
        format!(
            "{}\n    after flushes: {:?}",
            lines.join("\n"),
            s.after_flush
        )
    };
    format!(
        "first difference at message {at}\n  PostgreSQL:\n{}\n  model:\n{}",
        show(pg),
        show(model)
    )
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Generated programs: the model answers as PostgreSQL does.
#[test]
fn model_matches_postgresql() {
    const DB: &str = "model_check";
    let pg = support::shared();
    database(pg, DB);
    let rules = Rules::session(3);
    let first = env("DROID_MODEL_SEED", 0);
    let seeds = env("DROID_MODEL_SEEDS", 200);
    let keep_going = std::env::var("DROID_MODEL_KEEP_GOING").is_ok_and(|v| v == "1");
    let rt = runtime();
    let mut admin = rt.block_on(Raw::connect(pg.port, USER, DB));
    let mut failures = Vec::new();
    for seed in first..first + seeds {
        let p = program::generate(seed, &rules);
        let Some(diff) = rt.block_on(compare(pg, DB, &mut admin, &p)) else {
            continue;
        };
        if keep_going {
            failures.push(format!("seed {seed}: {diff}"));
            continue;
        }
        let mut budget = SHRINK_BUDGET;
        let small = program::shrink(&p, &rules, |c| {
            budget = budget.saturating_sub(1);
            budget > 0 && rt.block_on(compare(pg, DB, &mut admin, c)).is_some()
        });
        let diff = rt
            .block_on(compare(pg, DB, &mut admin, &small))
            .unwrap_or(diff);
        panic!("seed {seed}: the model differs from PostgreSQL\n{diff}\nprogram: {small}");
    }
    assert!(
        failures.is_empty(),
        "{} of {seeds} seeds differ:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// What a pooler sends a server of its own accord: the settings sync, the role question, the
/// reset, the pin check and check queries. The model answers them as PostgreSQL does.
#[test]
fn model_matches_postgresql_on_pooler_statements() {
    const DB: &str = "model_check_pooler";
    let pg = support::shared();
    database(pg, DB);
    let rt = runtime();
    let mut admin = rt.block_on(Raw::connect(pg.port, USER, DB));
    let queries = [
        "SELECT pg_catalog.set_config(E'application_name', E'a''b\\\\', false), \
         pg_catalog.set_config(E'extra_float_digits', E'2', false)",
        "RESET extra_float_digits;SELECT pg_catalog.set_config(E'application_name', E'c', false)",
        "SELECT pg_catalog.pg_is_in_recovery(), (SELECT reset_val FROM pg_catalog.pg_settings \
         WHERE name = 'default_transaction_read_only')",
        "begin",
        "SELECT pg_catalog.set_config(E'application_name', E'in block', false)",
        "ROLLBACK",
        "DISCARD ALL",
        "select 1",
        // The pin check: a temp table 1, a held advisory lock 4, nothing after DISCARD ALL.
        droid_pool::relay::PIN_CHECK_SQL,
        "create temp table tt (n int)",
        droid_pool::relay::PIN_CHECK_SQL,
        "select pg_advisory_lock(5)",
        droid_pool::relay::PIN_CHECK_SQL,
        "DISCARD ALL",
        droid_pool::relay::PIN_CHECK_SQL,
    ];
    let write = |sql: &str| program::Write {
        msgs: vec![program::Msg::Query(sql.into())],
        end: End::Fence,
    };
    let p = Program {
        clients: vec![ClientProgram {
            writes: queries.iter().map(|q| write(q)).collect(),
        }],
    };
    if let Some(diff) = rt.block_on(compare(pg, DB, &mut admin, &p)) {
        panic!("{diff}\nprogram: {p}");
    }
}

/// The differential test's recorded cases (tests/it/differential/): the model answers them as
/// PostgreSQL does.
#[test]
fn model_matches_postgresql_on_recorded_cases() {
    const DB: &str = "model_check_cases";
    let pg = support::shared();
    database(pg, DB);
    let rt = runtime();
    let mut admin = rt.block_on(Raw::connect(pg.port, USER, DB));
    let cases = [
        include_str!("../it/differential/regressions.jsonl"),
        include_str!("../it/differential/open.jsonl"),
    ];
    let mut n = 0;
    for line in cases.iter().flat_map(|c| c.lines()) {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        #[derive(serde::Deserialize)]
        struct Case {
            program: Program,
        }
        let case: Case = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        if let Some(diff) = rt.block_on(compare(pg, DB, &mut admin, &case.program)) {
            panic!("recorded case {n}: {diff}\nprogram: {}", case.program);
        }
        n += 1;
    }
    assert!(n > 0);
}
