//! The idle check: `server.check_query` on a server idle past `server.check_delay`, run before
//! a client's settings are synced onto it (a plain simple query on an idle server, so neither
//! the sync nor tracked statements see it). A server that died quietly (a frozen backend, a
//! dropped NAT entry) then costs the client another server, not an error.

use std::pin::pin;

use super::error::ClientError;
use super::session::Session;
use super::wait::reading_client;
use crate::pool::CloseReason;
use crate::server::{self, Server};

impl Session {
    /// Checks `conn` if the pool flagged it. `Ok(None)`: it failed the check and was closed.
    /// Bounded by `server.connect_timeout`; a client leaving meanwhile is noticed.
    pub(super) async fn checked(
        &mut self,
        mut conn: Server,
    ) -> Result<Option<Server>, ClientError> {
        if !conn.check_due {
            return Ok(Some(conn));
        }
        conn.check_due = false;
        let cfg = self.shared.config.load();
        // A reload may have turned the check off since the pool flagged the server.
        if cfg.server.check_query.is_empty() {
            return Ok(Some(conn));
        }
        let outcome = {
            let check = pin!(tokio::time::timeout(
                cfg.server.connect_timeout,
                server::run_simple(&mut conn, &cfg.server.check_query),
            ));
            reading_client(&mut self.client, &mut self.relay, check).await
        };
        let failure = match outcome {
            Ok(Ok(Ok(()))) => return Ok(Some(conn)),
            Ok(Ok(Err(e))) => e.to_string(),
            Ok(Err(_)) => "no answer within server.connect_timeout".to_owned(),
            Err(e) => {
                // Mid-check: not in a state another client may inherit.
                self.pool.discard(conn, CloseReason::ClientEnded);
                return Err(e);
            }
        };
        tracing::info!(
            server = conn.id,
            error = %failure,
            "an idle server failed server.check_query; closed, the client gets another"
        );
        self.pool.discard(conn, CloseReason::CheckFailed);
        Ok(None)
    }
}
