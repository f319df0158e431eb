//! Transactions as PostgreSQL's `xact.c` runs them for a client: the block state behind
//! ReadyForQuery's I/T/E, what a transaction holds until it ends (rows written, temp tables
//! created, LISTEN and NOTIFY), and the session settings it can undo.

use super::db::Notification;
use super::error::UNDEFINED_OBJECT;
use super::error::{Notice, PgError, ACTIVE_SQL_TRANSACTION, NO_ACTIVE_SQL_TRANSACTION};
use super::ModelServer;
use crate::protocol::backend::{TX_FAILED, TX_IDLE, TX_IN_BLOCK};

/// The transaction block state (`TBLOCK_*` in `xact.c`, between commands).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Block {
    /// No transaction (`TBLOCK_DEFAULT`).
    Idle,
    /// A transaction begun by a command and ended by the end of its query or by Sync
    /// (`TBLOCK_STARTED`).
    Started,
    /// The implicit block of a simple Query with several statements
    /// (`TBLOCK_IMPLICIT_INPROGRESS`).
    Implicit,
    /// After BEGIN (`TBLOCK_INPROGRESS`).
    Explicit,
    /// A block an error aborted, waiting for COMMIT or ROLLBACK (`TBLOCK_ABORT`).
    Failed,
}

/// The table a statement names: the session's temp table of that name if it has one (the
/// temp schema comes first in the search path), else the database's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableRef {
    Shared(String),
    Temp(String),
}

/// A LISTEN or UNLISTEN waiting for commit (`None`: `UNLISTEN *`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenOp {
    Listen(String),
    Unlisten(Option<String>),
}

/// What the current transaction holds until it commits or aborts.
#[derive(Debug, Default)]
pub struct Tx {
    pub writes: Vec<(TableRef, Option<i32>)>,
    pub created: Vec<String>,
    pub notifies: Vec<(String, String)>,
    pub listens: Vec<ListenOp>,
    /// An Execute completed or suspended in this transaction without committing it
    /// (`XACT_FLAGS_PIPELINING`): DISCARD ALL refuses to run then.
    pub pipelined: bool,
    /// The settings when the transaction began, restored if it aborts; taken when the
    /// transaction first changes one (most change none).
    pub saved: Option<Settings>,
}

/// A setting the model knows: its name, whether PostgreSQL reports it with ParameterStatus
/// (`GUC_REPORT`), and its values.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Var {
    name: &'static str,
    reported: bool,
    default: String,
    /// The value that survives the end of the transaction (SET, not SET LOCAL).
    session: String,
    current: String,
}

/// The session's settings. SET values are kept as written (`'1min'`, not normalised).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    vars: Vec<Var>,
}

/// The settings the model knows: name, reported (`GUC_REPORT`), default. The reported ones
/// are PostgreSQL 15's settable `GUC_REPORT` settings, so a pooler that brings a server in
/// line with a client's startup parameters finds them; values are not checked.
const KNOWN: &[(&str, bool, &str)] = &[
    ("application_name", true, ""),
    ("client_encoding", true, "UTF8"),
    ("DateStyle", true, "ISO, MDY"),
    ("default_transaction_read_only", true, "off"),
    ("IntervalStyle", true, "postgres"),
    ("standard_conforming_strings", true, "on"),
    ("TimeZone", true, "UTC"),
    ("extra_float_digits", false, "1"),
    ("idle_in_transaction_session_timeout", false, "0"),
    ("lock_timeout", false, "0"),
    ("search_path", false, "\"$user\", public"),
    ("statement_timeout", false, "0"),
    ("work_mem", false, "4MB"),
];

impl Settings {
    /// Defaults, with the startup packet's values for those it sets.
    pub fn new(startup: &[(String, String)]) -> Settings {
        let vars = KNOWN
            .iter()
            .map(|&(name, reported, default)| {
                let value = startup
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(name))
                    .map_or(default, |(_, v)| v.as_str());
                Var {
                    name,
                    reported,
                    default: value.to_owned(),
                    session: value.to_owned(),
                    current: value.to_owned(),
                }
            })
            .collect();
        Settings { vars }
    }

    fn var(&mut self, name: &str) -> Result<&mut Var, PgError> {
        self.vars
            .iter_mut()
            .find(|v| v.name.eq_ignore_ascii_case(name))
            .ok_or_else(|| unknown(name))
    }

    /// SHOW: the current value and the setting's own name.
    pub fn show(&self, name: &str) -> Result<(&'static str, &str), PgError> {
        self.vars
            .iter()
            .find(|v| v.name.eq_ignore_ascii_case(name))
            .map(|v| (v.name, v.current.as_str()))
            .ok_or_else(|| unknown(name))
    }

    /// The value RESET goes back to (`pg_settings.reset_val`).
    pub fn reset_value(&self, name: &str) -> Option<&str> {
        self.vars
            .iter()
            .find(|v| v.name.eq_ignore_ascii_case(name))
            .map(|v| v.default.as_str())
    }

    /// SET (`local`: SET LOCAL, undone at the end of the transaction); `None` is DEFAULT.
    pub fn set(&mut self, name: &str, value: Option<&str>, local: bool) -> Result<(), PgError> {
        let v = self.var(name)?;
        let value = value.map_or_else(|| v.default.clone(), str::to_owned);
        if !local {
            v.session.clone_from(&value);
        }
        v.current = value;
        Ok(())
    }

    /// RESET ALL.
    pub fn reset_all(&mut self) {
        for v in &mut self.vars {
            v.session.clone_from(&v.default);
            v.current.clone_from(&v.default);
        }
    }

    /// At commit: SET LOCAL values end.
    fn commit(&mut self) {
        for v in &mut self.vars {
            v.current.clone_from(&v.session);
        }
    }

    /// The reported settings and their current values.
    pub fn reported(&self) -> impl Iterator<Item = (&'static str, &str)> {
        self.vars
            .iter()
            .filter(|v| v.reported)
            .map(|v| (v.name, v.current.as_str()))
    }
}

fn unknown(name: &str) -> PgError {
    PgError::new(
        UNDEFINED_OBJECT,
        format!("unrecognized configuration parameter \"{name}\""),
    )
}

impl ModelServer {
    /// ReadyForQuery's status for the current block.
    pub fn tx_status(&self) -> u8 {
        match self.block {
            Block::Idle | Block::Started => TX_IDLE,
            Block::Implicit | Block::Explicit => TX_IN_BLOCK,
            Block::Failed => TX_FAILED,
        }
    }

    /// `start_xact_command`: a command needs a transaction; begin one if there is none.
    pub(super) fn begin_command(&mut self) {
        if self.block == Block::Idle {
            self.block = Block::Started;
            self.tx = Tx::default();
        }
    }

    /// `finish_xact_command`: a transaction begun by a command commits at its end; a block
    /// goes on.
    pub(super) fn finish_command(&mut self, db: &mut super::ModelDb) {
        if self.block == Block::Started {
            self.commit(db);
        }
    }

    /// The settings, about to change: the transaction keeps them as they were first.
    pub(super) fn settings_mut(&mut self) -> &mut Settings {
        if self.tx.saved.is_none() {
            self.tx.saved = Some(self.settings.clone());
        }
        self.settings_changed = true;
        &mut self.settings
    }

    /// Whether SET LOCAL and DISCARD see a transaction block (`IsTransactionBlock`).
    pub(super) fn in_transaction_block(&self) -> bool {
        matches!(
            self.block,
            Block::Implicit | Block::Explicit | Block::Failed
        )
    }

    /// Commits: rows reach the tables, LISTENs take effect, NOTIFYs go out, SET LOCAL ends,
    /// portals close (they do not outlive their transaction).
    pub(super) fn commit(&mut self, db: &mut super::ModelDb) {
        let tx = std::mem::take(&mut self.tx);
        for (table, v) in tx.writes {
            match table {
                TableRef::Shared(name) => db.append(&name, [v]),
                TableRef::Temp(name) => {
                    if let Some(t) = self.temps.get_mut(&name) {
                        t.rows.push(v);
                    }
                }
            }
        }
        for op in tx.listens {
            match op {
                ListenOp::Listen(ch) => db.listen(self.pid, &ch),
                ListenOp::Unlisten(ch) => db.unlisten(self.pid, ch.as_deref()),
            }
        }
        for (channel, payload) in tx.notifies {
            db.notify(Notification {
                pid: self.pid,
                channel,
                payload,
            });
        }
        if tx.saved.is_some() {
            self.settings.commit();
            self.settings_changed = true;
        }
        self.portals.clear();
        self.block = Block::Idle;
    }

    /// Undoes the transaction's work; settings are restored at once (PostgreSQL restores them
    /// at the error, before ROLLBACK).
    fn undo(&mut self) {
        let tx = std::mem::take(&mut self.tx);
        for name in tx.created {
            self.temps.remove(&name);
        }
        if let Some(saved) = tx.saved {
            self.settings = saved;
            self.settings_changed = true;
        }
    }

    /// An error ended the current command: a transaction begun by it ends, a block fails.
    pub(super) fn abort_on_error(&mut self) {
        match self.block {
            Block::Started | Block::Implicit => {
                self.undo();
                self.portals.clear();
                self.block = Block::Idle;
            }
            Block::Explicit => {
                self.undo();
                self.block = Block::Failed;
            }
            Block::Failed | Block::Idle => {}
        }
    }

    /// BEGIN.
    pub(super) fn begin_block(&mut self) -> Option<Notice> {
        if self.block == Block::Explicit {
            return Some(Notice::warning(
                ACTIVE_SQL_TRANSACTION,
                "there is already a transaction in progress",
            ));
        }
        self.block = Block::Explicit;
        None
    }

    /// COMMIT: its tag (ROLLBACK for a failed block) and the warning outside a block.
    pub(super) fn commit_block(
        &mut self,
        db: &mut super::ModelDb,
    ) -> (&'static str, Option<Notice>) {
        match self.block {
            Block::Failed => {
                self.end_failed();
                ("ROLLBACK", None)
            }
            Block::Explicit => {
                self.commit(db);
                ("COMMIT", None)
            }
            _ => {
                self.commit(db);
                ("COMMIT", Some(no_transaction()))
            }
        }
    }

    /// ROLLBACK, with the warning outside a block.
    pub(super) fn rollback_block(&mut self) -> Option<Notice> {
        let warning = match self.block {
            Block::Failed => {
                self.end_failed();
                return None;
            }
            Block::Explicit => None,
            _ => Some(no_transaction()),
        };
        self.undo();
        self.portals.clear();
        self.block = Block::Idle;
        warning
    }

    fn end_failed(&mut self) {
        self.tx = Tx::default();
        self.portals.clear();
        self.block = Block::Idle;
    }
}

fn no_transaction() -> Notice {
    Notice::warning(
        NO_ACTIVE_SQL_TRANSACTION,
        "there is no transaction in progress",
    )
}
