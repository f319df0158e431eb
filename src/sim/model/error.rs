//! The errors the model reports to its client, as PostgreSQL would: a severity, a SQLSTATE
//! (PostgreSQL docs, Appendix A) and a message. They are data the model sends, not failures of
//! the model itself.

use thiserror::Error;

pub const SUCCESSFUL_COMPLETION: &str = "00000";
pub const WARNING: &str = "01000";
pub const PROTOCOL_VIOLATION: &str = "08P01";
pub const DIVISION_BY_ZERO: &str = "22012";
pub const INVALID_TEXT_REPRESENTATION: &str = "22P02";
pub const BAD_COPY_FORMAT: &str = "22P04";
pub const NUMERIC_VALUE_OUT_OF_RANGE: &str = "22003";
pub const ACTIVE_SQL_TRANSACTION: &str = "25001";
pub const NO_ACTIVE_SQL_TRANSACTION: &str = "25P01";
pub const IN_FAILED_SQL_TRANSACTION: &str = "25P02";
pub const INVALID_SQL_STATEMENT_NAME: &str = "26000";
pub const INVALID_CURSOR_NAME: &str = "34000";
pub const SYNTAX_ERROR: &str = "42601";
pub const UNDEFINED_TABLE: &str = "42P01";
pub const DUPLICATE_CURSOR: &str = "42P03";
pub const DUPLICATE_PREPARED_STATEMENT: &str = "42P05";
pub const DUPLICATE_TABLE: &str = "42P07";
pub const INDETERMINATE_DATATYPE: &str = "42P18";
pub const UNDEFINED_OBJECT: &str = "42704";
pub const OBJECT_NOT_IN_PREREQUISITE_STATE: &str = "55000";
pub const QUERY_CANCELED: &str = "57014";
pub const ADMIN_SHUTDOWN: &str = "57P01";
pub const RAISE_EXCEPTION: &str = "P0001";

/// An ErrorResponse the model sends: ERROR ends the statement (and the transaction, or skips
/// to Sync), FATAL ends the session.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{} {code}: {message}", if *.fatal { "FATAL" } else { "ERROR" })]
pub struct PgError {
    pub fatal: bool,
    pub code: &'static str,
    pub message: String,
}

impl PgError {
    /// An ERROR with this SQLSTATE.
    pub fn new(code: &'static str, message: impl Into<String>) -> PgError {
        PgError {
            fatal: false,
            code,
            message: message.into(),
        }
    }

    /// A FATAL error: PostgreSQL sends it and closes the connection.
    pub fn fatal(code: &'static str, message: impl Into<String>) -> PgError {
        PgError {
            fatal: true,
            code,
            message: message.into(),
        }
    }

    pub fn syntax(near: &str) -> PgError {
        PgError::new(SYNTAX_ERROR, format!("syntax error at or near \"{near}\""))
    }

    /// A syntax error (42601) with its own message.
    pub fn syntax_msg(message: impl Into<String>) -> PgError {
        PgError::new(SYNTAX_ERROR, message)
    }

    pub fn aborted() -> PgError {
        PgError::new(
            IN_FAILED_SQL_TRANSACTION,
            "current transaction is aborted, commands ignored until end of transaction block",
        )
    }

    pub fn protocol(message: impl Into<String>) -> PgError {
        PgError::new(PROTOCOL_VIOLATION, message)
    }

    pub fn no_statement(name: &str) -> PgError {
        let message = if name.is_empty() {
            "unnamed prepared statement does not exist".to_owned()
        } else {
            format!("prepared statement \"{name}\" does not exist")
        };
        PgError::new(INVALID_SQL_STATEMENT_NAME, message)
    }

    pub fn no_table(name: &str) -> PgError {
        PgError::new(
            UNDEFINED_TABLE,
            format!("relation \"{name}\" does not exist"),
        )
    }
}

/// A NoticeResponse: severity (NOTICE, WARNING), SQLSTATE and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub severity: &'static str,
    pub code: &'static str,
    pub message: String,
}

impl Notice {
    pub fn warning(code: &'static str, message: impl Into<String>) -> Notice {
        Notice {
            severity: "WARNING",
            code,
            message: message.into(),
        }
    }
}
