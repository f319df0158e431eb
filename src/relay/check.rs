//! The idle check: `server.check_query` on a server idle past `server.check_delay`, sent
//! before anything else of the pooler's or the client's there (a plain simple query, so
//! neither the sync nor tracked statements see it). A server that died quietly (a frozen
//! backend, a dropped NAT entry) then costs the client another server, not an error: a
//! failed answer ends [`crate::relay::Relay::on_server`] with
//! [`crate::relay::ServerFault::CheckFailed`], no answer within `server.connect_timeout`
//! fires [`crate::relay::Kind::Check`], and the driver replaces the server while the
//! client's messages wait in the machine. A state of the prelude (`cleanup::Prelude`).

use std::time::Duration;

use super::cleanup::{Prelude, Then};
use super::error::ServerFault;
use super::Relay;
use crate::protocol::{backend, frontend};
use crate::server::{Owed, ServerState};

/// The idle check a server taken is due for ([`Relay::hold`]).
#[derive(Debug, Clone, Copy)]
pub struct Check<'a> {
    /// `server.check_query`.
    pub sql: &'a str,
    /// `server.connect_timeout`: how long its answer may take.
    pub within: Duration,
}

impl Relay {
    /// Sends the check to `srv`, taken for this client; `then` follows once it passes.
    #[cold]
    pub(super) fn begin_check(
        &mut self,
        srv: &mut ServerState,
        c: Check<'_>,
        then: Then,
    ) -> Prelude {
        frontend::query(&mut self.sout, c.sql);
        self.owe(srv, Owed::Internal);
        Prelude::Checking(then)
    }

    /// The check's ReadyForQuery said `status`: one that left a transaction open fails it
    /// (the server is closed, which ends that transaction).
    #[cold]
    pub(super) fn check_ready(&self, status: u8) -> Result<(), ServerFault> {
        if status == backend::TX_IDLE {
            return Ok(());
        }
        Err(ServerFault::CheckFailed(
            "it left a transaction open".into(),
        ))
    }
}
