//! Why a client's login failed, each knowing the SQLSTATE the client is told (or that it is
//! told nothing).

use thiserror::Error;

use crate::auth::ScramError;
use crate::pool::PoolError;
use crate::protocol::startup::StartupError;
use crate::protocol::{sqlstate, FrameError, ParseError};

#[derive(Debug, Error)]
pub enum LoginError {
    #[error("client I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The client went away (or its TLS handshake failed); nothing to tell it.
    #[error("client disconnected")]
    Gone,
    /// A first packet that is no startup packet PostgreSQL would take.
    #[error(transparent)]
    Startup(#[from] StartupError),
    /// The client broke the protocol (a message of the pooler's own).
    #[error("{0}")]
    Protocol(&'static str),
    /// A message of the password exchange that cannot be cut.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// Another message where a password message was due (its tag).
    #[error("expected a password response, got message type '{}'", (*.0 as char).escape_default())]
    NotPassword(u8),
    /// A password message that cannot be parsed.
    #[error("invalid password message: {0}")]
    PasswordMessage(#[source] ParseError),
    /// A SCRAM message that breaks the exchange (a wrong proof is `Fatal` 28P01 instead).
    #[error(transparent)]
    Scram(#[from] ScramError),
    /// Refused with this SQLSTATE.
    #[error("{message}")]
    Fatal { code: &'static str, message: String },
    /// The client's pool could not tell its server parameters.
    #[error("{0}")]
    Pool(#[from] PoolError),
}

impl LoginError {
    /// The SQLSTATE of the FATAL the client gets; `None` when it gets none: it left, or its
    /// first packet's length cannot be a startup packet's (closed without a reply, as
    /// PostgreSQL does: a reply in a protocol the peer may not speak helps nobody, and
    /// node-postgres raises one sent to its Terminate-before-startup as an unhandled error).
    /// A pool error's own SQLSTATE is the pool's to tell.
    pub fn sqlstate(&self) -> Option<&str> {
        Some(match self {
            LoginError::Io(_)
            | LoginError::Gone
            | LoginError::Startup(StartupError::BadLength(_)) => return None,
            LoginError::Startup(StartupError::UnsupportedVersion { .. }) => {
                sqlstate::FEATURE_NOT_SUPPORTED
            }
            LoginError::Startup(_)
            | LoginError::Protocol(_)
            | LoginError::Frame(_)
            | LoginError::NotPassword(_)
            | LoginError::PasswordMessage(_)
            | LoginError::Scram(_) => sqlstate::PROTOCOL_VIOLATION,
            LoginError::Fatal { code, .. } => code,
            LoginError::Pool(e) => e.sqlstate(),
        })
    }

    /// Refused for want of room (53300): too many clients, or too many of this user's.
    pub fn is_refusal(&self) -> bool {
        matches!(self, LoginError::Fatal { code, .. } if *code == sqlstate::TOO_MANY_CONNECTIONS)
    }
}
