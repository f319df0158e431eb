//! Programs from a seed: pieces drawn with `StdRng` (the differential test's pieces and
//! weights, plus the vocabulary's notices, settings and session state), turned into messages
//! by a builder that drops what the rules forbid. Thousands of programs a second.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::vocab::{self, Entry, COPY_IN, QUERIES, STATEMENTS};
use super::{ClientProgram, End, Msg, Param, Program, Rules, Write};

/// Statement names: the unnamed one and two named.
const NAMES: [&str; 3] = ["", "a", "b"];

/// The pieces a write is made of: each a short run of messages with a meaning of its own.
#[derive(Debug, Clone, Copy)]
enum Piece {
    Query(&'static Entry),
    Begin,
    Commit,
    Rollback,
    /// Parse into a name (index into NAMES) of a statement.
    Parse(usize, &'static Entry),
    /// Bind of a name into the unnamed portal or "p" (parameter pick), then Execute with or
    /// without a row limit.
    BindExecute(usize, bool, u8, bool),
    DescribeStatement(usize),
    DescribePortal(bool),
    CloseStatement(usize),
    ClosePortal,
    Sync,
    /// A simple COPY FROM STDIN: rows, bad data now and then, CopyDone or CopyFail.
    CopyIn(u8, bool, bool),
    /// The same through the extended protocol as libpq sends it.
    CopyInExtended(u8, bool, bool),
}

/// A program of 1 to `rules.clients` clients, all of it a function of `seed`.
pub fn generate(seed: u64, rules: &Rules) -> Program {
    generate_from(&mut StdRng::seed_from_u64(seed), rules)
}

/// A program drawn from any source of choices (the fuzz target's input bytes, so that
/// coverage guides what is drawn).
pub fn generate_from<R: Rng>(rng: &mut R, rules: &Rules) -> Program {
    let n = rng.gen_range(1..=rules.clients.max(1));
    let clients = (0..n).map(|c| client_program(rng, rules, c)).collect();
    Program { clients }
}

/// An entry of `list` the rules allow, by weight.
fn pick<R: Rng>(rng: &mut R, rules: &Rules, list: &'static [Entry]) -> &'static Entry {
    let usable = |e: &&Entry| e.weight > 0 && vocab::allowed(rules, e.needs);
    let total: u32 = list.iter().filter(usable).map(|e| e.weight).sum();
    let mut at = rng.gen_range(0..total.max(1));
    for e in list.iter().filter(usable) {
        if at < e.weight {
            return e;
        }
        at -= e.weight;
    }
    &list[0]
}

fn piece<R: Rng>(rng: &mut R, rules: &Rules) -> Piece {
    // The differential test's weights: 23 in all.
    match rng.gen_range(0..23) {
        0..=3 => Piece::Query(pick(rng, rules, QUERIES)),
        4 => Piece::Begin,
        5 => Piece::Commit,
        6 => Piece::Rollback,
        7..=10 => Piece::Parse(rng.gen_range(0..NAMES.len()), pick(rng, rules, STATEMENTS)),
        11..=14 => Piece::BindExecute(
            rng.gen_range(0..NAMES.len()),
            rng.gen(),
            rng.gen(),
            rng.gen(),
        ),
        15 => Piece::DescribeStatement(rng.gen_range(0..NAMES.len())),
        16 => Piece::DescribePortal(rng.gen()),
        17 => Piece::CloseStatement(rng.gen_range(0..NAMES.len())),
        18 => Piece::ClosePortal,
        19 | 20 => Piece::Sync,
        21 => Piece::CopyIn(rng.gen_range(1..4), rng.gen(), rng.gen()),
        _ => Piece::CopyInExtended(rng.gen_range(1..4), rng.gen(), rng.gen()),
    }
}

/// Bind parameters for a statement: one for `$1`, none otherwise, now and then the wrong
/// count (an error) or a large value.
fn params_for(sql: &str, pick: u8, large: bool) -> Vec<Param> {
    let wants = sql.contains("$1");
    match (wants, pick % 8) {
        (_, 0) if wants => vec![],
        (false, 1) => vec![Param::Text("1".into())],
        (true, 2) => vec![Param::Repeat {
            repeat: 'z',
            times: if large { 200_000 } else { 20_000 },
        }],
        (true, 3) if sql.contains("::int") => vec![Param::Text("nope".into())],
        (true, _) if sql.contains("::int") => vec![Param::Text(format!("{pick}"))],
        (true, _) => vec![Param::Text(format!("v{pick}"))],
        (false, _) => vec![],
    }
}

/// Turns pieces into one client's messages, dropping what the rules forbid.
struct Builder<'r> {
    rules: &'r Rules,
    client: usize,
    /// The statement each name last got a Parse of (for its parameters).
    parsed: [Option<&'static Entry>; 3],
    /// Whether the unnamed statement was parsed since the last Sync.
    unnamed_in_batch: bool,
    /// The unnamed statement is a COPY FROM STDIN: bound again without its data, it would
    /// wait for data the fence's messages are not, and the session is lost (legal, but a
    /// waste of a program).
    unnamed_is_copy: bool,
}

impl Builder<'_> {
    fn sql(&self, e: &Entry) -> String {
        vocab::fill(e.sql, self.client, self.rules.large_values)
    }

    fn copy_rows(rows: u8, bad: bool, done: bool, out: &mut Vec<Msg>) {
        for r in 0..rows {
            out.push(Msg::CopyData(if bad && r == rows - 1 {
                "oops\n".to_owned()
            } else {
                format!("{}\n", 100 + u32::from(r))
            }));
        }
        out.push(if done {
            Msg::CopyDone
        } else {
            Msg::CopyFail("stop".into())
        });
    }

    /// Whether a statement name may be used here.
    fn usable(&self, n: usize) -> bool {
        if n > 0 {
            return self.rules.named_statements;
        }
        (self.unnamed_in_batch || self.rules.unnamed_across_batches) && !self.unnamed_is_copy
    }

    /// Adds a piece's messages; `true` if the write must end after it.
    fn add(&mut self, p: Piece, out: &mut Vec<Msg>) -> bool {
        // Unseen work is client 0's, the reads of what it sets the others'.
        if let Piece::Query(e) | Piece::Parse(_, e) = p {
            if !vocab::allowed_for(self.rules, e.needs, self.client) {
                return false;
            }
        }
        match p {
            Piece::Query(e) => {
                out.push(Msg::Query(self.sql(e)));
                self.unnamed_in_batch = false;
                self.unnamed_is_copy = false;
                return e.ends_write;
            }
            Piece::Begin | Piece::Commit | Piece::Rollback if self.rules.transactions => {
                let q = match p {
                    Piece::Begin => "begin",
                    Piece::Commit => "commit",
                    _ => "rollback",
                };
                out.push(Msg::Query(q.into()));
                self.unnamed_in_batch = false;
                self.unnamed_is_copy = false;
            }
            Piece::Begin | Piece::Commit | Piece::Rollback => {}
            Piece::Parse(n, e) => self.parse(n, e, out),
            Piece::BindExecute(n, named_portal, pick, limit) if self.usable(n) => {
                let sql = self.parsed[n].map_or("", |e| e.sql);
                let portal = if named_portal { "p" } else { "" };
                let params = params_for(sql, pick, self.rules.large_values);
                out.push(Msg::Bind(portal.into(), NAMES[n].into(), params));
                out.push(Msg::Execute(portal.into(), i32::from(limit)));
            }
            Piece::DescribeStatement(n) if self.usable(n) => {
                out.push(Msg::Describe('S', NAMES[n].into()));
            }
            Piece::DescribePortal(named) => {
                out.push(Msg::Describe('P', if named { "p" } else { "" }.into()));
            }
            Piece::CloseStatement(n) if n == 0 || self.rules.named_statements => {
                out.push(Msg::Close('S', NAMES[n].into()));
            }
            Piece::ClosePortal => out.push(Msg::Close('P', "p".into())),
            Piece::Sync => {
                out.push(Msg::Sync);
                self.unnamed_in_batch = false;
            }
            Piece::CopyIn(rows, bad, done) => {
                out.push(Msg::Query(vocab::fill(COPY_IN, self.client, true)));
                Builder::copy_rows(rows, bad, done, out);
                self.unnamed_in_batch = false;
                self.unnamed_is_copy = false;
            }
            Piece::CopyInExtended(rows, bad, done) => {
                let copy = vocab::fill(COPY_IN, self.client, true);
                out.push(Msg::Parse(String::new(), copy));
                out.push(Msg::Bind(String::new(), String::new(), vec![]));
                out.push(Msg::Execute(String::new(), 0));
                out.push(Msg::Sync);
                Builder::copy_rows(rows, bad, done, out);
                out.push(Msg::Sync);
                self.parsed[0] = None;
                self.unnamed_in_batch = false;
                self.unnamed_is_copy = true;
            }
            Piece::BindExecute(..) | Piece::DescribeStatement(_) | Piece::CloseStatement(_) => {}
        }
        false
    }

    fn parse(&mut self, n: usize, e: &'static Entry, out: &mut Vec<Msg>) {
        if n > 0 && (!self.rules.named_statements || e.sql == "selec 1") {
            // With tracking, a Parse of a taken name is answered 42P05 by the pooler without
            // the server (the documented contract), where PostgreSQL would report a syntax
            // error first: named statements get valid SQL.
            return;
        }
        out.push(Msg::Parse(NAMES[n].into(), self.sql(e)));
        self.parsed[n] = Some(e);
        if n == 0 {
            self.unnamed_in_batch = true;
            self.unnamed_is_copy = false;
        }
    }
}

/// One client's program: a few writes of a few pieces each; some writes end with Flush and
/// are continued by the next write, in the same batch; the cleanup write last.
fn client_program<R: Rng>(rng: &mut R, rules: &Rules, client: usize) -> ClientProgram {
    let mut b = Builder {
        rules,
        client,
        parsed: [None; 3],
        unnamed_in_batch: false,
        unnamed_is_copy: false,
    };
    let count = rng.gen_range(1..6);
    let mut writes = Vec::new();
    for i in 0..count {
        let pieces: Vec<Piece> = (0..rng.gen_range(1..6))
            .map(|_| piece(rng, rules))
            .collect();
        let flush = i + 1 < count && rng.gen_range(0..3) == 0;
        let mut msgs = Vec::new();
        for p in pieces {
            if b.add(p, &mut msgs) {
                break;
            }
        }
        let end = if flush { End::Flush } else { End::Fence };
        if flush {
            msgs.push(Msg::Flush);
        } else {
            b.unnamed_in_batch = false;
        }
        if !msgs.is_empty() {
            writes.push(Write { msgs, end });
        }
    }
    writes.push(Write {
        msgs: rules.cleanup(),
        end: End::Fence,
    });
    ClientProgram { writes }
}
