//! Prepared-statement tracking in the session (`--track-prepared`, transaction and statement
//! modes): named statements are renamed `p<c>_<name>` on servers, replayed where missing, and
//! unknown or duplicate names are answered by the pooler (26000 / 42P05).

use bytes::{BufMut, Bytes, BytesMut};

use super::error::{error_fields, ClientError};
use super::session::{owe_on, Session};
use crate::prepared::{self, Kept, Presence};
use crate::protocol::frame::{begin, finish, HEADER_LEN};
use crate::protocol::frontend as f;
use crate::protocol::{backend, sqlstate, Cursor, ParseError};
use crate::server::{Owed, Request};

fn malformed(e: ParseError) -> ClientError {
    ClientError::Protocol(format!("malformed message: {e}"))
}

impl Session<'_> {
    /// A tracked message needs a server unless the pooler answers it alone.
    pub(super) fn tracked_needs_server(&self, tag: u8, msg: &[u8]) -> Result<bool, ClientError> {
        Ok(match tag {
            f::PARSE_TAG => {
                let span = f::parse_statement(msg).map_err(malformed)?;
                // A taken name (42P05) or one name too many (53400) is answered here.
                span.len == 0
                    || (self.statements.get(span.get(msg)).is_none()
                        && self.statements.len() < self.max_client_prepared)
            }
            f::BIND_TAG => {
                let span = f::bind_statement(msg).map_err(malformed)?;
                span.len == 0 || self.statements.get(span.get(msg)).is_some()
            }
            f::DESCRIBE_TAG => match f::describe_or_close_target(msg).map_err(malformed)? {
                (b'S', span) if span.len > 0 => self.statements.get(span.get(msg)).is_some(),
                _ => true,
            },
            f::CLOSE_TAG => !matches!(
                f::describe_or_close_target(msg).map_err(malformed)?,
                (b'S', span) if span.len > 0
            ),
            _ => true,
        })
    }

    /// A tracked message: `msg` is all of it, or (a Bind passed on in pieces) its first
    /// bytes, which hold both names; `total` is its whole size.
    /// Returns whether the message went to the server (a refused one did not).
    pub(super) fn on_tracked(
        &mut self,
        tag: u8,
        msg: &[u8],
        total: usize,
    ) -> Result<bool, ClientError> {
        let whole = msg.len();
        Ok(match tag {
            f::PARSE_TAG => {
                self.tracked_parse(msg)?;
                true
            }
            f::BIND_TAG => {
                let span = f::bind_statement(msg).map_err(malformed)?;
                self.tracked_use(msg, span, Request::Bind, total)
            }
            f::DESCRIBE_TAG => match f::describe_or_close_target(msg).map_err(malformed)? {
                (b'S', span) if span.len > 0 => {
                    self.tracked_use(msg, span, Request::Describe, whole)
                }
                _ => {
                    self.forward(msg, Request::Describe, whole);
                    true
                }
            },
            f::CLOSE_TAG => match f::describe_or_close_target(msg).map_err(malformed)? {
                (b'S', span) if span.len > 0 => self.tracked_close(msg, span),
                _ => {
                    self.forward(msg, Request::Close, whole);
                    true
                }
            },
            _ => false,
        })
    }

    /// Close S: forget the statement. With nothing owed, the pooler answers CloseComplete
    /// itself and the server copies stay until evicted. After replies still owed, an earlier
    /// error may make the server skip this point of the batch, and then the statement must
    /// still exist (a later Parse of the name gets 42P05, a Bind runs it): the Close goes to
    /// the server, renamed, where it runs or is skipped exactly as it would without a pooler.
    /// Returns whether the message went to the server.
    fn tracked_close(&mut self, msg: &[u8], span: f::NameSpan) -> bool {
        let name = span.get(msg);
        let removed = self.statements.remove(name);
        let pending = self.server.as_ref().is_some_and(|s| !s.replies.is_empty());
        let Some(kept) = removed.filter(|_| pending) else {
            let mut reply = BytesMut::new();
            backend::empty(&mut reply, backend::CLOSE_COMPLETE_TAG);
            self.answer(reply.freeze());
            return false;
        };
        // The copy the Close would leave on a skip must be there (a failed block refuses the
        // replay, but it also refuses any later Parse of the name: 25P02 either way).
        if self.status != backend::TX_FAILED {
            self.replay_if_missing(&kept, name);
        }
        let start = self.sout.len();
        f::write_renamed(&mut self.sout, msg, span, &kept.server_name);
        self.retry.record_close(&self.sout[start..], name, &kept);
        let srv = self
            .server
            .as_mut()
            .expect("pending replies mean a held server");
        let had = srv.statements.holds(&kept.server_name);
        srv.statements.remove(&kept.server_name);
        self.owe(Owed::ClientClose {
            name: Bytes::copy_from_slice(name),
            kept,
            had,
        });
        true
    }

    fn tracked_parse(&mut self, msg: &[u8]) -> Result<(), ClientError> {
        let span = f::parse_statement(msg).map_err(malformed)?;
        if span.len == 0 {
            self.forward(msg, Request::Parse, msg.len());
            return Ok(());
        }
        let name = Bytes::copy_from_slice(span.get(msg));
        let mut close_stale = true;
        let existing = self.statements.get(&name);
        if existing.is_none() && self.statements.len() >= self.max_client_prepared {
            let text = format!(
                "too many prepared statements: the pooler keeps at most {} per client \
                 (pool.max_client_prepared_statements); close some before preparing \"{}\"",
                self.max_client_prepared,
                String::from_utf8_lossy(&name)
            );
            self.refuse(sqlstate::CONFIGURATION_LIMIT_EXCEEDED, text);
            return Ok(());
        }
        let mut same_name = None;
        if existing.is_none() {
            // A Close of this name still owed may be skipped, and then the name is taken: the
            // server decides, under the closed statement's name (a long name's `P` form
            // differs per statement).
            if let Some(closed) = self
                .server
                .as_ref()
                .and_then(|s| s.replies.pending_close(&name))
            {
                same_name = Some(closed.server_name.clone());
            }
        }
        if let Some(existing) = existing.cloned() {
            // Let the server decide, under the name the statement has there, as it would
            // without a pooler, when the name may not be taken by the time this Parse runs
            // (its Parse still in flight in an earlier batch may fail) or PostgreSQL would
            // refuse the Parse first (the transaction block has failed, or an earlier batch
            // still in flight may open a block and fail it: 25P02). Otherwise the name is
            // taken, and the pooler says so.
            let status = self.status;
            let undecided = self.server.as_ref().is_some_and(|s| {
                status == backend::TX_FAILED
                    || s.replies.owes_ready()
                    || (!existing.is_confirmed()
                        && s.replies.parse_pending_before_sync(existing.id))
            });
            if !undecided {
                let text = format!(
                    "prepared statement \"{}\" already exists",
                    String::from_utf8_lossy(&name)
                );
                self.refuse(sqlstate::DUPLICATE_PREPARED_STATEMENT, text);
                return Ok(());
            }
            // The server must hold the statement to find the name taken.
            self.replay_if_missing(&existing, &name);
            close_stale = false;
            same_name = Some(existing.server_name.clone());
        }
        let client = self.id;
        let kept = self.statements.insert(name.clone(), |id| {
            let server_name = same_name.unwrap_or_else(|| prepared::server_name(client, &name, id));
            let mut renamed = BytesMut::with_capacity(msg.len() + server_name.len());
            f::write_renamed(&mut renamed, msg, span, &server_name);
            (server_name, renamed.freeze())
        });
        self.retry.disable();
        let owed = Owed::TrackedParse {
            name: name.clone(),
            server_name: kept.server_name.clone(),
            id: kept.id,
        };
        self.send_parse(&kept, &name, owed, close_stale);
        Ok(())
    }

    /// Bind or Describe of a named statement: 26000 if the client has no such statement,
    /// otherwise replay it where missing and forward the message renamed. `msg` may be the
    /// first bytes of a Bind of `total` bytes passed on in pieces.
    /// Returns whether the message went to the server (not when refused).
    fn tracked_use(&mut self, msg: &[u8], span: f::NameSpan, req: Request, total: usize) -> bool {
        if span.len == 0 {
            self.forward(msg, req, total);
            return true;
        }
        let name = span.get(msg);
        let Some(kept) = self.statements.get(name).cloned() else {
            let text = format!(
                "prepared statement \"{}\" does not exist",
                String::from_utf8_lossy(name)
            );
            self.refuse(sqlstate::INVALID_SQL_STATEMENT_NAME, text);
            return false;
        };
        self.replay_if_missing(&kept, name);
        let start = self.sout.len();
        if msg.len() < total {
            f::write_renamed_head(&mut self.sout, msg, span, &kept.server_name, total);
        } else {
            f::write_renamed(&mut self.sout, msg, span, &kept.server_name);
        }
        if req == Request::Bind {
            let clean = self.batch_clean;
            self.batch_clean = false;
            self.owe(Owed::TrackedBind { id: kept.id });
            if msg.len() < total {
                // Not kept whole, so the batch could not be sent again.
                self.retry.disable();
            } else {
                self.retry.start(&kept, &self.sout[start..], clean);
            }
        } else {
            self.owe(Owed::Client(req));
            let sent = self.sout.split_off(start);
            self.retry.record(&sent, Some(req));
            self.sout.unsplit(sent);
        }
        true
    }

    /// Sends the held server `kept`'s Parse first if it does not hold that statement (its
    /// ParseComplete swallowed).
    fn replay_if_missing(&mut self, kept: &Kept, client_name: &[u8]) {
        let srv = self
            .server
            .as_mut()
            .expect("a statement is replayed only on a held server");
        if srv.statements.presence(&kept.server_name, kept.id) != Presence::Present {
            let replay = Owed::Replay {
                server_name: kept.server_name.clone(),
                id: kept.id,
            };
            self.shared.metrics.prepared.replays.inc();
            self.send_parse(kept, client_name, replay, true);
        }
    }

    /// The pooler refuses a message (unknown or duplicate name). Holding no server, it
    /// answers itself and skips to Sync. Holding one, it sends the server a message that fails
    /// and puts its own error in place of the server's, so a transaction fails as it would.
    fn refuse(&mut self, code: &str, text: String) {
        if self.server.is_none() {
            self.pooler_error(code, text);
            return;
        }
        self.shared.metrics.pooler_error(code);
        let mut error = BytesMut::new();
        backend::error_response(&mut error, &error_fields(code, text));
        // A Bind of a name no client can have: `P` names are only numbered ones.
        let missing = format!("P{}_missing", self.id);
        let mut fail = BytesMut::new();
        let at = begin(&mut fail, f::BIND_TAG);
        fail.put_u8(0);
        fail.put_slice(missing.as_bytes());
        fail.put_u8(0);
        fail.put_slice(&[0, 0, 0, 0, 0, 0]);
        finish(&mut fail, at);
        self.sout.extend_from_slice(&fail);
        self.retry.disable();
        self.owe(Owed::Substitute {
            error: error.freeze(),
            req: Request::Bind,
        });
    }

    /// Sends a kept Parse to the held server: closes a stale copy of the same name (unless
    /// told not to) and the least recently used statements beyond the bound first (their
    /// replies swallowed).
    pub(super) fn send_parse(
        &mut self,
        kept: &Kept,
        client_name: &[u8],
        owed: Owed,
        close_stale: bool,
    ) {
        let srv = self
            .server
            .as_mut()
            .expect("a tracked Parse is sent only while a server is held");
        if close_stale {
            if let Some(old) = srv.statements.holds(&kept.server_name) {
                if old != kept.id {
                    f::close_statement(&mut self.sout, &kept.server_name);
                    srv.statements.remove(&kept.server_name);
                    let close = Owed::InjectedClose {
                        server_name: kept.server_name.clone(),
                        id: old,
                    };
                    owe_on(srv, &mut self.statements, close);
                }
            }
        }
        while srv.statements.len() >= self.max_prepared {
            let Some((victim, id)) = srv.statements.lru_victim(&kept.server_name) else {
                break;
            };
            f::close_statement(&mut self.sout, &victim);
            self.shared.metrics.prepared.evictions.inc();
            srv.statements.remove(&victim);
            let close = Owed::InjectedClose {
                server_name: victim.clone(),
                id,
            };
            owe_on(srv, &mut self.statements, close);
        }
        self.sout.extend_from_slice(&kept.parse);
        srv.statements.add(kept.server_name.clone(), kept.id);
        if owe_on(srv, &mut self.statements, owed) {
            self.release_due = false;
        }
        self.shared
            .events
            .client_prepares(self.id, client_name, srv.id);
    }
}

/// A server ErrorResponse that names a renamed statement (`"p<c>_name"`) is rewritten to the
/// client's name, so clients never see the pooler's names. `None` when there is nothing to do.
pub(super) fn unrename_error(msg: &[u8], client: u64) -> Option<BytesMut> {
    let needle = format!("\"p{client}_");
    let body = msg.get(HEADER_LEN..)?;
    if !body.windows(needle.len()).any(|w| w == needle.as_bytes()) {
        return None;
    }
    let mut out = BytesMut::with_capacity(msg.len());
    let at = begin(&mut out, msg[0]);
    let mut c = Cursor::new(body);
    loop {
        let kind = c.u8().ok()?;
        out.put_u8(kind);
        if kind == 0 {
            break;
        }
        let value = String::from_utf8_lossy(c.cstr().ok()?).replace(&needle, "\"");
        out.put_slice(value.as_bytes());
        out.put_u8(0);
    }
    finish(&mut out, at);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_are_hidden_in_errors() {
        let mut m = BytesMut::new();
        backend::error_response(
            &mut m,
            &error_fields("42P05", "prepared statement \"p7_q\" already exists".into()),
        );
        let out = unrename_error(&m, 7).expect("rewritten");
        let fields = backend::parse_error(&out[HEADER_LEN..]).unwrap();
        assert_eq!(fields.message, "prepared statement \"q\" already exists");
        assert_eq!(fields.code, "42P05");
        assert!(unrename_error(&m, 8).is_none());
    }
}
