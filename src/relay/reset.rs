//! The reset of a server whose session-mode (or pinned) client left (`pool.reset_query`,
//! `DISCARD ALL` by default), as a machine of its own: the client is gone, so its driver (a
//! task of the pool's, `client::finish`) only writes what this queues and reads what the
//! server answers into it; what the answer means, and what the server holds afterwards, is
//! decided here. The simulation resets its servers through the same machine.

use bytes::BytesMut;

use super::error::ServerFault;
use crate::protocol::{backend, frame, frontend};
use crate::server::ServerState;

/// The largest message the reset's answer may hold: a reset query answers with a command tag,
/// not with data.
const MAX_MESSAGE: usize = 1 << 20;

/// One reset under way on a server.
#[derive(Debug)]
pub struct Reset {
    /// The reset query is `DISCARD ALL`: afterwards the session is as new.
    discard_all: bool,
    /// The server's error, kept until its ReadyForQuery.
    failed: Option<String>,
}

impl Reset {
    /// Queues `sql` for the server into `out`.
    pub fn start(sql: &str, out: &mut BytesMut) -> Reset {
        frontend::query(out, sql);
        Reset {
            discard_all: is_discard_all(sql),
            failed: None,
        }
    }

    /// Handles the whole messages `srv` has read. `Ok(true)`: the reset is over and `srv`
    /// may serve another client; `Ok(false)`: more is to be read. An error, or a
    /// transaction left open, fails it (the server is then closed).
    pub fn on_server(&mut self, srv: &mut ServerState) -> Result<bool, ServerFault> {
        while let Some(f) = frame::cut(&mut srv.rbuf, MAX_MESSAGE)? {
            match f.tag {
                backend::PARAMETER_STATUS_TAG => {
                    let (k, v) = backend::parse_parameter_status(f.body())?;
                    srv.set_param(k, v);
                }
                backend::ERROR_RESPONSE_TAG => {
                    let e = backend::parse_error(f.body())?;
                    self.failed = Some(format!("{} ({})", e.message, e.code));
                }
                backend::READY_FOR_QUERY_TAG => {
                    let status = backend::parse_ready_for_query(f.body())?;
                    if let Some(why) = self.failed.take() {
                        return Err(ServerFault::ResetFailed(why));
                    }
                    if status != backend::TX_IDLE {
                        return Err(ServerFault::ResetFailed(
                            "it left a transaction open".into(),
                        ));
                    }
                    self.done(srv);
                    return Ok(true);
                }
                _ => {}
            }
        }
        Ok(false)
    }

    /// What `srv` holds after a reset that succeeded: `DISCARD ALL` drops every prepared
    /// statement and setting, and what unseen work left; another reset query may leave what
    /// unseen work did, for the next client's clean-up (`relay::cleanup`).
    fn done(&self, srv: &mut ServerState) {
        let unseen = srv.unseen;
        srv.reset_as_new();
        if self.discard_all {
            srv.last_client = 0;
        } else {
            srv.unseen = unseen;
        }
    }
}

/// Whether a reset query is `DISCARD ALL` (any case, blanks and a final `;` aside): then the
/// session is as new.
fn is_discard_all(sql: &str) -> bool {
    let mut words = sql.trim().trim_end_matches(';').split_whitespace();
    matches!(
        (words.next(), words.next(), words.next()),
        (Some(a), Some(b), None)
            if a.eq_ignore_ascii_case("discard") && b.eq_ignore_ascii_case("all")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::error_fields;
    use crate::session_state::detect::Unseen;

    #[test]
    fn discard_all_in_any_spelling() {
        for sql in ["DISCARD ALL", "discard all;", "  Discard\n All ; "] {
            assert!(is_discard_all(sql), "{sql}");
        }
        for sql in ["RESET ALL", "DISCARD ALL; SELECT 1", "DISCARD TEMP", ""] {
            assert!(!is_discard_all(sql), "{sql}");
        }
    }

    fn complete(rbuf: &mut BytesMut, tag: &str) {
        let body = format!("{tag}\0");
        rbuf.extend_from_slice(&[backend::COMMAND_COMPLETE_TAG]);
        rbuf.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        rbuf.extend_from_slice(body.as_bytes());
    }

    /// The answer read in two pieces: nothing decided before its ReadyForQuery; then the
    /// server is as new after DISCARD ALL, and keeps the mark of unseen work after another
    /// reset query.
    #[test]
    fn a_reset_ends_at_its_ready_and_says_what_the_server_holds() {
        for (sql, as_new) in [("DISCARD ALL", true), ("RESET ALL", false)] {
            let mut out = BytesMut::new();
            let mut reset = Reset::start(sql, &mut out);
            let mut sent = BytesMut::new();
            frontend::query(&mut sent, sql);
            assert_eq!(out, sent);
            let mut srv = ServerState::new();
            srv.last_client = 7;
            srv.mark_unseen(Unseen::Any);
            let mut answer = BytesMut::new();
            complete(&mut answer, sql.split(' ').next().unwrap());
            backend::ready_for_query(&mut answer, backend::TX_IDLE);
            let cut = answer.len() - 3;
            srv.rbuf.extend_from_slice(&answer[..cut]);
            assert!(!reset.on_server(&mut srv).unwrap(), "{sql}: not over yet");
            srv.rbuf.extend_from_slice(&answer[cut..]);
            assert!(reset.on_server(&mut srv).unwrap(), "{sql}: over");
            assert_eq!(srv.last_client == 0, as_new, "{sql}");
            assert_eq!(srv.unseen.is_none(), as_new, "{sql}");
        }
    }

    /// An error, or a transaction left open, fails the reset.
    #[test]
    fn a_failed_reset_says_why() {
        for (error, status, why) in [
            (true, backend::TX_IDLE, "no (42601)"),
            (false, b'T', "it left a transaction open"),
        ] {
            let mut out = BytesMut::new();
            let mut reset = Reset::start("BEGIN", &mut out);
            let mut srv = ServerState::new();
            if error {
                backend::error_response(&mut srv.rbuf, &error_fields("42601", "no".into()));
            }
            backend::ready_for_query(&mut srv.rbuf, status);
            match reset.on_server(&mut srv) {
                Err(ServerFault::ResetFailed(w)) => assert_eq!(w, why),
                other => panic!("{other:?}"),
            }
        }
    }
}
