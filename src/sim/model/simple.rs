//! The simple Query protocol (protocol docs, "Simple Query" and "Multiple Statements in a
//! Simple Query"): the whole string is parsed first; each statement then runs in turn, in one
//! implicit transaction unless the string itself has BEGIN or COMMIT; an error ends the string
//! and its implicit transaction; ReadyForQuery ends every Query.

use crate::protocol::backend::EMPTY_QUERY_RESPONSE_TAG;
use crate::protocol::cursor::Cursor;

use super::copy::send_copy_out;
use super::error::PgError;
use super::exec::{Row, Run};
use super::extended::Portal;
use super::sql::{self, Stmt, Strategy};
use super::tx::Block;
use super::wire::Io;
use super::{ModelServer, Work};

/// A simple Query's statements and how far it got.
#[derive(Debug)]
pub struct QueryRun {
    stmts: Vec<Stmt>,
    next: usize,
    /// The RowDescription of `stmts[next]` is sent (it waits for a lock after it).
    described: bool,
}

/// How a statement of a simple Query ended, short of an error.
enum Step {
    Done,
    CopyIn,
    Blocked,
}

impl ModelServer {
    pub(super) fn on_query(&mut self, io: &mut Io, body: &[u8]) {
        // A simple Query drops the unnamed statement (`exec_simple_query`).
        self.statements.remove("");
        let sql = match query_text(body) {
            Ok(sql) => sql,
            Err(e) => {
                self.fail(io, e);
                return self.ready(io);
            }
        };
        self.begin_command();
        match sql::parse(&sql) {
            Err(e) => {
                self.fail(io, e);
                self.ready(io);
            }
            Ok(stmts) if stmts.is_empty() => {
                io.empty(EMPTY_QUERY_RESPONSE_TAG);
                self.finish_command(io.db);
                self.ready(io);
            }
            Ok(stmts) => {
                self.work = Some(Work::Query(QueryRun {
                    stmts,
                    next: 0,
                    described: false,
                }));
                self.run_query(io);
            }
        }
    }

    /// Runs the Query's remaining statements, until it ends, waits for a lock, or enters COPY.
    pub(super) fn run_query(&mut self, io: &mut Io) {
        loop {
            let Some(Work::Query(q)) = &self.work else {
                return;
            };
            let Some(stmt) = q.stmts.get(q.next).cloned() else {
                self.work = None;
                return self.ready(io);
            };
            let multi = q.stmts.len() > 1;
            match self.simple_statement(io, &stmt, multi, q.described) {
                Ok(Step::Done) => self.statement_done(io),
                Ok(Step::CopyIn) => return,
                Ok(Step::Blocked) => {
                    if let Some(Work::Query(q)) = &mut self.work {
                        q.described = true;
                    }
                    self.blocked = true;
                    return;
                }
                Err(e) => {
                    self.work = None;
                    self.fail(io, e);
                    if !self.is_closed() {
                        self.ready(io);
                    }
                    return;
                }
            }
        }
    }

    /// After a statement of the Query completed: the last one ends the implicit transaction.
    pub(super) fn statement_done(&mut self, io: &mut Io) {
        let Some(Work::Query(q)) = &mut self.work else {
            return;
        };
        q.next += 1;
        q.described = false;
        self.portals.remove("");
        if q.next == q.stmts.len() {
            if self.block == Block::Implicit {
                self.block = Block::Started;
            }
            self.finish_command(io.db);
        }
    }

    fn simple_statement(
        &mut self,
        io: &mut Io,
        stmt: &Stmt,
        multi: bool,
        described: bool,
    ) -> Result<Step, PgError> {
        self.begin_command();
        if multi && self.block == Block::Started {
            self.block = Block::Implicit;
        }
        if self.block == Block::Failed && !stmt.is_exit() {
            return Err(PgError::aborted());
        }
        self.analyse(io.db, stmt)?;
        ModelServer::plan(stmt)?;
        let cols = self.describe(io.db, stmt);
        self.portals
            .insert(String::new(), Portal::simple(stmt.clone(), cols.clone()));
        // A plain select describes its rows before it runs; a utility once it has them.
        let one_select = stmt.strategy() == Strategy::OneSelect;
        if one_select && !described {
            io.row_description(cols.as_deref().unwrap_or_default(), &[]);
        }
        match self.run(io, stmt, &[])? {
            Run::Blocked => Ok(Step::Blocked),
            Run::Rows(rows, tag) => {
                if !one_select {
                    io.row_description(cols.as_deref().unwrap_or_default(), &[]);
                }
                self.send_rows(io, &rows, &[], false)?;
                io.command_complete(&tag.complete(rows.len()));
                Ok(Step::Done)
            }
            Run::Done(tag) => {
                io.command_complete(&tag);
                Ok(Step::Done)
            }
            Run::CopyIn(table) => {
                self.start_copy_in(io, table, None);
                Ok(Step::CopyIn)
            }
            Run::CopyOut(rows) => {
                send_copy_out(io, &rows);
                Ok(Step::Done)
            }
        }
    }

    /// DataRows. A session that terminated itself ends with FATAL when the executor next
    /// looks for interrupts: as it fetches the row after (even past the last), unless the
    /// rows were `limited` by Execute and the limit is reached (its caller looks after
    /// PortalSuspended).
    pub(super) fn send_rows(
        &mut self,
        io: &mut Io,
        rows: &[Row],
        formats: &[i16],
        limited: bool,
    ) -> Result<(), PgError> {
        for (i, row) in rows.iter().enumerate() {
            io.data_row(row, formats);
            let fetches_on = !limited || i + 1 < rows.len();
            if self.dying && fetches_on {
                return Err(ModelServer::terminated());
            }
        }
        Ok(())
    }
}

/// The SQL of a Query body: one NUL-terminated string and nothing after it.
fn query_text(body: &[u8]) -> Result<String, PgError> {
    let mut c = Cursor::new(body);
    let sql = c
        .cstr()
        .map_err(|_| PgError::protocol("invalid string in message"))?;
    if !c.is_empty() {
        return Err(PgError::protocol("invalid message format"));
    }
    Ok(String::from_utf8_lossy(sql).into_owned())
}
