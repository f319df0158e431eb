//! Why the relay ends a session: the client broke the protocol (it gets 08P01), or the server
//! sent what the pooler cannot follow (the client gets 08006). Each knows its cause.

use thiserror::Error;

use crate::protocol::{FrameError, ParseError};

/// An error that ends the session.
#[derive(Debug, Error)]
pub enum RelayError {
    /// The client broke the protocol.
    #[error(transparent)]
    Client(#[from] ClientFault),
    /// The server broke the protocol, or sent more than the pooler holds.
    #[error("server connection lost: {0}")]
    Server(#[source] ServerFault),
}

/// How a client broke the protocol.
#[derive(Debug, Error)]
pub enum ClientFault {
    #[error("invalid message length {len} for message type {tag}")]
    Length { len: u32, tag: u8 },
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("invalid frontend message type {0}")]
    UnknownTag(u8),
    #[error("malformed message: {0}")]
    Malformed(#[from] ParseError),
}

/// How a server broke the protocol.
#[derive(Debug, Error)]
pub enum ServerFault {
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error(transparent)]
    Malformed(#[from] ParseError),
    #[error(
        "server sent a message of type {tag} of {total} bytes, more than the {max} the pooler \
         holds to read it"
    )]
    TooLarge { tag: u8, total: usize, max: usize },
    /// The clean-up of the session another client left failed (the server is closed).
    #[error("the pooler's clean-up of the server's session failed: {0}")]
    Cleanup(String),
    /// The server failed the pooler's idle check (`server.check_query`): not an error of the
    /// client's, which the driver gives another server.
    #[error("the server failed server.check_query: {0}")]
    CheckFailed(String),
    /// The reset of a server whose client left failed (the server is closed).
    #[error("the reset query failed: {0}")]
    ResetFailed(String),
    /// The server refused the client's settings when they were brought onto it: the client
    /// gets the server's own error, as a direct login with them would.
    #[error("{}", .0.message)]
    Rejected(Box<crate::protocol::backend::ErrorFields>),
}

impl From<ServerFault> for RelayError {
    fn from(f: ServerFault) -> Self {
        RelayError::Server(f)
    }
}

impl RelayError {
    /// A client fault (08P01 to the client) as opposed to a server one (08006).
    pub fn is_client(&self) -> bool {
        matches!(self, RelayError::Client(_))
    }
}
