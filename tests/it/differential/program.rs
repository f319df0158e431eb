//! Client programs for the differential test: what each client sends, write by write, as
//! data that prints (and parses back) as JSON, and the proptest strategies that generate
//! random but legal ones for a pooling setup.

use bytes::{BufMut, BytesMut};
use droid_pool::protocol::frame::{begin, finish};
use droid_pool::protocol::frontend as f;
use proptest::prelude::*;
use serde::{Deserialize, Serialize};

/// One frontend message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Msg {
    Query(String),
    Parse(String, String),
    /// Portal, statement, text parameters.
    Bind(String, String, Vec<Param>),
    /// `S` or `P`, and the name.
    Describe(char, String),
    /// Portal, row limit (0: all).
    Execute(String, i32),
    Close(char, String),
    Sync,
    Flush,
    CopyData(String),
    CopyDone,
    CopyFail(String),
}

/// A Bind parameter: text, or a character repeated (large values, printed short).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Param {
    Text(String),
    Repeat { repeat: char, times: usize },
}

impl Param {
    fn text(&self) -> String {
        match self {
            Param::Text(t) => t.clone(),
            Param::Repeat { repeat, times } => repeat.to_string().repeat(*times),
        }
    }
}

/// What the client does after a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum End {
    /// Sends Sync and an empty Query (answered even in a failed transaction block, and never
    /// sent by a program itself) and reads up to that query's ReadyForQuery.
    Fence,
    /// The write ends with Flush: the client reads what comes (as much as PostgreSQL sent
    /// directly) and then writes on, in the same batch.
    Flush,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Write {
    pub msgs: Vec<Msg>,
    pub end: End,
}

/// One client's program: writes in order. Each client works on its own table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientProgram {
    pub writes: Vec<Write>,
}

/// A program: several clients running at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Program {
    pub clients: Vec<ClientProgram>,
}

impl std::fmt::Display for Program {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = serde_json::to_string(self).map_err(|_| std::fmt::Error)?;
        out.write_str(&text)
    }
}

fn cstr(b: &mut BytesMut, s: &str) {
    b.put_slice(s.as_bytes());
    b.put_u8(0);
}

impl Msg {
    pub fn encode(&self, b: &mut BytesMut) {
        match self {
            Msg::Query(sql) => f::query(b, sql),
            Msg::Parse(name, sql) => {
                let at = begin(b, f::PARSE_TAG);
                cstr(b, name);
                cstr(b, sql);
                b.put_i16(0);
                finish(b, at);
            }
            Msg::Bind(portal, stmt, params) => {
                let at = begin(b, f::BIND_TAG);
                cstr(b, portal);
                cstr(b, stmt);
                b.put_i16(0);
                b.put_i16(params.len() as i16);
                for p in params {
                    let p = p.text();
                    b.put_i32(p.len() as i32);
                    b.put_slice(p.as_bytes());
                }
                b.put_i16(0);
                finish(b, at);
            }
            Msg::Describe(kind, name) | Msg::Close(kind, name) => {
                let tag = if matches!(self, Msg::Describe(..)) {
                    f::DESCRIBE_TAG
                } else {
                    f::CLOSE_TAG
                };
                let at = begin(b, tag);
                b.put_u8(*kind as u8);
                cstr(b, name);
                finish(b, at);
            }
            Msg::Execute(portal, rows) => {
                let at = begin(b, f::EXECUTE_TAG);
                cstr(b, portal);
                b.put_i32(*rows);
                finish(b, at);
            }
            Msg::Sync => f::sync(b),
            Msg::Flush => f::flush(b),
            Msg::CopyData(data) => {
                let at = begin(b, f::COPY_DATA_TAG);
                b.put_slice(data.as_bytes());
                finish(b, at);
            }
            Msg::CopyDone => {
                let at = begin(b, f::COPY_DONE_TAG);
                finish(b, at);
            }
            Msg::CopyFail(why) => {
                let at = begin(b, f::COPY_FAIL_TAG);
                cstr(b, why);
                finish(b, at);
            }
        }
    }
}

/// What a pooling setup lets a program do and still mean the same as directly.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    /// Named statements survive between transactions (session mode, or tracking on).
    pub named_statements: bool,
    /// Explicit transaction blocks (not in statement mode).
    pub transactions: bool,
    /// The unnamed statement survives between batches (session mode only: in the pooled
    /// modes the next batch may run on another server, as with every transaction pooler).
    pub unnamed_across_batches: bool,
    pub clients: usize,
}

const STATEMENTS: &[&str] = &[
    "select $1::text",
    "select 1/0",
    "selec 1",
    "select n from {t} order by n",
    "insert into {t} values ($1::int)",
    "select repeat('y', 70000)",
    "copy {t} from stdin",
    "copy (select n from {t} order by n) to stdout",
];

const QUERIES: &[&str] = &[
    "select 1",
    "select 1/0",
    "selec 1",
    "insert into {t} values (7)",
    "select count(*), coalesce(sum(n), 0) from {t}",
    "select 1; selec 2; select 3",
    "select 2; select 'two'",
    "select repeat('x', 3000000)",
    "deallocate all",
];

/// Client `c`'s table (see [`super::reset_tables`]).
pub fn table(c: usize) -> String {
    format!("diff_t{c}")
}

fn fill(sql: &str, c: usize) -> String {
    sql.replace("{t}", &table(c))
}

/// Bind parameters for a statement: one for `$1`, none otherwise, now and then the wrong
/// count (an error) or a large value.
fn params_for(sql: &str, pick: u8) -> Vec<Param> {
    let wants = sql.contains("$1");
    match (wants, pick % 8) {
        (_, 0) if wants => vec![],
        (false, 1) => vec![Param::Text("1".into())],
        (true, 2) => vec![Param::Repeat {
            repeat: 'z',
            times: 200_000,
        }],
        (true, 3) if sql.contains("::int") => vec![Param::Text("nope".into())],
        (true, _) if sql.contains("::int") => vec![Param::Text(format!("{pick}"))],
        (true, _) => vec![Param::Text(format!("v{pick}"))],
        (false, _) => vec![],
    }
}

/// The pieces a write is made of: each a short run of messages with a meaning of its own.
#[derive(Debug, Clone)]
enum Piece {
    Query(usize),
    Begin,
    Commit,
    Rollback,
    /// Parse into `name` (index into names) of a statement.
    Parse(usize, usize),
    /// Bind of `name` into the unnamed portal or "p", with parameter pick, then Execute with
    /// a row limit.
    BindExecute(usize, bool, u8, bool),
    DescribeStatement(usize),
    DescribePortal(bool),
    CloseStatement(usize),
    ClosePortal,
    Sync,
    /// A simple COPY FROM STDIN: rows, then CopyDone (`true`) or CopyFail; bad data now and
    /// then.
    CopyIn(u8, bool, bool),
    /// The same through the extended protocol as libpq sends it.
    CopyInExtended(u8, bool, bool),
}

const NAMES: [&str; 3] = ["", "a", "b"];

fn piece() -> impl Strategy<Value = Piece> {
    prop_oneof![
        4 => (0..QUERIES.len()).prop_map(Piece::Query),
        1 => Just(Piece::Begin),
        1 => Just(Piece::Commit),
        1 => Just(Piece::Rollback),
        4 => (0..NAMES.len(), 0..STATEMENTS.len()).prop_map(|(n, s)| Piece::Parse(n, s)),
        4 => (0..NAMES.len(), any::<bool>(), any::<u8>(), any::<bool>())
            .prop_map(|(n, p, k, lim)| Piece::BindExecute(n, p, k, lim)),
        1 => (0..NAMES.len()).prop_map(Piece::DescribeStatement),
        1 => any::<bool>().prop_map(Piece::DescribePortal),
        1 => (0..NAMES.len()).prop_map(Piece::CloseStatement),
        1 => Just(Piece::ClosePortal),
        2 => Just(Piece::Sync),
        1 => (1u8..4, any::<bool>(), any::<bool>()).prop_map(|(r, d, b)| Piece::CopyIn(r, d, b)),
        1 => (1u8..4, any::<bool>(), any::<bool>())
            .prop_map(|(r, d, b)| Piece::CopyInExtended(r, d, b)),
    ]
}

/// Turns pieces into the messages of one client, dropping what the rules forbid. `parsed`
/// tracks which statement each name holds in the current batch (for parameters, and so that
/// the unnamed statement is only bound where it was parsed, when the rules say so).
struct Builder<'r> {
    rules: &'r Rules,
    client: usize,
    /// Statement index per name, as last parsed by this client.
    parsed: [Option<usize>; 3],
    /// Whether the unnamed statement was parsed since the last Sync.
    unnamed_in_batch: bool,
}

impl Builder<'_> {
    fn sql(&self, i: usize) -> String {
        fill(STATEMENTS[i], self.client)
    }

    fn copy_rows(&self, rows: u8, bad: bool) -> Vec<Msg> {
        let mut out = Vec::new();
        for r in 0..rows {
            let line = if bad && r == rows - 1 {
                "oops\n".to_owned()
            } else {
                format!("{}\n", 100 + r)
            };
            out.push(Msg::CopyData(line));
        }
        out
    }

    fn add(&mut self, p: &Piece, out: &mut Vec<Msg>) {
        let t = table(self.client);
        match p {
            Piece::Query(i) => {
                let q = fill(QUERIES[*i], self.client);
                if q == "deallocate all" && !self.rules.named_statements {
                    return;
                }
                out.push(Msg::Query(q));
                self.unnamed_in_batch = false;
            }
            Piece::Begin | Piece::Commit | Piece::Rollback if self.rules.transactions => {
                let q = match p {
                    Piece::Begin => "begin",
                    Piece::Commit => "commit",
                    _ => "rollback",
                };
                out.push(Msg::Query(q.into()));
                self.unnamed_in_batch = false;
            }
            Piece::Begin | Piece::Commit | Piece::Rollback => {}
            Piece::Parse(n, s) => {
                if *n > 0 && !self.rules.named_statements {
                    return;
                }
                if *n > 0 && STATEMENTS[*s] == "selec 1" {
                    // With tracking, a Parse of a taken name is answered 42P05 by the pooler
                    // without the server (the documented contract), where PostgreSQL would
                    // report a syntax error first: named statements get valid SQL.
                    return;
                }
                if STATEMENTS[*s].starts_with("copy") && STATEMENTS[*s].contains("stdin") {
                    // COPY FROM STDIN only as a whole piece (its data must follow).
                    return;
                }
                out.push(Msg::Parse(NAMES[*n].into(), self.sql(*s)));
                self.parsed[*n] = Some(*s);
                if *n == 0 {
                    self.unnamed_in_batch = true;
                }
            }
            Piece::BindExecute(n, named_portal, pick, limit) => {
                if *n > 0 && !self.rules.named_statements {
                    return;
                }
                if *n == 0 && !self.unnamed_in_batch && !self.rules.unnamed_across_batches {
                    return;
                }
                let sql = self.parsed[*n].map(|s| STATEMENTS[s]).unwrap_or("");
                let portal = if *named_portal { "p" } else { "" };
                out.push(Msg::Bind(
                    portal.into(),
                    NAMES[*n].into(),
                    params_for(sql, *pick),
                ));
                out.push(Msg::Execute(portal.into(), if *limit { 1 } else { 0 }));
            }
            Piece::DescribeStatement(n) => {
                if *n > 0 && !self.rules.named_statements {
                    return;
                }
                if *n == 0 && !self.unnamed_in_batch && !self.rules.unnamed_across_batches {
                    return;
                }
                out.push(Msg::Describe('S', NAMES[*n].into()));
            }
            Piece::DescribePortal(named) => {
                out.push(Msg::Describe('P', if *named { "p" } else { "" }.into()))
            }
            Piece::CloseStatement(n) => {
                if *n > 0 && !self.rules.named_statements {
                    return;
                }
                out.push(Msg::Close('S', NAMES[*n].into()));
            }
            Piece::ClosePortal => out.push(Msg::Close('P', "p".into())),
            Piece::Sync => {
                out.push(Msg::Sync);
                self.unnamed_in_batch = false;
            }
            Piece::CopyIn(rows, bad, done) => {
                out.push(Msg::Query(format!("copy {t} from stdin")));
                out.extend(self.copy_rows(*rows, *bad));
                out.push(if *done {
                    Msg::CopyDone
                } else {
                    Msg::CopyFail("stop".into())
                });
                self.unnamed_in_batch = false;
            }
            Piece::CopyInExtended(rows, bad, done) => {
                out.push(Msg::Parse(String::new(), format!("copy {t} from stdin")));
                out.push(Msg::Bind(String::new(), String::new(), vec![]));
                out.push(Msg::Execute(String::new(), 0));
                out.push(Msg::Sync);
                out.extend(self.copy_rows(*rows, *bad));
                out.push(if *done {
                    Msg::CopyDone
                } else {
                    Msg::CopyFail("stop".into())
                });
                out.push(Msg::Sync);
                self.parsed[0] = None;
                self.unnamed_in_batch = false;
            }
        }
    }
}

/// One client's program: a few writes of a few pieces each; some writes end with Flush and
/// are continued by the next write, in the same batch.
fn client_program(rules: Rules, client: usize) -> impl Strategy<Value = ClientProgram> {
    let write = (prop::collection::vec(piece(), 1..6), any::<u8>());
    prop::collection::vec(write, 1..6).prop_map(move |writes| {
        let mut b = Builder {
            rules: &rules,
            client,
            parsed: [None; 3],
            unnamed_in_batch: false,
        };
        let mut out = Vec::new();
        let count = writes.len();
        for (i, (pieces, end)) in writes.into_iter().enumerate() {
            let mut msgs = Vec::new();
            for p in &pieces {
                b.add(p, &mut msgs);
                if matches!(msgs.last(), Some(Msg::Query(q)) if q == "deallocate all") {
                    // Its effect on the pooler's bookkeeping comes with its answer: what a
                    // client pipelines after it is judged as before it (README, "Prepared
                    // statements"). So it ends the write here.
                    break;
                }
            }
            // A Flush end needs a write after it; the last write is always fenced.
            let end = if i + 1 < count && end % 3 == 0 {
                End::Flush
            } else {
                End::Fence
            };
            if end == End::Flush {
                msgs.push(Msg::Flush);
            } else {
                b.unnamed_in_batch = false;
            }
            if !msgs.is_empty() {
                out.push(Write { msgs, end });
            }
        }
        // Ends outside any transaction, so every client is idle at the end: a Sync first, as
        // a batch left after an error skips everything up to one (the rollback too).
        out.push(Write {
            msgs: if rules.transactions {
                vec![Msg::Sync, Msg::Query("rollback".into())]
            } else {
                vec![]
            },
            end: End::Fence,
        });
        ClientProgram { writes: out }
    })
}

/// Programs of 1 to `rules.clients` clients.
pub fn program(rules: Rules) -> impl Strategy<Value = Program> {
    (1..=rules.clients).prop_flat_map(move |n| {
        let clients: Vec<_> = (0..n).map(|c| client_program(rules, c)).collect();
        clients.prop_map(|clients| Program { clients })
    })
}
