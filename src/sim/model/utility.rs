//! Statements about session state: SQL-level prepared statements, DISCARD ALL, LISTEN and
//! NOTIFY, temp tables and `do` blocks that raise.

use super::error::{Notice, PgError, ACTIVE_SQL_TRANSACTION, DUPLICATE_TABLE};
use super::error::{RAISE_EXCEPTION, SUCCESSFUL_COMPLETION, WARNING};
use super::sql::{Level, Stmt};
use super::tx::ListenOp;
use super::wire::Io;
use super::{ModelServer, Table};

impl ModelServer {
    /// Utility statements about session state: prepared statements, DISCARD, LISTEN,
    /// temp tables, `do` blocks.
    pub(super) fn run_session_utility(
        &mut self,
        io: &mut Io,
        stmt: &Stmt,
    ) -> Result<String, PgError> {
        Ok(match stmt {
            Stmt::Prepare { name, body } => {
                self.prepare(io.db, name, body)?;
                "PREPARE".into()
            }
            Stmt::Deallocate { name: Some(name) } => {
                self.statements
                    .remove(name)
                    .filter(|_| !name.is_empty())
                    .ok_or_else(|| PgError::no_statement(name))?;
                "DEALLOCATE".into()
            }
            Stmt::Deallocate { name: None } => {
                // The unnamed statement is not among the prepared statements it drops.
                self.statements.retain(|k, _| k.is_empty());
                "DEALLOCATE ALL".into()
            }
            Stmt::DiscardAll => {
                self.discard_all(io)?;
                "DISCARD ALL".into()
            }
            Stmt::Listen { channel } => {
                self.tx.listens.push(ListenOp::Listen(channel.clone()));
                "LISTEN".into()
            }
            Stmt::Unlisten { channel } => {
                self.tx.listens.push(ListenOp::Unlisten(channel.clone()));
                "UNLISTEN".into()
            }
            Stmt::Notify { channel, payload } => {
                // One notification per channel and payload per transaction.
                let n = (channel.clone(), payload.clone());
                if !self.tx.notifies.contains(&n) {
                    self.tx.notifies.push(n);
                }
                "NOTIFY".into()
            }
            Stmt::CreateTemp { table } => {
                if self.temps.contains_key(table) {
                    let msg = format!("relation \"{table}\" already exists");
                    return Err(PgError::new(DUPLICATE_TABLE, msg));
                }
                let oid = io.db.new_oid();
                let rows = Vec::new();
                self.temps.insert(table.clone(), Table { oid, rows });
                self.tx.created.push(table.clone());
                "CREATE TABLE".into()
            }
            Stmt::Raise { level, message } => {
                raise(io, *level, message)?;
                "DO".into()
            }
            other => {
                let msg = format!("the model runs {other:?} elsewhere");
                return Err(PgError::new("XX000", msg));
            }
        })
    }

    /// DISCARD ALL: refused in a transaction block or after pipelined work; drops prepared
    /// statements, portals, settings, LISTENs, advisory locks and temp tables.
    fn discard_all(&mut self, io: &mut Io) -> Result<(), PgError> {
        if self.in_transaction_block() {
            let msg = "DISCARD ALL cannot run inside a transaction block";
            return Err(PgError::new(ACTIVE_SQL_TRANSACTION, msg));
        }
        if self.tx.pipelined {
            let msg = "DISCARD ALL cannot be executed within a pipeline";
            return Err(PgError::new(ACTIVE_SQL_TRANSACTION, msg));
        }
        self.statements.retain(|k, _| k.is_empty());
        self.portals.clear();
        self.settings_mut().reset_all();
        self.tx.listens.push(ListenOp::Unlisten(None));
        io.db.unlock_all(self.pid);
        self.temps.clear();
        Ok(())
    }
}

fn raise(io: &mut Io, level: Level, message: &str) -> Result<(), PgError> {
    let notice = |severity, code| Notice {
        severity,
        code,
        message: message.to_owned(),
    };
    match level {
        Level::Notice => io.notice(&notice("NOTICE", SUCCESSFUL_COMPLETION)),
        Level::Warning => io.notice(&notice("WARNING", WARNING)),
        Level::Exception => {
            return Err(PgError::new(RAISE_EXCEPTION, message));
        }
    }
    Ok(())
}
