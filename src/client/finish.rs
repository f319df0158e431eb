//! The end of a session: the held server goes back (reset first in session mode) or is
//! closed if it is not idle and in step.

use std::time::Duration;

use bytes::BytesMut;

use super::session::Session;
use crate::config::PoolMode;
use crate::pool::{CloseReason, Pool};
use crate::protocol::{backend, frontend};
use crate::server::Server;

impl Session<'_> {
    /// Returns the held server if it is idle and in step; otherwise closes it. A session-mode
    /// server is reset first.
    pub(super) fn finish(&mut self, server_ok: bool) {
        self.shared
            .metrics
            .prepared
            .kept
            .sub(self.kept_counted as i64);
        self.kept_counted = 0;
        self.count_transaction();
        let Some(conn) = self.server.take() else {
            return;
        };
        self.shared.events.client_released_server(self.id, conn.id);
        self.cancel.clear();
        let clean = server_ok
            && conn.replies.is_empty()
            && self.status == backend::TX_IDLE
            && conn.rbuf.is_empty();
        let cfg = self.shared.config.load();
        let reset = &cfg.pool.reset_query;
        if !clean {
            let reason = if server_ok {
                CloseReason::ClientEnded
            } else {
                CloseReason::Broken
            };
            self.pool.discard(conn, reason);
        } else if self.mode == PoolMode::Session && !reset.is_empty() {
            tokio::spawn(reset_and_checkin(self.pool.clone(), conn, reset.clone()));
        } else {
            self.pool.checkin(conn);
        }
    }
}

/// Runs the reset query on a server whose session-mode client left, then returns it.
async fn reset_and_checkin(pool: Pool, mut conn: Server, sql: String) {
    let used = pool.resetting();
    let run = async {
        let mut b = BytesMut::new();
        frontend::query(&mut b, &sql);
        conn.stream.send(&b).await?;
        loop {
            let f = crate::server::read_frame(&mut conn)
                .await
                .map_err(std::io::Error::other)?;
            match f.tag {
                backend::PARAMETER_STATUS_TAG => {
                    if let Ok((k, v)) = backend::parse_parameter_status(f.body()) {
                        conn.set_param(k, v);
                    }
                }
                backend::ERROR_RESPONSE_TAG => {
                    return Err(std::io::Error::other("reset query failed"));
                }
                backend::READY_FOR_QUERY_TAG => {
                    return if f.body() == [backend::TX_IDLE] {
                        Ok(())
                    } else {
                        Err(std::io::Error::other("reset left a transaction open"))
                    }
                }
                _ => {}
            }
        }
    };
    let outcome = tokio::time::timeout(Duration::from_secs(10), run).await;
    drop(used);
    match outcome {
        Ok(Ok(())) => {
            // DISCARD ALL (the default) drops every prepared statement and setting.
            conn.statements.clear();
            conn.applied = Default::default();
            pool.checkin(conn)
        }
        _ => pool.discard(conn, CloseReason::ResetFailed),
    }
}
