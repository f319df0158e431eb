//! The end of a session: the held server goes back (reset first in session mode, by a task
//! of its own driving `relay::Reset`) or is closed if it is not idle and in step.

use std::time::Duration;

use bytes::BytesMut;
use tokio::io::AsyncReadExt;

use super::error::ClientError;
use super::session::Session;
use crate::pool::{CloseReason, Pool};
use crate::relay::{Ending, Leave, Reset};
use crate::server::Server;

impl Session {
    /// Ends the session if the console has killed it (`KILL`, `KILL_CLIENT`).
    pub(super) fn check_killed(&self) -> Result<(), ClientError> {
        if self.cancel.is_killed() {
            return Err(ClientError::Killed);
        }
        Ok(())
    }

    /// Whether the session's end `res` means its server must be closed, and why. A killed
    /// session's running statement is cancelled first, or the backend would run it to its end.
    pub(super) fn must_close(&self, res: &Result<(), ClientError>) -> Option<CloseReason> {
        match res {
            Err(ClientError::ServerLost(_) | ClientError::ServerEnded) => Some(CloseReason::Broken),
            Err(ClientError::Killed) => {
                if self.server.as_ref().is_some_and(|s| !s.replies.is_empty()) {
                    self.cancel.cancel_now(self.shared.cancel_sender());
                }
                Some(CloseReason::Killed)
            }
            _ => None,
        }
    }

    /// Returns the held server if it is idle and in step; otherwise closes it (`close`: it
    /// must be closed, and why). A session-mode server is reset first. Returns how the
    /// machine saw the end.
    pub(super) fn finish(&mut self, close: Option<CloseReason>) -> Ending {
        let srv = self.server.as_ref().map(|s| &s.state);
        let mut wire = Session::wire(&mut self.client, &self.shared.cancels);
        let cfg = self.shared.config.load();
        let reset = &cfg.pool.reset_query;
        let ending = self.relay.finish(srv, &mut wire, !reset.is_empty());
        let Some(conn) = self.server.take() else {
            return ending;
        };
        self.cancel.clear();
        match (close, ending.leave) {
            (Some(why), _) => self.pool.discard(conn, why),
            (None, Some(Leave::Reset { pinned })) => {
                if pinned {
                    let m = &self.shared.metrics.clients.session_resets;
                    m.with_label_values(&["leave"]).inc();
                }
                tokio::spawn(reset_and_checkin(self.pool.clone(), conn, reset.clone()));
            }
            (None, Some(Leave::Return)) => self.pool.checkin(conn),
            (None, Some(Leave::Close) | None) => self.pool.discard(conn, CloseReason::ClientEnded),
        }
        ending
    }
}

/// Runs the reset query on a server whose session-mode (or pinned) client left, then
/// returns it; one whose reset fails, or takes more than 10 s, is closed.
async fn reset_and_checkin(pool: Pool, mut conn: Server, sql: String) {
    let used = pool.resetting();
    let outcome = tokio::time::timeout(Duration::from_secs(10), reset(&mut conn, &sql)).await;
    drop(used);
    match outcome {
        Ok(Ok(())) => pool.checkin(conn),
        Ok(Err(why)) => {
            tracing::debug!(server = conn.state.id, error = %why, "the reset query failed");
            pool.discard(conn, CloseReason::ResetFailed)
        }
        Err(_) => pool.discard(conn, CloseReason::ResetFailed),
    }
}

/// The reset's I/O: what [`Reset`] queues is written, what the server answers read into it
/// until it says the reset is over.
async fn reset(conn: &mut Server, sql: &str) -> Result<(), String> {
    let mut out = BytesMut::new();
    let mut reset = Reset::start(sql, &mut out);
    conn.stream.send(&out).await.map_err(|e| e.to_string())?;
    while !reset
        .on_server(&mut conn.state)
        .map_err(|e| e.to_string())?
    {
        let n = conn.stream.read_buf(&mut conn.state.rbuf).await;
        match n {
            Ok(0) => return Err("the server closed".into()),
            Ok(_) => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(())
}
