//! Short names for writing programs in the tables, and the checks several scenarios share.

use super::Report;
use crate::sim::program::{ClientProgram, End, Msg, Param, Program, Write};

pub fn q(sql: &str) -> Msg {
    Msg::Query(sql.into())
}

pub fn parse(name: &str, sql: &str) -> Msg {
    Msg::Parse(name.into(), sql.into())
}

/// Bind of `stmt` to the unnamed portal, with text parameters.
pub fn bind(stmt: &str, params: &[&str]) -> Msg {
    bind_portal("", stmt, params)
}

pub fn bind_portal(portal: &str, stmt: &str, params: &[&str]) -> Msg {
    let params = params.iter().map(|p| Param::Text(p.to_string())).collect();
    Msg::Bind(portal.into(), stmt.into(), params)
}

/// Execute of the unnamed portal, all rows.
pub fn exec() -> Msg {
    Msg::Execute(String::new(), 0)
}

pub fn describe_s(name: &str) -> Msg {
    Msg::Describe('S', name.into())
}

pub fn describe_p(portal: &str) -> Msg {
    Msg::Describe('P', portal.into())
}

pub fn close_s(name: &str) -> Msg {
    Msg::Close('S', name.into())
}

pub fn sync() -> Msg {
    Msg::Sync
}

/// Bind and Execute of `stmt`.
pub fn run(stmt: &str, params: &[&str]) -> Vec<Msg> {
    vec![bind(stmt, params), exec()]
}

/// A write the client sends and reads to its fence (Sync and an empty Query after it).
pub fn fence(msgs: Vec<Msg>) -> Write {
    Write {
        msgs,
        end: End::Fence,
    }
}

/// A write ending with Flush: the client reads what that brings and writes on.
pub fn flush(mut msgs: Vec<Msg>) -> Write {
    msgs.push(Msg::Flush);
    Write {
        msgs,
        end: End::Flush,
    }
}

/// A simple Query, read to its fence.
pub fn simple(sql: &str) -> Write {
    fence(vec![q(sql)])
}

pub fn client(writes: Vec<Write>) -> ClientProgram {
    ClientProgram { writes }
}

pub fn program(clients: Vec<ClientProgram>) -> Program {
    Program { clients }
}

/// A program of one client.
pub fn one(writes: Vec<Write>) -> Program {
    program(vec![client(writes)])
}

/// The name the pooler gives client `c`'s statement `name` on a server (its relay is client
/// `c + 1`).
pub fn renamed(c: usize, name: &str) -> String {
    format!("p{}_{name}", c + 1)
}

/// No server connection was sent a Parse of `name` twice: once there, never replayed there.
pub fn parsed_once_per_server(r: &Report, name: &str) -> Result<(), String> {
    let parses = r.parses_of(name);
    for (i, (s, _)) in parses.iter().enumerate() {
        if parses[..i].iter().any(|(t, _)| t == s) {
            return Err(format!("{name} parsed twice on server connection {s}"));
        }
    }
    Ok(())
}

/// The number of server connections that were sent a Parse of `name`.
pub fn servers_parsing(r: &Report, name: &str) -> usize {
    let mut conns: Vec<usize> = r.parses_of(name).into_iter().map(|(s, _)| s).collect();
    conns.sort();
    conns.dedup();
    conns.len()
}

/// No server was sent a message `bad` says it must not see (the pooler answers those).
pub fn never_sent(r: &Report, bad: impl Fn(&Msg) -> bool) -> Result<(), String> {
    match r.sent().into_iter().find(|(_, m)| bad(m)) {
        Some((s, m)) => Err(format!("server connection {s} was sent {m:?}")),
        None => Ok(()),
    }
}

/// Bind of `stmt` with one parameter of `times` characters `c` (a large value).
pub fn bind_large(stmt: &str, c: char, times: usize) -> Msg {
    Msg::Bind(
        String::new(),
        stmt.into(),
        vec![Param::Repeat { repeat: c, times }],
    )
}

/// COPY data rows of one integer each, `from..to`.
pub fn copy_rows(from: usize, to: usize) -> Msg {
    Msg::CopyData((from..to).map(|i| format!("{i}\n")).collect())
}
