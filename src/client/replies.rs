//! Server → client: each whole message the server sent is forwarded or swallowed by the
//! expected-reply queue, the pooler's own answers are put in their place, and the server goes
//! back to the pool at the boundary the pool mode sets.

use std::time::Instant;

use bytes::{Buf, Bytes, BytesMut};

use super::direct::Direct;
use super::error::{error_fields, ClientError};
use super::pass::Pass;
use super::session::Session;
use super::settle::settle;
use crate::config::PoolMode;
use crate::prepared;
use crate::protocol::backend as b;
use crate::protocol::{frame, frontend, sqlstate};
use crate::server::{Owed, Step};

/// The largest message accepted from a server (PostgreSQL's own limit is 1 GB).
const SERVER_MAX_MESSAGE: usize = 1 << 30;
/// The largest server message the pooler holds whole to read it (ReadyForQuery,
/// ParameterStatus, CommandComplete, an ErrorResponse it may rewrite). Anything else larger
/// than `client.buffer_size` is passed on in pieces.
const SERVER_HOLD_MAX: usize = 1 << 20;

fn lost(e: impl std::fmt::Display) -> ClientError {
    ClientError::ServerLost(e.to_string())
}

/// What an ErrorResponse says about its server: FATAL or PANIC (it closes after it), or 25006
/// (a write refused as read-only: maybe the host was demoted). One parse for both.
#[derive(Default)]
struct ErrorSigns {
    fatal: bool,
    read_only: bool,
}

fn error_signs(body: &[u8]) -> ErrorSigns {
    match b::parse_error(body) {
        Ok(e) => ErrorSigns {
            fatal: e.severity == "FATAL" || e.severity == "PANIC",
            read_only: e.code == sqlstate::READ_ONLY_SQL_TRANSACTION,
        },
        Err(_) => ErrorSigns::default(),
    }
}

/// Whether a server message must be held whole: the pooler reads its body. An ErrorResponse
/// larger than [`SERVER_HOLD_MAX`] is passed on unread instead (its tag is all the reply
/// queue needs; it is then neither renamed back nor retried).
fn must_hold(tag: u8, total: usize) -> bool {
    match tag {
        b::ERROR_RESPONSE_TAG => total <= SERVER_HOLD_MAX,
        b::PARAMETER_STATUS_TAG | b::READY_FOR_QUERY_TAG | b::COMMAND_COMPLETE_TAG => true,
        _ => false,
    }
}

impl Session<'_> {
    /// Handles what the server sent, then writes, releases and answers.
    pub(super) async fn on_server(&mut self) -> Result<(), ClientError> {
        self.drain_server()?;
        self.finish_round().await
    }

    /// The end of every round: queued bytes to the server (reading it meanwhile), the server
    /// back to the pool at the mode's boundary, queued bytes to the client.
    pub(super) async fn finish_round(&mut self) -> Result<(), ClientError> {
        self.flush_server().await?;
        self.maybe_release();
        self.ready_at = None;
        if self.tracking {
            self.count_kept();
        }
        self.flush_client().await?;
        if self.server.is_none() {
            self.shrink_idle();
        }
        Ok(())
    }

    fn count_query(&mut self) {
        let m = &self.shared.metrics.clients;
        m.queries.inc();
        if let Some(since) = self.request_since.take() {
            let now = Instant::now();
            let took = now.saturating_duration_since(since).as_secs_f64();
            m.query_seconds.observe(took);
            // One subtraction for both histograms when the query began the transaction.
            let began = self.held_since == Some(since);
            self.ready_at = Some((now, began.then_some(took)));
        }
    }

    fn maybe_release(&mut self) {
        if self.release_ready() {
            self.release();
        }
    }

    /// The transaction is over and the server owes nothing more: it goes back at this round's end.
    fn release_ready(&self) -> bool {
        let idle = self.server.as_ref().is_some_and(|s| s.replies.is_empty());
        self.release_due
            && idle
            && self.status == b::TX_IDLE
            && self.mode != PoolMode::Session
            && self.cpass.is_idle()
    }

    /// Handles every whole message buffered from the server: forwarded messages and the
    /// pooler's own answers go to the client in order. A leading run of messages forwarded
    /// unchanged is written to a plain client straight from the server's buffer, without
    /// waiting, unless it ends the transaction; only what the socket does not take is copied
    /// to the client buffer.
    pub(super) fn drain_server(&mut self) -> Result<(), ClientError> {
        const HELD: &str = "server messages are handled only while a server is held";
        // Messages are handled in place and the buffer advanced once: no split per message.
        // The buffer is lent out meanwhile (the handling needs the session mutably) and is
        // put back on every path, so `finish` sees what is left of it.
        let mut rbuf = std::mem::take(&mut self.server.as_mut().expect(HELD).rbuf);
        let mut direct = Direct {
            allowed: self.cout.is_empty() && !self.client.is_tls(),
            run: None,
        };
        let mut done = 0;
        let res = self.drain_messages(&rbuf, &mut done, &mut direct);
        if let Some(run) = direct.run.take() {
            let bytes = &rbuf[run];
            // After an error the run is only queued: the error path flushes it first. A run
            // that ends the transaction is queued too and written after the release, so a
            // client holding its reply finds the transaction counted and the server back in
            // the pool (the admin server scrapes from another thread).
            let n = if res.is_ok() && !self.release_ready() {
                self.client.try_write_plain(bytes)
            } else {
                0
            };
            if n > 0 {
                self.shared.metrics.clients.bytes_out.inc_by(n as u64);
            }
            self.cout.extend_from_slice(&bytes[n..]);
        }
        rbuf.advance(done);
        self.server.as_mut().expect(HELD).rbuf = rbuf;
        res
    }

    /// Handles the messages of `buf` from `done` on, advancing `done` past each: whole ones,
    /// and the first bytes of one too large to hold, whose rest is passed on (or dropped) as
    /// it arrives.
    fn drain_messages(
        &mut self,
        buf: &[u8],
        done: &mut usize,
        direct: &mut Direct,
    ) -> Result<(), ClientError> {
        loop {
            if !self.spass.is_idle() {
                let n = self.spass.take(buf.len() - *done);
                if n == 0 {
                    return Ok(());
                }
                if self.spass.keeps() {
                    direct.pass_on(&mut self.cout, buf, *done, *done + n);
                }
                *done += n;
                continue;
            }
            let srv = self
                .server
                .as_mut()
                .expect("server messages are handled only while a server is held");
            let rest = &buf[*done..];
            let Some((tag, len)) = frame::peek_header(rest) else {
                return Ok(());
            };
            let total = frame::checked_total(len, SERVER_MAX_MESSAGE).map_err(lost)?;
            let whole = rest.len() >= total;
            if !whole {
                if total > self.buffer && !must_hold(tag, total) {
                    self.server_head(tag, total, buf, done, direct)?;
                    continue;
                }
                if total > SERVER_HOLD_MAX {
                    return Err(ClientError::ServerLost(format!(
                        "server sent a message of type {tag} of {total} bytes, more than the \
                         {SERVER_HOLD_MAX} the pooler holds to read it"
                    )));
                }
                return Ok(());
            }
            if tag == b::DATA_ROW_TAG && srv.replies.passes_rows() {
                // Rows are the bulk of a result and need no bookkeeping: the whole run of
                // them is copied at once.
                let mut end = total;
                while rest.get(end) == Some(&b::DATA_ROW_TAG) {
                    match frame::complete_len(&rest[end..], SERVER_MAX_MESSAGE) {
                        Ok(Some(t)) => end += t,
                        _ => break,
                    }
                }
                direct.pass_on(&mut self.cout, buf, *done, *done + end);
                *done += end;
                continue;
            }
            let msg = &rest[..total];
            let at = *done;
            *done += total;
            let (step, substitute) = self.classify(tag, Some(msg), buf, direct)?;
            if step.forward {
                match substitute {
                    Some(own) => {
                        direct.spill(&mut self.cout, buf);
                        self.cout.extend_from_slice(&own);
                    }
                    None if tag == b::ERROR_RESPONSE_TAG && self.tracking => {
                        match super::tracking::unrename_error(msg, self.id) {
                            Some(m) => {
                                direct.spill(&mut self.cout, buf);
                                self.cout.extend_from_slice(&m);
                            }
                            None => direct.pass_on(&mut self.cout, buf, at, at + total),
                        }
                    }
                    None => direct.pass_on(&mut self.cout, buf, at, at + total),
                }
                if step.ready {
                    self.count_query();
                }
            }
            self.after_step(&step, buf, direct);
        }
    }

    /// The first bytes of a server message too large to hold (never one the pooler reads):
    /// classified by its tag, the bytes there are passed on or dropped, and the rest follows
    /// as it arrives.
    #[cold]
    fn server_head(
        &mut self,
        tag: u8,
        total: usize,
        buf: &[u8],
        done: &mut usize,
        direct: &mut Direct,
    ) -> Result<(), ClientError> {
        let at = *done;
        let seen = buf.len() - at;
        *done = buf.len();
        let (step, substitute) = self.classify(tag, None, buf, direct)?;
        let keep = step.forward && substitute.is_none();
        if keep {
            direct.pass_on(&mut self.cout, buf, at, at + seen);
        } else if let Some(own) = substitute.filter(|_| step.forward) {
            direct.spill(&mut self.cout, buf);
            self.cout.extend_from_slice(&own);
        }
        self.spass = Pass::rest(total, seen, keep);
        self.after_step(&step, buf, direct);
        Ok(())
    }

    /// What one server message means for the reply queue and the session: the step, and the
    /// pooler's own error to send in its place. `msg` is the whole message, or `None` for
    /// one passed on in pieces (never one whose body the pooler reads).
    #[inline(always)]
    fn classify(
        &mut self,
        tag: u8,
        msg: Option<&[u8]>,
        buf: &[u8],
        direct: &mut Direct,
    ) -> Result<(Step, Option<Bytes>), ClientError> {
        let srv = self
            .server
            .as_mut()
            .expect("server messages are handled only while a server is held");
        let body = || msg.map_or(&[][..], |m| &m[frame::HEADER_LEN..]);
        if let Some(m) = msg.filter(|_| tag == b::ERROR_RESPONSE_TAG) {
            let signs = error_signs(&m[frame::HEADER_LEN..]);
            self.server_fatal |= signs.fatal;
            // Checked at release, where the pool knows whether it needs writes.
            srv.read_only_error |= signs.read_only;
        }
        let mut step = if tag == b::ERROR_RESPONSE_TAG {
            let held = match srv.replies.front() {
                Some(Owed::TrackedBind { id }) => self.retry.hold(*id, msg),
                _ => false,
            };
            let mut step = srv.replies.on_error(&mut self.skipped);
            step.forward &= !held;
            if srv.replies.skips_to_sync() {
                // The server now ignores the client's messages up to its Sync, so the pooler
                // drops them as well, answering none; the batch cannot be sent again whole.
                self.skipping = true;
                self.retry.disable();
            }
            step
        } else {
            srv.replies.on_message(tag)
        };
        match tag {
            b::PARAMETER_STATUS_TAG => {
                let (k, v) = b::parse_parameter_status(body()).map_err(lost)?;
                srv.set_param(k, v);
                // The client changed it (SET): it is the client's value now.
                self.params.set(k, v);
            }
            b::READY_FOR_QUERY_TAG => {
                self.status = b::parse_ready_for_query(body()).map_err(lost)?;
                if let Some(t) = self.timeouts.as_deref_mut() {
                    t.quiet_since = Instant::now();
                }
            }
            b::COMMAND_COMPLETE_TAG if self.tracking && prepared::drops_all_statements(body()) => {
                // The server ran DEALLOCATE ALL / DISCARD ALL: what existed before the
                // command is gone, for this client and on this server.
                let marks = match (&step.completed, srv.replies.front()) {
                    (
                        Some(Owed::Marked {
                            client_seq,
                            server_seq,
                            ..
                        }),
                        _,
                    )
                    | (
                        None,
                        Some(Owed::Marked {
                            client_seq,
                            server_seq,
                            ..
                        }),
                    ) => Some((*client_seq, *server_seq)),
                    _ => None,
                };
                let (client_seq, server_seq) =
                    marks.unwrap_or((u64::MAX, srv.statements.next_seq()));
                self.statements.drop_older_than(client_seq);
                srv.statements.drop_older_than(server_seq);
            }
            _ => {}
        }
        let failed = tag == b::ERROR_RESPONSE_TAG;
        let mut substitute = None;
        if let Some(done) = step.completed.take() {
            if let Owed::Substitute { error, .. } = &done {
                substitute = Some(error.clone());
            }
            settle(&mut self.statements, &mut srv.statements, done, failed);
        }
        for o in self.skipped.drain(..) {
            settle(&mut self.statements, &mut srv.statements, o, true);
        }
        let drained = srv.replies.is_empty();
        if step.ready && drained && self.retry_holds_error() {
            // The held error goes out before this ReadyForQuery: whatever was forwarded so
            // far must precede it.
            direct.spill(&mut self.cout, buf);
        }
        if step.ready && drained && self.settle_retry(self.status) {
            // The batch is being sent again: this ReadyForQuery is not the client's.
            step.forward = false;
            step.ready = false;
        }
        if step.ready
            && step.forward
            && self.mode == PoolMode::Statement
            && self.status != b::TX_IDLE
        {
            step.forward = false;
            self.refuse_transaction();
        }
        Ok((step, substitute))
    }

    /// After a server message: the pooler's answers that reached the front go to the client,
    /// and a ReadyForQuery with nothing left owed makes the server due for release.
    #[inline(always)]
    fn after_step(&mut self, step: &Step, buf: &[u8], direct: &mut Direct) {
        let srv = self
            .server
            .as_mut()
            .expect("server messages are handled only while a server is held");
        while let Some(answer) = srv.replies.pop_answer() {
            direct.spill(&mut self.cout, buf);
            if let Owed::Synthetic(m) = answer {
                self.cout.extend_from_slice(&m);
            }
        }
        if step.ready && srv.replies.is_empty() {
            self.release_due = true;
            self.batch_clean = true;
        }
    }

    /// Statement mode: a statement left a transaction open. Roll it back and tell the client.
    fn refuse_transaction(&mut self) {
        frontend::query(&mut self.sout, "ROLLBACK");
        self.owe(Owed::Internal);
        let mut m = BytesMut::new();
        b::error_response(
            &mut m,
            &error_fields(
                sqlstate::FEATURE_NOT_SUPPORTED,
                "transaction blocks are not allowed in statement pooling mode".into(),
            ),
        );
        b::ready_for_query(&mut m, b::TX_IDLE);
        self.owe(Owed::Synthetic(Bytes::from(m)));
        // The rest of the block, already sent by the client, must not run outside it.
        self.refused_bytes = self.cbuf.len();
    }
}
