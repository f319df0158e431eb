//! The lexer's statement boundaries against PostgreSQL's own. Texts of several statements
//! are generated from a seed: `SELECT <k>` markers (k counts the text's statements) carrying
//! literals of every kind that hold `;`, quotes and comment starts, comments between tokens
//! (`--` ended by LF, CR or CRLF, nested `/* */`), operators beside comments, identifiers
//! with `$`, empty statements, `CREATE FUNCTION ... BEGIN ATOMIC` bodies, and a last
//! `SET standard_conforming_strings`. Each text goes to PostgreSQL as one simple Query; the markers of
//! the rows it returns must be the markers the lexer finds at the start of the statements
//! it splits out, in order, and with no function body in the text the statement counts
//! must match too. Before each text the session's `standard_conforming_strings` and
//! `client_encoding` (UTF8 or SJIS) may change; the lexer's [`Scan`] follows them from the
//! `ParameterStatus` messages alone, as the pooler does. PostgreSQL lexes a whole Query
//! before it runs any of it, so a `SET` inside a text changes only the texts after it (the
//! `SET` comes last: pg_stat_statements reads each statement again as it runs, under the
//! setting of that moment, and refuses, misreads or, on 15.18, crashes on what follows).
//!
//! A text PostgreSQL refuses is a bug of the generator and fails the test. Texts the lexer
//! before this one split wrongly run first ([`REGRESSIONS`]). `DROID_LEX_SEEDS` sets how
//! many seeds run (300), `DROID_LEX_SEED` runs one.

use bytes::{BufMut, BytesMut};
use droid_pool::protocol::backend;
use droid_pool::protocol::frame::{begin, finish};
use droid_pool::protocol::frontend;
use droid_pool::session_state::lex::{statements_with, Scan, Token, Tokens};

use crate::support::{self, raw::Raw};

mod gen;

/// A text to run and what the session is when it runs.
struct Case {
    standard: bool,
    sjis: bool,
    sql: Vec<u8>,
    /// Whether it holds a `BEGIN ATOMIC` body (the lexer splits inside it: markers only).
    atomic: bool,
}

/// Texts the lexer of main 8d4923b split otherwise than PostgreSQL:
/// (standard_conforming_strings, SJIS, text).
const REGRESSIONS: &[(bool, bool, &[u8])] = &[
    // A `--` comment ends at CR.
    (true, false, b"SELECT 0;--x\rSELECT 1"),
    // standard_conforming_strings off: `\'` is a quote inside a plain literal.
    (false, false, b"SELECT 0, 'a\\'; SELECT 9; ' AS x; SELECT 1"),
    (false, false, b"SELECT 0, N'\\'; SELECT 9; '; SELECT 1"),
    // A continued literal keeps its reading: the second segment is an E'' one.
    (true, false, b"SELECT 0, E'a'\n'\\'; SELECT 9; '; SELECT 1"),
    // SJIS: the second byte of `\x83\x5c` is no backslash.
    (true, true, b"SELECT 0, E'\x83\x5c'; SELECT 1; -- '"),
];

/// The marker a statement the lexer split out starts with (`SELECT <k>`), if any.
fn marker(stmt: &[u8], scan: Scan) -> Option<usize> {
    let mut t = Tokens::with(stmt, 0, scan);
    if !t.next()?.is("select") {
        return None;
    }
    match t.next()? {
        Token::Other(k) => std::str::from_utf8(k).ok()?.parse().ok(),
        _ => None,
    }
}

/// A simple Query of raw bytes (the text need not be UTF-8).
fn query(sql: &[u8]) -> BytesMut {
    let mut b = BytesMut::new();
    let at = begin(&mut b, frontend::QUERY_TAG);
    b.put_slice(sql);
    b.put_u8(0);
    finish(&mut b, at);
    b
}

/// Runs `sql`; the first column of each row, the statements completed, and the reading
/// the `ParameterStatus` messages leave (from `scan`). A refused text panics.
async fn run(raw: &mut Raw, sql: &[u8], scan: Scan, what: &str) -> (Vec<usize>, usize, Scan) {
    raw.send(&query(sql)).await;
    let (mut rows, mut completed, mut after) = (Vec::new(), 0, scan);
    for f in raw.until_ready().await {
        match f.tag {
            backend::DATA_ROW_TAG => {
                let k = support::raw::first_col(&f).and_then(|k| k.parse().ok());
                rows.push(k.expect("a marker row"));
            }
            backend::COMMAND_COMPLETE_TAG => completed += 1,
            backend::PARAMETER_STATUS_TAG => {
                let (name, value) = backend::parse_parameter_status(f.body()).expect("status");
                after.observe(name.as_bytes(), value.as_bytes());
            }
            backend::ERROR_RESPONSE_TAG => {
                let e = backend::parse_error(f.body()).expect("error fields");
                panic!(
                    "generator bug ({what}): PostgreSQL refused {:?}: {} {}",
                    String::from_utf8_lossy(sql),
                    e.code,
                    e.message
                );
            }
            _ => {}
        }
    }
    (rows, completed, after)
}

/// Sets the session up for `case` (each change a Query of its own, followed through
/// `ParameterStatus`), runs it and compares: the reading after it, and how the lexer and
/// PostgreSQL differ if they do.
async fn check(raw: &mut Raw, mut scan: Scan, case: &Case, what: &str) -> (Scan, Option<String>) {
    let encoding = if case.sjis { "SJIS" } else { "UTF8" };
    let mode = if case.standard { "on" } else { "off" };
    let setup =
        format!("SET client_encoding = {encoding}; SET standard_conforming_strings = {mode}");
    scan = run(raw, setup.as_bytes(), scan, what).await.2;
    let (rows, completed, after) = run(raw, &case.sql, scan, what).await;
    let lexed: Vec<usize> = statements_with(&case.sql, scan)
        .filter_map(|s| marker(s, scan))
        .collect();
    let split = statements_with(&case.sql, scan).count();
    let differs = format!(
        "{what}: the lexer ({scan:?}) and PostgreSQL split {:?} otherwise: \
         markers lexed {lexed:?}, returned {rows:?}; statements lexed {split}, run {completed}",
        String::from_utf8_lossy(&case.sql),
    );
    let same = lexed == rows && (case.atomic || split == completed);
    (after, (!same).then_some(differs))
}

fn seeds() -> std::ops::Range<u64> {
    let var = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    match var("DROID_LEX_SEED") {
        Some(seed) => seed..seed + 1,
        None => 0..var("DROID_LEX_SEEDS").unwrap_or(300),
    }
}

/// Generated texts split where PostgreSQL splits them, under both settings of
/// `standard_conforming_strings` and in UTF8 and SJIS.
#[tokio::test]
async fn statement_boundaries_match_postgresql() {
    let pg = support::shared();
    let mut raw = Raw::connect(pg.port, "droid", support::DB).await;
    let (mut scan, mut differ, mut ran) = (Scan::STANDARD, Vec::new(), 0);
    let regressions = REGRESSIONS
        .iter()
        .enumerate()
        .map(|(i, &(standard, sjis, sql))| {
            let case = Case {
                standard,
                sjis,
                sql: sql.to_vec(),
                atomic: false,
            };
            (format!("regression {i}"), case)
        });
    let generated = seeds().map(|seed| (format!("seed {seed}"), gen::generate(seed)));
    for (what, case) in regressions.chain(generated) {
        let (after, differs) = check(&mut raw, scan, &case, &what).await;
        scan = after;
        ran += 1;
        differ.extend(differs);
    }
    assert!(
        differ.is_empty(),
        "{} of {ran} texts split otherwise:\n{}",
        differ.len(),
        differ.join("\n")
    );
}
