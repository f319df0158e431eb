//! The extended query protocol (protocol docs, "Extended Query" and "Pipelining"): Parse,
//! Bind, Describe, Execute and Close with PostgreSQL's checks in PostgreSQL's order
//! (`exec_parse_message`, `exec_bind_message`, ... in `postgres.c`); an error in any of them
//! makes the session skip to Sync (the caller's business).

use crate::protocol::backend::{
    BIND_COMPLETE_TAG, CLOSE_COMPLETE_TAG, EMPTY_QUERY_RESPONSE_TAG, NO_DATA_TAG,
    PARSE_COMPLETE_TAG, PORTAL_SUSPENDED_TAG,
};
use crate::protocol::cursor::Cursor;

use super::copy::send_copy_out;
use super::decode::{convert_params, decode_bind, malformed, param_types, target};
use super::error::{PgError, DUPLICATE_CURSOR, DUPLICATE_PREPARED_STATEMENT};
use super::error::{INVALID_CURSOR_NAME, OBJECT_NOT_IN_PREREQUISITE_STATE};
use super::exec::{Row, RowsTag, Run};
use super::sql::{self, Stmt};
use super::tx::Block;
use super::value::{Column, Ty, Value};
use super::wire::Io;
use super::{ModelDb, ModelServer, Work};

/// A prepared statement (`None`: the empty query) and its parameter types.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub stmt: Option<Stmt>,
    pub params: Vec<Ty>,
}

/// How far a portal has run.
#[derive(Debug)]
pub enum PortalRun {
    Fresh,
    /// Rows produced and how many were fetched.
    Rows {
        rows: Vec<Row>,
        pos: usize,
        tag: RowsTag,
    },
    /// A portal that returns no rows ran; it cannot run again.
    Done,
}

/// A portal: a bound statement. One whose Bind failed after the portal was created has no
/// statement, like the empty query's (Execute answers EmptyQueryResponse).
#[derive(Debug)]
pub struct Portal {
    stmt: Option<Stmt>,
    params: Vec<Value>,
    formats: Vec<i16>,
    cols: Option<Vec<Column>>,
    run: PortalRun,
}

impl Portal {
    /// The unnamed portal a simple Query runs a statement in. It is dropped when the statement
    /// completes; one whose statement failed in a transaction block stays until the block
    /// ends (a failed portal), as Describe of the unnamed portal shows.
    pub fn simple(stmt: Stmt, cols: Option<Vec<Column>>) -> Portal {
        Portal {
            stmt: Some(stmt),
            cols,
            ..Portal::hollow()
        }
    }

    fn hollow() -> Portal {
        Portal {
            stmt: None,
            params: Vec::new(),
            formats: Vec::new(),
            cols: None,
            run: PortalRun::Fresh,
        }
    }
}

impl ModelServer {
    pub(super) fn on_parse(&mut self, io: &mut Io, body: &[u8]) -> Result<(), PgError> {
        let mut c = Cursor::new(body);
        let name = c.str().map_err(malformed)?.to_owned();
        let text = String::from_utf8_lossy(c.cstr().map_err(malformed)?).into_owned();
        let n = c.i16().map_err(malformed)?;
        let declared = (0..n)
            .map(|_| c.i32().map(|oid| oid as u32).map_err(malformed))
            .collect::<Result<Vec<_>, _>>()?;
        self.begin_command();
        if name.is_empty() {
            self.statements.remove("");
        }
        let mut stmts = sql::parse(&text)?;
        if stmts.len() > 1 {
            let msg = "cannot insert multiple commands into a prepared statement";
            return Err(PgError::syntax_msg(msg));
        }
        let stmt = stmts.pop();
        if let Some(s) = &stmt {
            if self.block == Block::Failed && !s.is_exit() {
                return Err(PgError::aborted());
            }
            self.analyse(io.db, s)?;
        }
        let params = param_types(&declared, stmt.as_ref())?;
        self.store(&name, Prepared { stmt, params })?;
        io.empty(PARSE_COMPLETE_TAG);
        Ok(())
    }

    fn store(&mut self, name: &str, p: Prepared) -> Result<(), PgError> {
        if !name.is_empty() && self.statements.contains_key(name) {
            let msg = format!("prepared statement \"{name}\" already exists");
            return Err(PgError::new(DUPLICATE_PREPARED_STATEMENT, msg));
        }
        self.statements.insert(name.to_owned(), p);
        Ok(())
    }

    /// SQL PREPARE: the body is analysed (not planned) and stored under the name.
    pub(super) fn prepare(&mut self, db: &ModelDb, name: &str, body: &Stmt) -> Result<(), PgError> {
        self.analyse(db, body)?;
        let params = param_types(&[], Some(body))?;
        let stmt = Some(body.clone());
        self.store(name, Prepared { stmt, params })
    }

    pub(super) fn on_bind(&mut self, io: &mut Io, body: &[u8]) -> Result<(), PgError> {
        let m = decode_bind(body)?;
        self.begin_command();
        let p = self
            .statements
            .get(&m.stmt)
            .ok_or_else(|| PgError::no_statement(&m.stmt))?
            .clone();
        if m.param_formats.len() > 1 && m.param_formats.len() != m.params.len() {
            let (f, n) = (m.param_formats.len(), m.params.len());
            let msg = format!("bind message has {f} parameter formats but {n} parameters");
            return Err(PgError::protocol(msg));
        }
        if m.params.len() != p.params.len() {
            let msg = format!(
                "bind message supplies {} parameters, but prepared statement \"{}\" requires {}",
                m.params.len(),
                m.stmt,
                p.params.len()
            );
            return Err(PgError::protocol(msg));
        }
        let exit = p.stmt.as_ref().is_some_and(Stmt::is_exit);
        if self.block == Block::Failed && !(exit && m.params.is_empty()) {
            return Err(PgError::aborted());
        }
        self.create_portal(&m.portal)?;
        let params = convert_params(&m, &p.params)?;
        let cols = match &p.stmt {
            Some(stmt) => {
                // A cached plan is checked again (its tables may be gone), then planned.
                self.analyse(io.db, stmt)?;
                ModelServer::plan(stmt)?;
                self.describe(io.db, stmt)
            }
            None => None,
        };
        let ncols = cols.as_ref().map_or(0, Vec::len);
        if m.result_formats.len() > 1 && m.result_formats.len() != ncols {
            let f = m.result_formats.len();
            let msg = format!("bind message has {f} result formats but query has {ncols} columns");
            return Err(PgError::protocol(msg));
        }
        let portal = Portal {
            stmt: p.stmt,
            params,
            formats: m.result_formats,
            cols,
            run: PortalRun::Fresh,
        };
        self.portals.insert(m.portal, portal);
        io.empty(BIND_COMPLETE_TAG);
        Ok(())
    }

    /// The portal exists from here on, even if the rest of Bind fails; the unnamed portal is
    /// replaced silently, a named one must be new.
    fn create_portal(&mut self, name: &str) -> Result<(), PgError> {
        if !name.is_empty() && self.portals.contains_key(name) {
            let msg = format!("cursor \"{name}\" already exists");
            return Err(PgError::new(DUPLICATE_CURSOR, msg));
        }
        self.portals.insert(name.to_owned(), Portal::hollow());
        Ok(())
    }

    pub(super) fn on_describe(&mut self, io: &mut Io, body: &[u8]) -> Result<(), PgError> {
        let (kind, name) = target(body)?;
        self.begin_command();
        let failed = self.block == Block::Failed;
        match kind {
            b'S' => {
                let p = self
                    .statements
                    .get(&name)
                    .ok_or_else(|| PgError::no_statement(&name))?;
                let cols = p.stmt.as_ref().and_then(|s| self.describe(io.db, s));
                if failed && cols.is_some() {
                    return Err(PgError::aborted());
                }
                let oids: Vec<u32> = p.params.iter().map(|t| t.oid()).collect();
                io.parameter_description(&oids);
                match cols {
                    Some(cols) => io.row_description(&cols, &[]),
                    None => io.empty(NO_DATA_TAG),
                }
            }
            b'P' => {
                let p = self.portals.get(&name).ok_or_else(|| no_portal(&name))?;
                if failed && p.cols.is_some() {
                    return Err(PgError::aborted());
                }
                match &p.cols {
                    Some(cols) => io.row_description(cols, &p.formats),
                    None => io.empty(NO_DATA_TAG),
                }
            }
            other => {
                let msg = format!("invalid DESCRIBE message subtype {other}");
                return Err(PgError::protocol(msg));
            }
        }
        Ok(())
    }

    pub(super) fn on_execute(&mut self, io: &mut Io, body: &[u8]) -> Result<(), PgError> {
        let mut c = Cursor::new(body);
        let portal = c.str().map_err(malformed)?.to_owned();
        let max_rows = c.i32().map_err(malformed)?;
        self.begin_command();
        self.execute_portal(io, &portal, max_rows)
    }

    /// Runs a portal, or fetches up to `max_rows` more of its rows (0: all).
    pub(super) fn execute_portal(
        &mut self,
        io: &mut Io,
        name: &str,
        max_rows: i32,
    ) -> Result<(), PgError> {
        let p = self.portals.get_mut(name).ok_or_else(|| no_portal(name))?;
        let Some(stmt) = p.stmt.clone() else {
            io.empty(EMPTY_QUERY_RESPONSE_TAG);
            return Ok(());
        };
        if self.block == Block::Failed && !stmt.is_exit() {
            return Err(PgError::aborted());
        }
        match p.run {
            PortalRun::Done => {
                let msg = format!("portal \"{name}\" cannot be run");
                Err(PgError::new(OBJECT_NOT_IN_PREREQUISITE_STATE, msg))
            }
            PortalRun::Fresh => self.start_portal(io, name, &stmt, max_rows),
            PortalRun::Rows { .. } => self.fetch(io, name, max_rows),
        }
    }

    /// The first Execute of a portal runs its statement.
    fn start_portal(
        &mut self,
        io: &mut Io,
        name: &str,
        stmt: &Stmt,
        max_rows: i32,
    ) -> Result<(), PgError> {
        let params = self
            .portals
            .get_mut(name)
            .map(|p| std::mem::take(&mut p.params))
            .unwrap_or_default();
        let run = self.run(io, stmt, &params);
        if let Some(p) = self.portals.get_mut(name) {
            p.params = params;
        }
        match run? {
            Run::Blocked => {
                let portal = name.to_owned();
                self.work = Some(Work::Execute { portal, max_rows });
                self.blocked = true;
            }
            Run::Rows(rows, tag) => {
                self.set_run(name, PortalRun::Rows { rows, pos: 0, tag });
                return self.fetch(io, name, max_rows);
            }
            Run::Done(tag) => {
                self.set_run(name, PortalRun::Done);
                io.command_complete(&tag);
                self.executed(io.db, stmt);
            }
            Run::CopyIn(table) => {
                self.set_run(name, PortalRun::Done);
                self.start_copy_in(io, table, Some(name.to_owned()));
            }
            Run::CopyOut(rows) => {
                self.set_run(name, PortalRun::Done);
                send_copy_out(io, &rows);
                self.executed(io.db, stmt);
            }
        }
        Ok(())
    }

    fn set_run(&mut self, portal: &str, run: PortalRun) {
        if let Some(p) = self.portals.get_mut(portal) {
            p.run = run;
        }
    }

    /// Sends the next rows of a portal: PortalSuspended if `max_rows` of them went out (even
    /// if no more are left), else CommandComplete with the count sent by this Execute.
    fn fetch(&mut self, io: &mut Io, name: &str, max_rows: i32) -> Result<(), PgError> {
        let Some(p) = self.portals.get_mut(name) else {
            return Ok(());
        };
        let PortalRun::Rows { rows, pos, tag } = &mut p.run else {
            return Ok(());
        };
        let left = rows.len() - *pos;
        let n = usize::try_from(max_rows)
            .ok()
            .filter(|&m| m > 0)
            .map_or(left, |m| m.min(left));
        let batch: Vec<Row> = rows[*pos..*pos + n].to_vec();
        *pos += n;
        let tag = *tag;
        let formats = p.formats.clone();
        let limited = max_rows > 0 && n == max_rows as usize;
        self.send_rows(io, &batch, &formats, limited)?;
        self.tx.pipelined = true;
        if limited {
            io.empty(PORTAL_SUSPENDED_TAG);
            if self.dying {
                return Err(ModelServer::terminated());
            }
        } else {
            io.command_complete(&tag.complete(n));
        }
        Ok(())
    }

    /// After an Execute completed: a transaction statement (or one that needs it, DISCARD
    /// ALL) commits at once; anything else leaves the transaction open, pipelined.
    pub(super) fn executed(&mut self, db: &mut ModelDb, stmt: &Stmt) {
        if stmt.is_transaction_control() || matches!(stmt, Stmt::DiscardAll) {
            self.finish_command(db);
        } else {
            self.tx.pipelined = true;
        }
    }

    pub(super) fn on_close(&mut self, io: &mut Io, body: &[u8]) -> Result<(), PgError> {
        let (kind, name) = target(body)?;
        match kind {
            b'S' => drop(self.statements.remove(&name)),
            b'P' => drop(self.portals.remove(&name)),
            other => {
                let msg = format!("invalid CLOSE message subtype {other}");
                return Err(PgError::protocol(msg));
            }
        }
        io.empty(CLOSE_COMPLETE_TAG);
        Ok(())
    }
}

fn no_portal(name: &str) -> PgError {
    PgError::new(
        INVALID_CURSOR_NAME,
        format!("portal \"{name}\" does not exist"),
    )
}
