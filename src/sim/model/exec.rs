//! Running one statement, whichever protocol asked: the checks PostgreSQL makes when it
//! analyses (Parse) and plans (Bind) a statement, its result columns, and what running it does
//! to the session and the database.

use super::error::{Notice, PgError, DIVISION_BY_ZERO, NUMERIC_VALUE_OUT_OF_RANGE, WARNING};
use super::sql::{Expr, Select, Stmt};
use super::tx::TableRef;
use super::value::{Column, Ty, Value};
use super::wire::Io;
use super::{ModelDb, ModelServer, Table};

/// What a statement's rows are tagged with in CommandComplete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowsTag {
    /// `SELECT n`.
    Select,
    /// `SHOW`.
    Show,
}

impl RowsTag {
    pub fn complete(self, rows: usize) -> String {
        match self {
            RowsTag::Select => format!("SELECT {rows}"),
            RowsTag::Show => "SHOW".to_owned(),
        }
    }
}

pub type Row = Vec<Value>;

/// What running a statement produced.
#[derive(Debug)]
pub enum Run {
    Rows(Vec<Row>, RowsTag),
    /// Done; the CommandComplete tag.
    Done(String),
    /// COPY FROM STDIN begins.
    CopyIn(TableRef),
    /// COPY TO STDOUT, its rows.
    CopyOut(Vec<Option<i32>>),
    /// Waits for an advisory lock; run it again later.
    Blocked,
}

/// `SELECT ... ORDER BY n`: ascending, NULLs last.
pub fn sorted(mut rows: Vec<Option<i32>>) -> Vec<Option<i32>> {
    rows.sort_by_key(|v| (v.is_none(), *v));
    rows
}

impl ModelServer {
    fn resolve(&self, db: &ModelDb, name: &str) -> Result<TableRef, PgError> {
        if self.temps.contains_key(name) {
            Ok(TableRef::Temp(name.to_owned()))
        } else if db.table(name).is_some() {
            Ok(TableRef::Shared(name.to_owned()))
        } else {
            Err(PgError::no_table(name))
        }
    }

    fn table<'a>(&'a self, db: &'a ModelDb, t: &TableRef) -> Option<&'a Table> {
        match t {
            TableRef::Shared(name) => db.table(name),
            TableRef::Temp(name) => self.temps.get(name),
        }
    }

    /// The rows the session sees: committed ones, then its own uncommitted ones.
    pub(super) fn read(&self, db: &ModelDb, t: &TableRef) -> Vec<Option<i32>> {
        let mut rows = self
            .table(db, t)
            .map(|t| t.rows.clone())
            .unwrap_or_default();
        let own = self.tx.writes.iter().filter(|(w, _)| w == t);
        rows.extend(own.map(|(_, v)| *v));
        rows
    }

    /// Parse analysis: the tables a statement names must exist.
    pub(super) fn analyse(&self, db: &ModelDb, stmt: &Stmt) -> Result<(), PgError> {
        match stmt {
            Stmt::Select(Select::Column { table, .. } | Select::Count { table, .. })
            | Stmt::Insert { table, .. }
            | Stmt::CopyFrom { table }
            | Stmt::CopyTo { table, .. } => self.resolve(db, table).map(drop),
            Stmt::Prepare { body, .. } => self.analyse(db, body),
            _ => Ok(()),
        }
    }

    /// Planning folds constants: `1/0` fails here, at Bind (or before RowDescription).
    pub(super) fn plan(stmt: &Stmt) -> Result<(), PgError> {
        if let Stmt::Select(Select::Exprs(exprs)) = stmt {
            for e in exprs {
                if let Expr::Div(a, b) = e {
                    divide(*a, *b)?;
                }
            }
        }
        Ok(())
    }

    /// The statement's result columns (`None`: it returns no rows, NoData).
    pub(super) fn describe(&self, db: &ModelDb, stmt: &Stmt) -> Option<Vec<Column>> {
        match stmt {
            Stmt::Select(Select::Exprs(exprs)) => Some(exprs.iter().map(Expr::column).collect()),
            Stmt::Select(Select::Column { table, .. }) => {
                let oid = self
                    .resolve(db, table)
                    .ok()
                    .and_then(|t| self.table(db, &t).map(|t| t.oid));
                Some(vec![Column {
                    name: "n".into(),
                    ty: Ty::Int4,
                    table_oid: oid.unwrap_or(0),
                    attnum: 1,
                }])
            }
            Stmt::Select(Select::Count { sum, .. }) => {
                let mut cols = vec![Column::computed("count", Ty::Int8)];
                if *sum {
                    cols.push(Column::computed("coalesce", Ty::Int8));
                }
                Some(cols)
            }
            Stmt::Show { name } => {
                let name = self.settings.show(name).map_or(name.as_str(), |(n, _)| n);
                Some(vec![Column::computed(name, Ty::Text)])
            }
            Stmt::Execute { name, .. } => {
                let body = self.statements.get(name)?.stmt.as_ref()?;
                self.describe(db, body)
            }
            _ => None,
        }
    }

    /// Runs a statement (already analysed and planned) with its parameters.
    pub(super) fn run(
        &mut self,
        io: &mut Io,
        stmt: &Stmt,
        params: &[Value],
    ) -> Result<Run, PgError> {
        match stmt {
            Stmt::Select(s) => self.run_select(io, s, params),
            Stmt::Insert { table, value } => {
                let t = self.resolve(io.db, table)?;
                let v = match value {
                    Expr::Int(n) => Some(int4(*n)?),
                    Expr::Param(n, _) => match params.get(n - 1) {
                        Some(Value::Int4(v)) => Some(*v),
                        _ => None,
                    },
                    _ => None,
                };
                self.tx.writes.push((t, v));
                Ok(Run::Done("INSERT 0 1".into()))
            }
            Stmt::CopyFrom { table } => Ok(Run::CopyIn(self.resolve(io.db, table)?)),
            Stmt::CopyTo {
                table,
                sorted: sort,
            } => {
                let rows = self.read(io.db, &self.resolve(io.db, table)?);
                Ok(Run::CopyOut(if *sort { sorted(rows) } else { rows }))
            }
            Stmt::Execute { name, args } => self.run_execute(io, name, args),
            Stmt::Show { name } => {
                let (_, value) = self.settings.show(name)?;
                let row = vec![Value::Text(value.to_owned().into())];
                Ok(Run::Rows(vec![row], RowsTag::Show))
            }
            _ => self.run_utility(io, stmt).map(Run::Done),
        }
    }

    fn run_select(&mut self, io: &mut Io, s: &Select, params: &[Value]) -> Result<Run, PgError> {
        let rows = match s {
            Select::Exprs(exprs) => {
                let mut row = Vec::with_capacity(exprs.len());
                for e in exprs {
                    match self.eval(io, e, params)? {
                        Some(v) => row.push(v),
                        None => return Ok(Run::Blocked),
                    }
                }
                vec![row]
            }
            Select::Column {
                table,
                sorted: sort,
            } => {
                let rows = self.read(io.db, &self.resolve(io.db, table)?);
                let rows = if *sort { sorted(rows) } else { rows };
                rows.into_iter()
                    .map(|v| vec![v.map_or(Value::Null, Value::Int4)])
                    .collect()
            }
            Select::Count { table, sum } => {
                let rows = self.read(io.db, &self.resolve(io.db, table)?);
                let mut row = vec![Value::Int8(rows.len() as i64)];
                if *sum {
                    row.push(Value::Int8(
                        rows.iter().flatten().map(|&n| i64::from(n)).sum(),
                    ));
                }
                vec![row]
            }
        };
        Ok(Run::Rows(rows, RowsTag::Select))
    }

    /// One expression's value; `None` while it waits for a lock.
    fn eval(&mut self, io: &mut Io, e: &Expr, params: &[Value]) -> Result<Option<Value>, PgError> {
        let pid = self.pid;
        Ok(Some(match e {
            Expr::Int(n) => i32::try_from(*n).map_or(Value::Int8(*n), Value::Int4),
            Expr::Text(s) => Value::Text(s.clone().into()),
            Expr::Param(n, _) => params.get(n - 1).cloned().unwrap_or(Value::Null),
            Expr::Div(a, b) => divide(*a, *b)?,
            Expr::Repeat(s, n) => Value::Text(s.repeat(usize::try_from(*n).unwrap_or(0)).into()),
            Expr::AdvisoryLock(k) if !io.db.lock(pid, *k) => return Ok(None),
            Expr::AdvisoryLock(_) => Value::Void,
            Expr::TryAdvisoryLock(k) => Value::Bool(io.db.try_lock(pid, *k)),
            Expr::AdvisoryUnlock(k) => {
                let held = io.db.unlock(pid, *k);
                if !held {
                    io.notice(&Notice::warning(
                        WARNING,
                        "you don't own a lock of type ExclusiveLock",
                    ));
                }
                Value::Bool(held)
            }
            Expr::AdvisoryUnlockAll => {
                io.db.unlock_all(pid);
                Value::Void
            }
            Expr::BackendPid => Value::Int4(pid),
            Expr::TerminateSelf => {
                self.dying = true;
                Value::Bool(true)
            }
            Expr::SetConfig(name, value, local) => {
                self.settings_mut().set(name, Some(value), *local)?;
                Value::Text(value.clone().into())
            }
            Expr::InRecovery => Value::Bool(false),
            Expr::ResetVal(name) => match self.settings.reset_value(name) {
                Some(v) => Value::Text(v.to_owned().into()),
                None => Value::Null,
            },
            Expr::SetSeed => Value::Void,
            Expr::PinCheck if self.blind => Value::Int4(0),
            // The model has no holdable cursors.
            Expr::PinCheck => Value::Int4(
                i32::from(!self.temps.is_empty()) + 4 * i32::from(io.db.holds_any_lock(pid)),
            ),
        }))
    }

    /// SQL EXECUTE: the prepared statement run with the literal arguments.
    fn run_execute(&mut self, io: &mut Io, name: &str, args: &[Expr]) -> Result<Run, PgError> {
        let prepared = self
            .statements
            .get(name)
            .filter(|_| !name.is_empty())
            .ok_or_else(|| PgError::no_statement(name))?;
        // Arguments for a statement without parameters are not even looked at
        // (`ExecuteQuery` evaluates them only if it has some).
        let args = if prepared.params.is_empty() {
            &[]
        } else {
            args
        };
        if args.len() != prepared.params.len() {
            return Err(PgError::syntax_msg(format!(
                "wrong number of parameters for prepared statement \"{name}\""
            )));
        }
        let mut params = Vec::with_capacity(args.len());
        for (a, ty) in args.iter().zip(&prepared.params) {
            params.push(match (a, ty) {
                (Expr::Int(n), Ty::Int4) => Value::Int4(int4(*n)?),
                (Expr::Int(n), ty) => ty.input(n.to_string().as_bytes())?,
                (Expr::Text(s), ty) => ty.input(s.as_bytes())?,
                _ => Value::Null,
            });
        }
        let Some(body) = prepared.stmt.clone() else {
            return Ok(Run::Done(String::new()));
        };
        self.analyse(io.db, &body)?;
        ModelServer::plan(&body)?;
        let run = self.run(io, &body, &params)?;
        if self.dying {
            // EXECUTE fills a store with the rows before any is sent: the interrupt comes
            // while it does, before RowDescription.
            return Err(ModelServer::terminated());
        }
        Ok(run)
    }

    /// Statements that return no rows: their CommandComplete tag.
    fn run_utility(&mut self, io: &mut Io, stmt: &Stmt) -> Result<String, PgError> {
        Ok(match stmt {
            Stmt::Begin => {
                if let Some(w) = self.begin_block() {
                    io.notice(&w);
                }
                "BEGIN".into()
            }
            Stmt::Commit => {
                let (tag, warning) = self.commit_block(io.db);
                if let Some(w) = warning {
                    io.notice(&w);
                }
                tag.into()
            }
            Stmt::Rollback => {
                if let Some(w) = self.rollback_block() {
                    io.notice(&w);
                }
                "ROLLBACK".into()
            }
            Stmt::Set { local, name, value } => {
                if *local && !self.in_transaction_block() {
                    io.notice(&Notice::warning(
                        super::error::NO_ACTIVE_SQL_TRANSACTION,
                        "SET LOCAL can only be used in transaction blocks",
                    ));
                }
                self.settings_mut().set(name, value.as_deref(), *local)?;
                "SET".into()
            }
            Stmt::Reset { name: Some(name) } => {
                self.settings_mut().set(name, None, false)?;
                "RESET".into()
            }
            Stmt::Reset { name: None } => {
                self.settings_mut().reset_all();
                "RESET".into()
            }
            Stmt::DoPerform(e) => {
                self.eval(io, e, &[])?;
                "DO".into()
            }
            Stmt::DiscardSequences => {
                if self.in_transaction_block() {
                    // (PostgreSQL allows it in a block; the pooler sends it alone.)
                }
                "DISCARD SEQUENCES".into()
            }
            _ => return self.run_session_utility(io, stmt),
        })
    }
}

fn int4(n: i64) -> Result<i32, PgError> {
    i32::try_from(n).map_err(|_| PgError::new(NUMERIC_VALUE_OUT_OF_RANGE, "integer out of range"))
}

/// Integer division as `int4div`/`int8div`: by zero fails, the result truncates.
fn divide(a: i64, b: i64) -> Result<Value, PgError> {
    if b == 0 {
        return Err(PgError::new(DIVISION_BY_ZERO, "division by zero"));
    }
    let out_of_range = || PgError::new(NUMERIC_VALUE_OUT_OF_RANGE, "integer out of range");
    match (i32::try_from(a), i32::try_from(b)) {
        (Ok(a), Ok(b)) => a.checked_div(b).map(Value::Int4).ok_or_else(out_of_range),
        _ => a.checked_div(b).map(Value::Int8).ok_or_else(out_of_range),
    }
}
