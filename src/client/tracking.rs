//! Prepared-statement tracking in the session (`--track-prepared`, transaction and statement
//! modes): named statements are renamed `p<c>_<name>` on servers, replayed where missing, and
//! unknown or duplicate names are answered by the pooler (26000 / 42P05).

use bytes::{Bytes, BytesMut};

use super::error::ClientError;
use super::session::Session;
use crate::prepared::{self, Kept, Presence};
use crate::protocol::frontend as f;
use crate::protocol::{backend, sqlstate, ParseError};
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
                span.len == 0 || self.statements.get(span.get(msg)).is_none()
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

    pub(super) fn on_tracked(&mut self, tag: u8, msg: &BytesMut) -> Result<(), ClientError> {
        match tag {
            f::PARSE_TAG => self.tracked_parse(msg),
            f::BIND_TAG => {
                let span = f::bind_statement(msg).map_err(malformed)?;
                self.tracked_use(msg, span, Request::Bind);
                Ok(())
            }
            f::DESCRIBE_TAG => match f::describe_or_close_target(msg).map_err(malformed)? {
                (b'S', span) if span.len > 0 => {
                    self.tracked_use(msg, span, Request::Describe);
                    Ok(())
                }
                _ => {
                    self.forward(msg, Request::Describe);
                    Ok(())
                }
            },
            f::CLOSE_TAG => match f::describe_or_close_target(msg).map_err(malformed)? {
                (b'S', span) if span.len > 0 => {
                    // Forget it and answer ourselves; server copies stay until evicted.
                    self.statements.remove(span.get(msg));
                    let mut m = BytesMut::new();
                    backend::empty(&mut m, backend::CLOSE_COMPLETE_TAG);
                    self.answer(m.freeze());
                    Ok(())
                }
                _ => {
                    self.forward(msg, Request::Close);
                    Ok(())
                }
            },
            _ => Ok(()),
        }
    }

    /// SQL that drops every prepared statement (`DEALLOCATE ALL`, `DISCARD ALL`) clears the
    /// client's statements and the held server's record, in pipeline order: a Parse sent after
    /// it is kept.
    pub(super) fn note_sql(&mut self, sql: &[u8]) {
        if prepared::drops_all_statements(sql) {
            self.statements.clear();
            if let Some(srv) = self.server.as_mut() {
                srv.statements.clear();
            }
        }
    }

    fn tracked_parse(&mut self, msg: &BytesMut) -> Result<(), ClientError> {
        let span = f::parse_statement(msg).map_err(malformed)?;
        if span.len == 0 {
            let mut c = crate::protocol::Cursor::new(&msg[span.start..]);
            let _ = c.cstr();
            self.note_sql(c.cstr().unwrap_or_default());
            self.forward(msg, Request::Parse);
            return Ok(());
        }
        let name = Bytes::copy_from_slice(span.get(msg));
        if self.statements.get(&name).is_some() {
            self.pooler_error(
                sqlstate::DUPLICATE_PREPARED_STATEMENT,
                format!(
                    "prepared statement \"{}\" already exists",
                    String::from_utf8_lossy(&name)
                ),
            );
            return Ok(());
        }
        let server_name = prepared::server_name(self.id, &name);
        let mut renamed = BytesMut::with_capacity(msg.len() + server_name.len());
        f::write_renamed(&mut renamed, msg, span, &server_name);
        let kept = self
            .statements
            .insert(name.clone(), server_name.clone(), renamed.freeze());
        self.retry.disable();
        self.send_parse(
            &kept,
            &name,
            Owed::TrackedParse {
                name: name.clone(),
                server_name,
                id: kept.id,
            },
        );
        Ok(())
    }

    /// Bind or Describe of a named statement: 26000 if the client has no such statement,
    /// otherwise replay it where missing and forward the message renamed.
    fn tracked_use(&mut self, msg: &BytesMut, span: f::NameSpan, req: Request) {
        if span.len == 0 {
            self.forward(msg, req);
            return;
        }
        let name = span.get(msg);
        let Some(kept) = self.statements.get(name).cloned() else {
            let text = format!(
                "prepared statement \"{}\" does not exist",
                String::from_utf8_lossy(name)
            );
            self.pooler_error(sqlstate::INVALID_SQL_STATEMENT_NAME, text);
            return;
        };
        let srv = self
            .server
            .as_mut()
            .expect("a tracked Bind/Describe of a kept statement holds a server");
        if srv.statements.presence(&kept.server_name, kept.id) != Presence::Present {
            let name = Bytes::copy_from_slice(name);
            let replay = Owed::Replay {
                server_name: kept.server_name.clone(),
                id: kept.id,
            };
            self.send_parse(&kept, &name, replay);
        }
        let start = self.sout.len();
        f::write_renamed(&mut self.sout, msg, span, &kept.server_name);
        if req == Request::Bind {
            self.owe(Owed::TrackedBind { id: kept.id });
            self.retry.start(&kept, &self.sout[start..]);
        } else {
            self.owe(Owed::Client(req));
            self.retry.disable();
        }
    }

    /// Sends a kept Parse to the held server: closes a stale copy of the same name and the
    /// least recently used statements beyond the bound first (their replies swallowed).
    pub(super) fn send_parse(&mut self, kept: &Kept, client_name: &[u8], owed: Owed) {
        let srv = self
            .server
            .as_mut()
            .expect("a tracked Parse is sent only while a server is held");
        if srv.statements.presence(&kept.server_name, kept.id) == Presence::Stale {
            f::close_statement(&mut self.sout, &kept.server_name);
            srv.replies.push(Owed::InjectedClose);
            srv.statements.remove(&kept.server_name);
        }
        while srv.statements.len() >= self.max_prepared {
            let Some(victim) = srv.statements.lru_victim(&kept.server_name) else {
                break;
            };
            f::close_statement(&mut self.sout, &victim);
            srv.replies.push(Owed::InjectedClose);
            srv.statements.remove(&victim);
        }
        self.sout.extend_from_slice(&kept.parse);
        srv.replies.push(owed);
        srv.statements.add(kept.server_name.clone(), kept.id);
        self.shared
            .events
            .client_prepares(self.id, client_name, srv.id);
    }
}
