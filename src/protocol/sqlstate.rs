//! SQLSTATE codes the pooler itself answers with (PostgreSQL docs, Appendix A).

pub const SUCCESSFUL_COMPLETION: &str = "00000";
pub const CONNECTION_FAILURE: &str = "08006";
pub const CONNECTION_EXCEPTION: &str = "08000";
pub const SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION: &str = "08001";
pub const PROTOCOL_VIOLATION: &str = "08P01";
pub const FEATURE_NOT_SUPPORTED: &str = "0A000";
pub const INVALID_AUTHORIZATION_SPECIFICATION: &str = "28000";
pub const INVALID_PASSWORD: &str = "28P01";
pub const INVALID_CATALOG_NAME: &str = "3D000";
pub const INVALID_SQL_STATEMENT_NAME: &str = "26000";
pub const DUPLICATE_PREPARED_STATEMENT: &str = "42P05";
pub const CONFIGURATION_LIMIT_EXCEEDED: &str = "53400";
pub const PROGRAM_LIMIT_EXCEEDED: &str = "54000";
pub const TOO_MANY_CONNECTIONS: &str = "53300";
pub const QUERY_CANCELED: &str = "57014";
pub const ADMIN_SHUTDOWN: &str = "57P01";
pub const CANNOT_CONNECT_NOW: &str = "57P03";
pub const ACTIVE_SQL_TRANSACTION: &str = "25001";
/// A command in a transaction block that already failed.
pub const IN_FAILED_SQL_TRANSACTION: &str = "25P02";
/// A write in a read-only transaction: on a server that should take writes, a sign that it
/// became a standby or was made read-only.
pub const READ_ONLY_SQL_TRANSACTION: &str = "25006";
pub const INTERNAL_ERROR: &str = "XX000";
pub const SYNTAX_ERROR: &str = "42601";
pub const UNDEFINED_OBJECT: &str = "42704";
/// PostgreSQL's `idle_in_transaction_session_timeout`.
pub const IDLE_IN_TRANSACTION_TIMEOUT: &str = "25P03";
/// PostgreSQL's `transaction_timeout` (17+).
pub const TRANSACTION_TIMEOUT: &str = "25P04";
/// PostgreSQL's answer for a database that takes no connections (`datallowconn`).
pub const OBJECT_NOT_IN_PREREQUISITE_STATE: &str = "55000";

/// A login refusal a client would also get connecting directly: its class 28 (invalid
/// authorization: a wrong password, a role that may not log in) or an unknown database.
/// Retrying does not help, and a pooler passes it on as FATAL.
pub fn is_login_refusal(code: &str) -> bool {
    code.get(..2) == Some(&INVALID_AUTHORIZATION_SPECIFICATION[..2]) || code == INVALID_CATALOG_NAME
}
