//! Errors that end or interrupt a client session, each knowing the SQLSTATE the client sees.

use thiserror::Error;

use crate::admin::console::ConsoleError;
use crate::login::LoginError;
use crate::pool::PoolError;
use crate::protocol::backend::ErrorFields;
use crate::protocol::sqlstate;
use crate::relay::{ClientFault, RelayError, ServerFault};
use crate::server::ServerError;

/// How the server connection a client held was lost.
#[derive(Debug, Error)]
pub enum Loss {
    #[error("server closed the connection")]
    Closed,
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The server broke the protocol.
    #[error(transparent)]
    Protocol(#[from] ServerFault),
    /// An exchange of the pooler's own with it failed (the settings sync).
    #[error(transparent)]
    Server(#[from] ServerError),
}

#[derive(Debug, Error)]
pub enum ClientError {
    #[error("client I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The login failed.
    #[error(transparent)]
    Login(#[from] LoginError),
    /// The admin console's session ended early.
    #[error(transparent)]
    Console(#[from] ConsoleError),
    /// The client broke the protocol in its session.
    #[error(transparent)]
    Client(#[from] ClientFault),
    #[error("{0}")]
    Pool(#[from] PoolError),
    #[error("server connection lost: {0}")]
    ServerLost(#[source] Loss),
    /// The server ended the session with a FATAL error, already passed on to the client:
    /// nothing more to tell it.
    #[error("the server ended the session")]
    ServerEnded,
    /// The server refused something on the client's behalf (a startup setting): the client
    /// gets the server's own error, as a direct connection would.
    #[error("{}", .0.message)]
    Rejected(Box<ErrorFields>),
    #[error("{message}")]
    Fatal { code: &'static str, message: String },
    /// The pooler is draining: closed at a transaction boundary, or by the deadline.
    #[error("droid-pool is shutting down")]
    Shutdown { forced: bool },
    /// The client went away; nothing to tell it.
    #[error("client disconnected")]
    Gone,
    /// `KILL` or `KILL_CLIENT` in the admin console: what PostgreSQL says for
    /// `pg_terminate_backend`; the server it held is closed.
    #[error("terminating connection due to administrator command")]
    Killed,
}

impl ClientError {
    /// The ErrorResponse a client gets for this error, if it can still get one.
    pub fn to_fields(&self) -> Option<ErrorFields> {
        let (code, message, detail) = match self {
            ClientError::Io(_)
            | ClientError::Gone
            | ClientError::ServerEnded
            | ClientError::Console(ConsoleError::Io(_)) => return None,
            ClientError::Pool(e) | ClientError::Login(LoginError::Pool(e)) => pool_reply(e),
            ClientError::Login(e) => (e.sqlstate()?.to_owned(), e.to_string(), None),
            ClientError::Client(_) | ClientError::Console(ConsoleError::Frame(_)) => (
                sqlstate::PROTOCOL_VIOLATION.to_owned(),
                self.to_string(),
                None,
            ),
            ClientError::ServerLost(_) => (
                sqlstate::CONNECTION_FAILURE.to_owned(),
                self.to_string(),
                None,
            ),
            ClientError::Fatal { code, message } => ((*code).to_owned(), message.clone(), None),
            ClientError::Shutdown { forced } => (
                sqlstate::ADMIN_SHUTDOWN.to_owned(),
                if *forced {
                    "droid-pool is shutting down: the drain deadline passed".to_owned()
                } else {
                    "droid-pool is shutting down".to_owned()
                },
                None,
            ),
            ClientError::Rejected(f) => (f.code.clone(), f.message.clone(), f.detail.clone()),
            ClientError::Killed => (sqlstate::ADMIN_SHUTDOWN.to_owned(), self.to_string(), None),
        };
        Some(ErrorFields {
            severity: "FATAL".into(),
            code,
            message,
            detail,
            hint: None,
        })
    }

    /// The client went away (or its socket failed): nothing was refused.
    pub fn is_gone(&self) -> bool {
        matches!(
            self,
            ClientError::Io(_)
                | ClientError::Gone
                | ClientError::Login(LoginError::Io(_) | LoginError::Gone)
        )
    }

    /// Refused for want of room (53300): counted as refused, not as completed.
    pub fn is_refusal(&self) -> bool {
        match self {
            ClientError::Fatal { code, .. } => *code == sqlstate::TOO_MANY_CONNECTIONS,
            ClientError::Login(e) => e.is_refusal(),
            _ => false,
        }
    }
}

/// What a client is told of a pool error: the server's own error as it sent it, or the
/// pool's SQLSTATE and message.
fn pool_reply(e: &PoolError) -> (String, String, Option<String>) {
    match e {
        PoolError::Server(f) => (f.code.clone(), f.message.clone(), f.detail.clone()),
        e => (e.sqlstate().to_owned(), e.to_string(), None),
    }
}

impl From<ServerFault> for ClientError {
    fn from(f: ServerFault) -> Self {
        match f {
            ServerFault::Rejected(fields) => ClientError::Rejected(fields),
            f => ClientError::ServerLost(Loss::Protocol(f)),
        }
    }
}

impl From<RelayError> for ClientError {
    fn from(e: RelayError) -> Self {
        match e {
            RelayError::Client(f) => ClientError::Client(f),
            RelayError::Server(f) => f.into(),
        }
    }
}
