//! Why a pool could not give a client a server, with the SQLSTATE the client sees.

use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;

use crate::config::TargetSessionAttrs;
use crate::protocol::sqlstate;
use crate::server::ServerError;

#[derive(Debug, Error, Clone)]
pub enum PoolError {
    #[error(
        "no server connection available in pool {pool} within {waited:?} (query_wait_timeout)"
    )]
    WaitTimeout {
        pool: String,
        waited: Duration,
        /// The pinned clients holding servers, for the error's DETAIL.
        pins: Option<String>,
    },
    #[error("too many clients already waiting for pool {pool} (max_waiting_clients {max})")]
    TooManyWaiting { pool: String, max: usize },
    /// The server refused or failed the login (boxed: errors stay small in every future).
    #[error("{}", .0.message)]
    Server(Box<ServerFailure>),
    #[error("pool {0} is closed")]
    Closed(String),
    /// The backend cannot be reached right now (a transient login failure): clients are told
    /// to come back, not that their connection broke (no class 08). The login's error is
    /// shared by every waiter it fails.
    #[error("database \"{database}\" is unavailable: {source}")]
    Unavailable {
        database: String,
        source: Arc<ServerError>,
    },
    #[error("database \"{database}\" is unavailable: circuit open")]
    CircuitOpen {
        database: String,
        retry_after: Duration,
    },
    /// Hosts answered, but none is of the role the pool needs (a standby where writes are).
    #[error(
        "database \"{database}\" is unavailable: no server fits target_session_attrs {} ({detail})",
        .want.as_str()
    )]
    NoHostFits {
        database: String,
        want: TargetSessionAttrs,
        detail: String,
    },
    /// Held through `failover.hold_timeout` and still no host fits.
    #[error(
        "database \"{database}\" is unavailable: no server fitted within {waited:?} \
         (failover.hold_timeout)"
    )]
    HoldExpired { database: String, waited: Duration },
}

/// What a failed server login tells the client.
#[derive(Debug, Clone)]
pub struct ServerFailure {
    pub code: String,
    pub message: String,
    pub detail: Option<String>,
}

impl PoolError {
    pub fn sqlstate(&self) -> &str {
        match self {
            PoolError::WaitTimeout { .. } => sqlstate::QUERY_CANCELED,
            PoolError::TooManyWaiting { .. } => sqlstate::TOO_MANY_CONNECTIONS,
            PoolError::Server(f) => &f.code,
            PoolError::Closed(_) => sqlstate::ADMIN_SHUTDOWN,
            PoolError::CircuitOpen { .. }
            | PoolError::Unavailable { .. }
            | PoolError::NoHostFits { .. }
            | PoolError::HoldExpired { .. } => sqlstate::CANNOT_CONNECT_NOW,
        }
    }

    /// A login refusal a direct connection would see at login (class 28, an unknown
    /// database): the client gets it as FATAL and is closed, as from PostgreSQL.
    pub fn is_fatal_for_client(&self) -> bool {
        matches!(self, PoolError::Server(f) if sqlstate::is_login_refusal(&f.code))
    }

    /// The `droidpool_clients_shed_total` reason this refusal counts under.
    pub fn shed_reason(&self) -> &'static str {
        match self {
            PoolError::WaitTimeout { .. } => "wait_timeout",
            PoolError::TooManyWaiting { .. } => "waiting_full",
            PoolError::Closed(_) => "shutting_down",
            PoolError::Server(_) | PoolError::Unavailable { .. } => "server_unavailable",
            PoolError::CircuitOpen { .. } => "circuit_open",
            PoolError::NoHostFits { .. } => "no_host_fits",
            PoolError::HoldExpired { .. } => "hold_expired",
        }
    }

    pub(super) fn from_server(e: &ServerError) -> Self {
        let (message, detail) = match e {
            ServerError::Rejected(f) => (f.message.clone(), f.detail.clone()),
            other => (other.to_string(), None),
        };
        PoolError::Server(Box::new(ServerFailure {
            code: e.sqlstate().to_owned(),
            message,
            detail,
        }))
    }
}
