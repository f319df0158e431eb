//! Client programs: what each client sends, write by write, as data that prints (and parses
//! back) as JSON so a failing case can be replayed. The format is the differential test's
//! (tests/it/differential/program.rs), so its recorded cases parse here too.
//!
//! Programs are generated from a seed under the [`Rules`] of a pooling setup ([`generate`]),
//! checked against those rules ([`Rules::check`]) and shrunk to a minimal failing one
//! ([`shrink`]).

mod gen;
mod rules;
mod shrink;
mod vocab;

use bytes::{BufMut, BytesMut};
use serde::{Deserialize, Serialize};

use crate::protocol::backend::put_cstr;
use crate::protocol::frame::{begin, finish};
use crate::protocol::frontend as f;

pub use gen::{generate, generate_from};
pub use rules::{Illegal, Rules};
pub use shrink::shrink;

/// One frontend message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Msg {
    Query(String),
    /// Statement name, SQL (no parameter types declared).
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
    fn put(&self, b: &mut BytesMut) {
        match self {
            Param::Text(t) => {
                b.put_i32(t.len() as i32);
                b.put_slice(t.as_bytes());
            }
            Param::Repeat { repeat, times } => {
                let mut utf8 = [0; 4];
                let unit = repeat.encode_utf8(&mut utf8).as_bytes();
                b.put_i32((unit.len() * times) as i32);
                for _ in 0..*times {
                    b.put_slice(unit);
                }
            }
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

/// One client's program: writes in order. Client `c` works on its own table, `diff_t<c>`.
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

impl std::str::FromStr for Program {
    type Err = serde_json::Error;

    fn from_str(s: &str) -> Result<Program, serde_json::Error> {
        serde_json::from_str(s)
    }
}

/// Client `c`'s table.
pub fn table(c: usize) -> String {
    format!("diff_t{c}")
}

/// The tables a program of up to `clients` clients uses (the setup creates them).
pub fn tables(clients: usize) -> impl Iterator<Item = String> {
    (0..clients).map(table)
}

impl Msg {
    /// Appends the message's wire form.
    pub fn encode(&self, b: &mut BytesMut) {
        match self {
            Msg::Query(sql) => f::query(b, sql),
            Msg::Parse(name, sql) => {
                let at = begin(b, f::PARSE_TAG);
                put_cstr(b, name.as_bytes());
                put_cstr(b, sql.as_bytes());
                b.put_i16(0);
                finish(b, at);
            }
            Msg::Bind(portal, stmt, params) => {
                let at = begin(b, f::BIND_TAG);
                put_cstr(b, portal.as_bytes());
                put_cstr(b, stmt.as_bytes());
                b.put_i16(0);
                b.put_i16(params.len() as i16);
                params.iter().for_each(|p| p.put(b));
                b.put_i16(0);
                finish(b, at);
            }
            Msg::Describe(kind, name) | Msg::Close(kind, name) => {
                let tag = match self {
                    Msg::Describe(..) => f::DESCRIBE_TAG,
                    _ => f::CLOSE_TAG,
                };
                let at = begin(b, tag);
                b.put_u8(*kind as u8);
                put_cstr(b, name.as_bytes());
                finish(b, at);
            }
            Msg::Execute(portal, rows) => {
                let at = begin(b, f::EXECUTE_TAG);
                put_cstr(b, portal.as_bytes());
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
                put_cstr(b, why.as_bytes());
                finish(b, at);
            }
        }
    }
}

impl Write {
    /// The write's bytes: its messages, then for a fence Sync and an empty Query.
    pub fn encode(&self, b: &mut BytesMut) {
        self.msgs.iter().for_each(|m| m.encode(b));
        if self.end == End::Fence {
            Msg::Sync.encode(b);
            Msg::Query(String::new()).encode(b);
        }
    }
}

#[cfg(test)]
mod tests;
