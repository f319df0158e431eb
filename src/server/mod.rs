//! One connection to PostgreSQL: login, the parameters it reports, and its identity.

mod login;
pub mod replies;
mod role;

pub(crate) use login::read_frame;
pub use login::{login, ServerTarget};
pub use replies::{Owed, Replies, Request, Step};
pub use role::{ask_role, HostRecord, Role, Topology};

use std::net::SocketAddr;
use std::time::Instant;

use bytes::BytesMut;
use thiserror::Error;
use tokio::sync::OwnedSemaphorePermit;

use crate::params::{ClientParams, Params, SettingsKey};
use crate::prepared::ServerStatements;
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
    #[error("server requested a password but none is configured")]
    NoPassword,
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
    #[error("protocol error from server: {0}")]
    Protocol(String),
    #[error("TLS to the server failed: {0}")]
    Tls(String),
}

impl From<ParseError> for ServerError {
    fn from(e: ParseError) -> Self {
        ServerError::Protocol(e.to_string())
    }
}

impl From<FrameError> for ServerError {
    fn from(e: FrameError) -> Self {
        ServerError::Protocol(e.to_string())
    }
}

impl ServerError {
    /// The SQLSTATE a client sees for this failure.
    pub fn sqlstate(&self) -> &str {
        match self {
            ServerError::Rejected(f) if !f.code.is_empty() => &f.code,
            ServerError::NoPassword
            | ServerError::CleartextRefused
            | ServerError::NoServerSignature
            | ServerError::UnsupportedAuth(_) => sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
            ServerError::Connect { .. } | ServerError::Timeout | ServerError::Tls(_) => {
                sqlstate::SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION
            }
            _ => sqlstate::CONNECTION_FAILURE,
        }
    }

    /// Wrong credentials, an unknown database or a TLS refusal: retrying cannot help.
    pub fn is_config_error(&self) -> bool {
        matches!(
            self,
            ServerError::NoPassword
                | ServerError::CleartextRefused
                | ServerError::NoServerSignature
                | ServerError::UnsupportedAuth(_)
                | ServerError::Tls(_)
        ) || matches!(self, ServerError::Rejected(f)
                if f.code.starts_with("28") || f.code == sqlstate::INVALID_CATALOG_NAME)
    }
}

/// A server connection as pools and sessions hold it: boxed, so a session that holds none
/// stays small.
pub type Server = Box<ServerConn>;

/// A logged-in server connection.
#[derive(Debug)]
pub struct ServerConn {
    /// Number in order of successful login, from 1 (the `[POOL] server N` number).
    pub id: u64,
    pub stream: crate::net::ServerStream,
    /// Bytes read from the server and not yet handled.
    pub rbuf: BytesMut,
    /// Values the server last reported with ParameterStatus (written through
    /// [`ServerConn::set_param`], which keeps `in_sync` honest).
    params: Params,
    /// The client settings these parameters were last found to need no sync for (with
    /// nothing applied); cleared by any reported change.
    in_sync: Option<SettingsKey>,
    /// Settings a client sync applied that the server does not report.
    pub applied: Params,
    /// The server's BackendKeyData, for forwarding cancels.
    pub key: (i32, i32),
    pub addr: SocketAddr,
    pub created: Instant,
    pub last_used: Instant,
    /// When the server retires (lifetime plus jitter), if it does.
    pub expires: Option<Instant>,
    /// Prepared statements this connection holds for tracked clients.
    pub statements: ServerStatements,
    /// What this connection still owes, in request order.
    pub replies: Replies,
    /// A slot of the pool's capacity, freed whenever this connection is dropped.
    pub permit: Option<OwnedSemaphorePermit>,
    /// The host it is connected to (set once the login fits), which its reports keep current.
    pub host: Option<std::sync::Arc<HostRecord>>,
    /// The topology epoch at which it was last found to fit its pool: a release compares it
    /// with the current one and looks closer only when they differ.
    pub fit_epoch: u64,
    /// It answered a statement with 25006 (read-only transaction): before another client
    /// gets it, a pool that needs writes asks whether its host is still writable.
    pub read_only_error: bool,
}

impl ServerConn {
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// Records a ParameterStatus from the server. `in_hot_standby` turning off is a
    /// promotion (protocol docs, "ParameterStatus"; PostgreSQL 14+): the host's record learns
    /// it at once.
    pub fn set_param(&mut self, name: &str, value: &str) {
        if name == "in_hot_standby" {
            if let Some(h) = &self.host {
                h.reported_hot_standby(value == "on");
            }
        }
        self.params.set(name, value);
        self.in_sync = None;
    }

    /// Whether a client with `client`'s settings needs no sync here: an earlier check found
    /// none needed for the same settings and nothing reported since has changed. Saves
    /// comparing every setting on each checkout.
    pub fn in_sync_with(&self, client: &ClientParams) -> bool {
        self.applied.is_empty() && self.in_sync.as_ref().is_some_and(|k| client.has_key(k))
    }

    /// Remembers that a client with `client`'s settings needed no sync here.
    pub fn set_in_sync(&mut self, client: &ClientParams) {
        if self.applied.is_empty() {
            self.in_sync = Some(client.key());
        }
    }

    /// Gives back what a large message or a long pipeline grew (the read buffer, the reply
    /// queue) before the connection waits in the pool: idle servers stay small.
    #[inline]
    pub fn trim_buffers(&mut self) {
        if self.rbuf.capacity() > 64 << 10 && self.rbuf.is_empty() {
            self.rbuf = BytesMut::with_capacity(8192);
        }
        self.replies.trim();
    }

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
