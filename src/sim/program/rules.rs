//! What a pooling setup lets a program do and still mean the same through the pooler as
//! directly, and the check that a program keeps to it (the generator's output always does;
//! the shrinker keeps only candidates that do; a case read back from JSON can be checked).

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::vocab::{self, Entry, COPY_IN, QUERIES, STATEMENTS};
use super::{End, Msg, Program};

/// The legality rules of a pooling setup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rules {
    /// Named statements survive between transactions (session mode, or tracking on).
    pub named_statements: bool,
    /// Explicit transaction blocks (not in statement mode).
    pub transactions: bool,
    /// The unnamed statement survives between batches (session mode only: in the pooled
    /// modes the next batch may run on another server, as with every transaction pooler).
    pub unnamed_across_batches: bool,
    /// At most this many clients.
    pub clients: usize,
    /// SQL-level session state: SET, PREPARE/EXECUTE, LISTEN, temp tables, advisory locks,
    /// DISCARD ALL (session mode only).
    pub session_state: bool,
    /// Changing a reported setting (`application_name`, ParameterStatus) with SET, SET LOCAL
    /// or RESET, and SHOW of it.
    pub reported_settings: bool,
    /// Statements after which the server ends the session with FATAL.
    pub fatal: bool,
    /// Values of megabytes (3 MB rows, 200 kB parameters) as the differential test uses; off,
    /// the same statements with values of tens of kilobytes (still past the 8 KiB send buffer).
    pub large_values: bool,
    /// Work the pooler cannot see into (a `DO` block's `set_config`) by client 0, which
    /// never reads what it set, and reads of that setting by the other clients: what a
    /// session of their own shows them is the default, so a server handed on uncleaned
    /// shows as a difference (`pool.session_state`).
    #[serde(default)]
    pub unseen: bool,
}

impl Rules {
    /// Session mode: everything.
    pub const fn session(clients: usize) -> Rules {
        Rules {
            named_statements: true,
            transactions: true,
            unnamed_across_batches: true,
            clients,
            session_state: true,
            reported_settings: true,
            fatal: true,
            large_values: true,
            unseen: false,
        }
    }

    /// Transaction mode; named statements only with tracking.
    pub const fn transaction(tracked: bool, clients: usize) -> Rules {
        Rules {
            named_statements: tracked,
            transactions: true,
            unnamed_across_batches: false,
            clients,
            session_state: false,
            reported_settings: false,
            fatal: true,
            large_values: true,
            unseen: false,
        }
    }

    /// Statement mode: no transaction blocks either.
    pub const fn statement(tracked: bool, clients: usize) -> Rules {
        Rules {
            transactions: false,
            ..Rules::transaction(tracked, clients)
        }
    }

    /// The same rules with unseen work and reads of what it sets ([`Rules::unseen`]).
    pub const fn with_unseen(self) -> Rules {
        Rules {
            unseen: true,
            ..self
        }
    }

    /// The same rules with small values (a fast simulation).
    pub const fn small(self) -> Rules {
        Rules {
            large_values: false,
            ..self
        }
    }

    /// The last write of every client: outside any transaction at the end (a Sync first, as a
    /// batch left after an error skips everything up to one, the rollback too).
    pub fn cleanup(&self) -> Vec<Msg> {
        if self.transactions {
            vec![Msg::Sync, Msg::Query("rollback".into())]
        } else {
            Vec::new()
        }
    }

    /// Whether `p` keeps to these rules.
    pub fn check(&self, p: &Program) -> Result<(), Illegal> {
        if p.clients.is_empty() || p.clients.len() > self.clients {
            return Err(Illegal::Clients(p.clients.len()));
        }
        for (c, client) in p.clients.iter().enumerate() {
            let writes = &client.writes;
            match writes.last() {
                Some(w) if w.end == End::Fence && w.msgs == self.cleanup() => {}
                _ => return Err(Illegal::Cleanup(c)),
            }
            let mut walk = Walk {
                rules: self,
                client: c,
                unnamed_in_batch: false,
            };
            for (i, w) in writes.iter().enumerate() {
                let at = |why: String| Illegal::Message {
                    client: c,
                    write: i,
                    why,
                };
                if w.end == End::Flush
                    && (w.msgs.last() != Some(&Msg::Flush) || i + 1 == writes.len())
                {
                    return Err(at("a Flush write ends with Flush, before another".into()));
                }
                walk.write(&w.msgs).map_err(at)?;
                if w.end == End::Fence {
                    walk.unnamed_in_batch = false;
                }
            }
        }
        Ok(())
    }
}

/// Why a program breaks its rules.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Illegal {
    #[error("{0} clients")]
    Clients(usize),
    #[error("client {0} does not end with the cleanup write")]
    Cleanup(usize),
    #[error("client {client}, write {write}: {why}")]
    Message {
        client: usize,
        write: usize,
        why: String,
    },
}

/// One client's walk through its messages.
struct Walk<'r> {
    rules: &'r Rules,
    client: usize,
    unnamed_in_batch: bool,
}

impl Walk<'_> {
    fn entry(&self, list: &'static [Entry], sql: &str) -> Result<&'static Entry, String> {
        let e = vocab::classify(list, sql, self.client)
            .ok_or_else(|| format!("{sql:?} is not vocabulary for this client"))?;
        if !vocab::allowed_for(self.rules, e.needs, self.client) {
            return Err(format!("{sql:?} is not allowed by the rules"));
        }
        Ok(e)
    }

    fn statement_name(&self, name: &str) -> Result<(), String> {
        if name.is_empty() {
            let ok = self.unnamed_in_batch || self.rules.unnamed_across_batches;
            return ok
                .then_some(())
                .ok_or_else(|| "unnamed statement from another batch".into());
        }
        let ok = self.rules.named_statements;
        ok.then_some(())
            .ok_or_else(|| format!("named statement {name:?}"))
    }

    fn write(&mut self, msgs: &[Msg]) -> Result<(), String> {
        let copy_in = vocab::fill(COPY_IN, self.client, true);
        let mut i = 0;
        while i < msgs.len() {
            i += match &msgs[i] {
                Msg::Query(sql) if *sql == copy_in => copy_data(&msgs[i + 1..], 1)?,
                Msg::Parse(name, sql) if *sql == copy_in => {
                    let head = [
                        Msg::Bind(String::new(), String::new(), vec![]),
                        Msg::Execute(String::new(), 0),
                        Msg::Sync,
                    ];
                    let rest = &msgs[i + 1..];
                    if !name.is_empty() || !rest.starts_with(&head) {
                        return Err("COPY FROM STDIN by Parse only as libpq sends it".into());
                    }
                    let n = 4 + copy_data(&rest[3..], 0)?;
                    if msgs.get(i + n) != Some(&Msg::Sync) {
                        return Err("extended COPY ends with Sync".into());
                    }
                    self.unnamed_in_batch = false;
                    n + 1
                }
                m => {
                    self.message(m, &msgs[i + 1..])?;
                    1
                }
            };
        }
        Ok(())
    }

    fn message(&mut self, m: &Msg, rest: &[Msg]) -> Result<(), String> {
        match m {
            Msg::Query(sql) => {
                let e = self.entry(QUERIES, sql)?;
                if e.ends_write && !(rest.is_empty() || rest == [Msg::Flush]) {
                    return Err(format!("{sql:?} ends its write"));
                }
                self.unnamed_in_batch = false;
            }
            Msg::Parse(name, sql) => {
                let e = self.entry(STATEMENTS, sql)?;
                if !name.is_empty() {
                    self.statement_name(name)?;
                    // With tracking, a Parse of a taken name is answered 42P05 by the pooler
                    // without the server, where PostgreSQL reports a syntax error first.
                    if e.sql == "selec 1" {
                        return Err("a named statement of invalid SQL".into());
                    }
                } else {
                    self.unnamed_in_batch = true;
                }
            }
            Msg::Bind(_, stmt, _) | Msg::Describe('S', stmt) => self.statement_name(stmt)?,
            Msg::Close('S', stmt) if !stmt.is_empty() => self.statement_name(stmt)?,
            Msg::Describe('P', _) | Msg::Close('S' | 'P', _) | Msg::Execute(..) | Msg::Flush => {}
            Msg::Sync => self.unnamed_in_batch = false,
            other => return Err(format!("{other:?} out of place")),
        }
        Ok(())
    }
}

/// CopyData messages then CopyDone or CopyFail at `msgs` (after `before` messages of the
/// piece); how many messages the piece has.
fn copy_data(msgs: &[Msg], before: usize) -> Result<usize, String> {
    let data = msgs
        .iter()
        .take_while(|m| matches!(m, Msg::CopyData(_)))
        .count();
    match msgs.get(data) {
        Some(Msg::CopyDone | Msg::CopyFail(_)) => Ok(before + data + 1),
        _ => Err("COPY data ends with CopyDone or CopyFail".into()),
    }
}
