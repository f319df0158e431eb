//! One connection to PostgreSQL: login, the parameters it reports, and its identity.

mod credential;
mod login;
pub mod replies;
mod role;
pub mod scram;
mod state;

pub use credential::{LearnedSecrets, SecretCell, ServerSecret, TargetSecret};
pub(crate) use login::read_frame;
pub use login::{login, ServerTarget};
pub use replies::{Owed, Replies, Request, Step};
pub use role::{ask_role, HostRecord, Role, Topology};
pub use scram::ScramKeys;
pub use state::{Cleanup, CleanupReason, ServerState};

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use thiserror::Error;
use tokio::sync::OwnedSemaphorePermit;

use crate::protocol::backend::ErrorFields;
use crate::protocol::{sqlstate, FrameError, ParseError};

/// Why a server connection could not be made or used.
#[derive(Debug, Error)]
pub enum ServerError {
    #[error("could not connect to server {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("server login timed out")]
    Timeout,
    #[error("server closed the connection unexpectedly")]
    Closed,
    #[error("server I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("server rejected the login: {} ({})", .0.message, .0.code)]
    Rejected(ErrorFields),
    /// A query the pooler ran itself (reset, check) failed or left a transaction open.
    #[error("the pooler's own query failed: {0}")]
    QueryFailed(String),
    /// A query the pooler ran itself got no answer in time.
    #[error("the server did not answer the pooler's own query in time")]
    QueryTimeout,
    #[error("server requested a password but none is configured")]
    NoPassword,
    /// Passthrough, and the user has not proved a stored credential to the pooler yet.
    #[error(
        "no server credential for user \"{user}\": droid-pool logs in to PostgreSQL as this user \
         with what a SCRAM-SHA-256 login against a stored verifier proved, or with a stored \
         plaintext password, and has neither (log in once with SCRAM, store the password, or \
         set server.password)"
    )]
    NoPassthrough { user: String },
    #[error(
        "the server asked for a password, but droid-pool holds only SCRAM keys for user \
         \"{user}\": passthrough needs scram-sha-256 for this user in pg_hba.conf"
    )]
    PassthroughNeedsScram { user: String },
    #[error(
        "the server's SCRAM salt or iteration count differs from the verifier droid-pool holds \
         for this user: copy the current verifier from pg_authid"
    )]
    StaleVerifier,
    #[error(
        "the server asked for the password in cleartext over an unencrypted connection; refused \
         (use TLS to the server, or set server.allow_cleartext_password: true)"
    )]
    CleartextRefused,
    #[error(
        "the server accepted the SCRAM login without sending its signature, so it did not prove \
         it knows the password; refused"
    )]
    NoServerSignature,
    #[error("server requested unsupported authentication: {0}")]
    UnsupportedAuth(String),
    /// The server broke the protocol (a message of the pooler's own).
    #[error("protocol error from server: {0}")]
    Protocol(String),
    /// A message from the server that cannot be parsed.
    #[error("protocol error from server: {0}")]
    Parse(#[from] ParseError),
    /// A message from the server that cannot be cut.
    #[error("protocol error from server: {0}")]
    Frame(#[from] FrameError),
    /// A SCRAM message from the server that cannot be parsed (the pooler's own SCRAM keys).
    #[error("protocol error from server: SCRAM: {0}")]
    ScramMessage(#[source] ParseError),
    /// The SCRAM exchange with a configured password failed (postgres-protocol's client).
    #[error("protocol error from server: SCRAM: {0}")]
    Scram(#[source] std::io::Error),
    /// A query of the pooler's own could not be encoded.
    #[error("cannot encode a query of the pooler's own: {0}")]
    Encode(#[source] std::io::Error),
    /// A TLS setting refused before the handshake (the server name).
    #[error("TLS to the server failed: {0}")]
    Tls(String),
    /// The TLS handshake failed at the TLS level (a certificate, the protocol): retrying
    /// will not help, unlike a connection reset during it.
    #[error("TLS to the server failed: {0}")]
    TlsHandshake(#[source] std::io::Error),
}

impl ServerError {
    /// The SQLSTATE a client sees for this failure.
    pub fn sqlstate(&self) -> &str {
        match self {
            ServerError::Rejected(f) if !f.code.is_empty() => &f.code,
            ServerError::NoPassword
            | ServerError::NoPassthrough { .. }
            | ServerError::PassthroughNeedsScram { .. }
            | ServerError::CleartextRefused
            | ServerError::NoServerSignature
            | ServerError::UnsupportedAuth(_) => sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
            ServerError::StaleVerifier => sqlstate::INVALID_PASSWORD,
            ServerError::Connect { .. }
            | ServerError::Timeout
            | ServerError::Tls(_)
            | ServerError::TlsHandshake(_) => sqlstate::SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION,
            _ => sqlstate::CONNECTION_FAILURE,
        }
    }

    /// Wrong credentials, an unknown database or a TLS refusal: retrying cannot help.
    pub fn is_config_error(&self) -> bool {
        matches!(
            self,
            ServerError::NoPassword
                | ServerError::NoPassthrough { .. }
                | ServerError::PassthroughNeedsScram { .. }
                | ServerError::StaleVerifier
                | ServerError::CleartextRefused
                | ServerError::NoServerSignature
                | ServerError::UnsupportedAuth(_)
                | ServerError::Tls(_)
                | ServerError::TlsHandshake(_)
        ) || matches!(self, ServerError::Rejected(f) if sqlstate::is_login_refusal(&f.code))
    }
}

/// The pool generation a server was opened under. `RECONNECT` starts a new one, and a server
/// of an older one is closed when it is next released. Counted by reference, so a pool can
/// tell how many servers (and logins in flight) of older generations are still open, whatever
/// they are doing, and a dropped one is never counted twice.
#[derive(Debug, Clone, Default)]
pub struct Generation(Arc<u64>);

impl Generation {
    pub fn number(&self) -> u64 {
        *self.0
    }

    /// The generation after this one.
    pub fn next(&self) -> Generation {
        Generation(Arc::new(*self.0 + 1))
    }

    /// Holders of this generation other than `self`.
    pub fn others(&self) -> usize {
        Arc::strong_count(&self.0) - 1
    }
}

/// A server connection as pools and sessions hold it: boxed, so a session that holds none
/// stays small.
pub type Server = Box<ServerConn>;

/// A logged-in server connection: its stream and identity beside its protocol state, which
/// the relay works on while a client holds it (reads of that state go through `Deref`).
#[derive(Debug)]
pub struct ServerConn {
    pub stream: crate::net::ServerStream,
    pub state: ServerState,
    /// The server's BackendKeyData, for forwarding cancels.
    pub key: (i32, i32),
    pub addr: SocketAddr,
    pub created: Instant,
    pub last_used: Instant,
    /// When the server retires (lifetime plus jitter), if it does.
    pub expires: Option<Instant>,
    /// What the connection counts against, freed whenever it is dropped.
    pub slots: Slots,
    /// The pool generation it was opened under.
    pub generation: Generation,
    /// Set by the pool when it hands out a server idle past `server.check_delay`: the taker
    /// runs `server.check_query` on it before anything of a client's.
    pub check_due: bool,
    /// The topology epoch at which it was last found to fit its pool: a release compares it
    /// with the current one and looks closer only when they differ.
    pub fit_epoch: u64,
}

impl std::ops::Deref for ServerConn {
    type Target = ServerState;

    fn deref(&self) -> &ServerState {
        &self.state
    }
}

impl std::ops::DerefMut for ServerConn {
    fn deref_mut(&mut self) -> &mut ServerState {
        &mut self.state
    }
}

/// The slots a server connection occupies while it exists: its pool's (or the pool's
/// reserve's) and those of the limits pools share. Given back when dropped.
#[derive(Debug, Default)]
pub struct Slots {
    pub pool: Option<OwnedSemaphorePermit>,
    /// `pool` is a slot of the pool's reserve: the connection goes when nobody waits for it.
    pub reserve: bool,
    pub shared: Vec<OwnedSemaphorePermit>,
}

impl ServerConn {
    pub fn is_expired(&self, now: Instant) -> bool {
        self.expires.is_some_and(|e| now >= e)
    }

    /// An idle server must have nothing to say: EOF (PostgreSQL restarted, backend killed) or
    /// unexpected bytes (a FATAL before closing) mean it cannot be used. No await, and no
    /// system call unless the socket was reported readable.
    pub fn is_usable_idle(&self) -> bool {
        self.rbuf.is_empty() && self.stream.is_quiet()
    }
}
