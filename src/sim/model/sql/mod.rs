//! The model's SQL: not a parser of SQL, but a recogniser of the fixed statement shapes the
//! program generator emits (and a few neighbours). A query string is lexed and split at `;`;
//! if any statement is not one of the shapes the whole string is a syntax error, as PostgreSQL
//! parses a whole simple Query before it runs any of it ("Multiple Statements in a Simple
//! Query").

mod lex;
mod shapes;

use super::error::PgError;
use super::value::{Column, Ty};

/// How a `do` block's `raise` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Notice,
    Warning,
    Exception,
}

/// An expression of a select list (or an `insert ... values` / `execute` argument).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    Int(i64),
    Text(String),
    /// `$n`, with the type of its cast if it has one.
    Param(usize, Option<Ty>),
    /// `a/b` on integer literals: folded when planned, so `1/0` fails at Bind.
    Div(i64, i64),
    Repeat(String, i64),
    AdvisoryLock(i64),
    TryAdvisoryLock(i64),
    AdvisoryUnlock(i64),
    AdvisoryUnlockAll,
    BackendPid,
    /// `pg_terminate_backend(pg_backend_pid())`: the session ends with FATAL 57P01.
    TerminateSelf,
    /// `set_config(name, value, is_local)`, as a pooler brings a server's settings in line.
    SetConfig(String, String, bool),
    /// `pg_is_in_recovery()`: the model is a primary.
    InRecovery,
    /// `(select reset_val from pg_settings where name = '...')`, as a pooler asks a role.
    ResetVal(String),
    /// `setseed(<fraction>)`, as a pooler's clean-up sends it: the model has no random().
    SetSeed,
    /// The pooler's question of what session state is left ([`crate::relay::PIN_CHECK_SQL`],
    /// recognised whole): temp tables 1, holdable cursors 2, advisory locks 4.
    PinCheck,
}

impl Expr {
    /// The result column PostgreSQL names and types this expression as.
    pub fn column(&self) -> Column {
        let (name, ty) = match self {
            Expr::Int(n) if i32::try_from(*n).is_ok() => ("?column?", Ty::Int4),
            Expr::Int(_) => ("?column?", Ty::Int8),
            Expr::Text(_) => ("?column?", Ty::Text),
            Expr::Param(_, Some(ty)) => (ty.name(), *ty),
            Expr::Param(_, None) => ("?column?", Ty::Text),
            Expr::Div(..) => ("?column?", Ty::Int4),
            Expr::Repeat(..) => ("repeat", Ty::Text),
            Expr::AdvisoryLock(_) => ("pg_advisory_lock", Ty::Void),
            Expr::TryAdvisoryLock(_) => ("pg_try_advisory_lock", Ty::Bool),
            Expr::AdvisoryUnlock(_) => ("pg_advisory_unlock", Ty::Bool),
            Expr::AdvisoryUnlockAll => ("pg_advisory_unlock_all", Ty::Void),
            Expr::BackendPid => ("pg_backend_pid", Ty::Int4),
            Expr::TerminateSelf => ("pg_terminate_backend", Ty::Bool),
            Expr::SetConfig(..) => ("set_config", Ty::Text),
            Expr::InRecovery => ("pg_is_in_recovery", Ty::Bool),
            Expr::ResetVal(_) => ("reset_val", Ty::Text),
            Expr::SetSeed => ("setseed", Ty::Void),
            Expr::PinCheck => ("?column?", Ty::Int4),
        };
        Column::computed(name, ty)
    }
}

/// A `select`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Select {
    /// `select e1, e2, ...` with no FROM: one row.
    Exprs(Vec<Expr>),
    /// `select n from T [order by n]`.
    Column { table: String, sorted: bool },
    /// `select count(*) from T` or `select count(*), coalesce(sum(n), 0) from T`.
    Count { table: String, sum: bool },
}

/// One recognised statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stmt {
    Select(Select),
    /// `insert into T values (e)`.
    Insert {
        table: String,
        value: Expr,
    },
    CopyFrom {
        table: String,
    },
    /// `copy T to stdout` or `copy (select n from T order by n) to stdout`.
    CopyTo {
        table: String,
        sorted: bool,
    },
    Begin,
    Commit,
    Rollback,
    /// `set [local] name = value` (`None`: `default`).
    Set {
        local: bool,
        name: String,
        value: Option<String>,
    },
    /// `reset name`, or `reset all` (`None`).
    Reset {
        name: Option<String>,
    },
    Show {
        name: String,
    },
    Prepare {
        name: String,
        body: Box<Stmt>,
    },
    Execute {
        name: String,
        args: Vec<Expr>,
    },
    /// `deallocate name`, or `deallocate all` (`None`).
    Deallocate {
        name: Option<String>,
    },
    DiscardAll,
    Listen {
        channel: String,
    },
    /// `unlisten name`, or `unlisten *` (`None`).
    Unlisten {
        channel: Option<String>,
    },
    Notify {
        channel: String,
        payload: String,
    },
    CreateTemp {
        table: String,
    },
    /// `discard sequences`: the model keeps no sequence state.
    DiscardSequences,
    /// `do $$ begin perform <expr>; end $$`: work a pooler cannot see into (a setting made
    /// by `set_config` in it changes the session unseen).
    DoPerform(Expr),
    /// `do $$ begin raise <level> '<message>'; end $$`.
    Raise {
        level: Level,
        message: String,
    },
}

/// How a portal of the statement runs (PostgreSQL's `PortalStrategy`): a plain select can be
/// fetched from again and again; a utility returning rows (SHOW, EXECUTE) fills a store it
/// fetches from; anything else runs once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    OneSelect,
    UtilSelect,
    Multi,
}

impl Stmt {
    /// COMMIT or ROLLBACK: what a failed transaction block still accepts
    /// (`IsTransactionExitStmt`).
    pub fn is_exit(&self) -> bool {
        matches!(self, Stmt::Commit | Stmt::Rollback)
    }

    /// BEGIN, COMMIT or ROLLBACK (`IsA(parsetree, TransactionStmt)`).
    pub fn is_transaction_control(&self) -> bool {
        matches!(self, Stmt::Begin | Stmt::Commit | Stmt::Rollback)
    }

    pub fn strategy(&self) -> Strategy {
        match self {
            Stmt::Select(_) => Strategy::OneSelect,
            Stmt::Show { .. } | Stmt::Execute { .. } => Strategy::UtilSelect,
            _ => Strategy::Multi,
        }
    }

    /// The types of `$1..$n` as the statement uses them (`None`: not determined by it).
    pub fn param_types(&self) -> Vec<Option<Ty>> {
        let mut types = Vec::new();
        let mut note = |e: &Expr, context: Option<Ty>| {
            if let Expr::Param(n, ty) = e {
                if types.len() < *n {
                    types.resize(*n, None);
                }
                let slot = &mut types[n - 1];
                *slot = slot.or(*ty).or(context);
            }
        };
        match self {
            Stmt::Select(Select::Exprs(exprs)) => exprs.iter().for_each(|e| note(e, None)),
            Stmt::Insert { value, .. } => note(value, Some(Ty::Int4)),
            Stmt::Execute { args, .. } => args.iter().for_each(|e| note(e, None)),
            _ => {}
        }
        types
    }
}

/// Recognises every statement of a query string. An empty string (or only `;`) is no
/// statement at all (EmptyQueryResponse).
pub fn parse(sql: &str) -> Result<Vec<Stmt>, PgError> {
    if sql == crate::relay::PIN_CHECK_SQL {
        return Ok(vec![Stmt::Select(Select::Exprs(vec![Expr::PinCheck]))]);
    }
    let toks = lex::lex(sql)?;
    lex::split(toks)
        .iter()
        .map(|t| shapes::statement(t).ok_or_else(|| PgError::syntax(&near(t))))
        .collect()
}

/// The first word of an unrecognised statement, for the message (PostgreSQL names the token
/// where its grammar failed; the model names the statement's first).
fn near(toks: &[lex::Tok]) -> String {
    match toks.first() {
        Some(lex::Tok::Word(w)) => w.clone(),
        Some(t) => format!("{t:?}"),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests;
