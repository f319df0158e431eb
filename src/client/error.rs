//! Errors that end or interrupt a client session, each knowing the SQLSTATE the client sees.

use thiserror::Error;

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
    /// The client broke the protocol during its login (with a message of the pooler's).
    #[error("{0}")]
    Protocol(String),
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
    /// A first packet that cannot be a startup packet: closed without a reply, as
    /// PostgreSQL does (a reply in a protocol the peer may not speak helps nobody, and
    /// node-postgres raises one sent to its Terminate-before-startup as an unhandled error).
    #[error("{0}")]
    BadStartup(crate::protocol::startup::StartupError),
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
            | ClientError::BadStartup(_) => return None,
            ClientError::Protocol(m) => (sqlstate::PROTOCOL_VIOLATION.to_owned(), m.clone(), None),
            ClientError::Client(f) => {
                (sqlstate::PROTOCOL_VIOLATION.to_owned(), f.to_string(), None)
            }
            ClientError::Pool(PoolError::Server(f)) => {
                (f.code.clone(), f.message.clone(), f.detail.clone())
            }
            ClientError::Pool(e) => (e.sqlstate().to_owned(), e.to_string(), None),
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
}

pub use crate::relay::error_fields;

impl From<ServerFault> for ClientError {
    fn from(f: ServerFault) -> Self {
        ClientError::ServerLost(Loss::Protocol(f))
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
