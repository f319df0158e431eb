//! The end of a session: the held server goes back (reset first in session mode) or is
//! closed if it is not idle and in step.

use std::time::Duration;

use super::error::ClientError;
use super::session::Session;
use crate::pool::{CloseReason, Pool};
use crate::relay::{Ending, Leave};
use crate::server::{self, Server};

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
/// returns it.
async fn reset_and_checkin(pool: Pool, mut conn: Server, sql: String) {
    let used = pool.resetting();
    let outcome =
        tokio::time::timeout(Duration::from_secs(10), server::run_simple(&mut conn, &sql)).await;
    drop(used);
    match outcome {
        Ok(Ok(())) => {
            // DISCARD ALL (the default) drops every prepared statement and setting; another
            // reset query may leave what unseen work did, for the next client's clean-up.
            let unseen = conn.unseen;
            conn.reset_as_new();
            if is_discard_all(&sql) {
                conn.last_client = 0;
            } else {
                conn.unseen = unseen;
            }
            pool.checkin(conn)
        }
        _ => pool.discard(conn, CloseReason::ResetFailed),
    }
}

/// Whether a reset query is `DISCARD ALL` (any case, blanks and a final `;` aside): then the
/// session is as new.
fn is_discard_all(sql: &str) -> bool {
    let words: Vec<&str> = sql
        .trim()
        .trim_end_matches(';')
        .split_whitespace()
        .collect();
    words.len() == 2
        && words[0].eq_ignore_ascii_case("discard")
        && words[1].eq_ignore_ascii_case("all")
}

#[cfg(test)]
mod tests {
    #[test]
    fn discard_all_in_any_spelling() {
        for sql in ["DISCARD ALL", "discard all;", "  Discard\n All ; "] {
            assert!(super::is_discard_all(sql), "{sql}");
        }
        for sql in ["RESET ALL", "DISCARD ALL; SELECT 1", "DISCARD TEMP", ""] {
            assert!(!super::is_discard_all(sql), "{sql}");
        }
    }
}
