//! Server → client: each whole message the server sent is forwarded or swallowed by the
//! expected-reply queue, the pooler's own answers are put in their place, and a
//! ReadyForQuery with nothing left owed makes the server due for release.

use std::time::Instant;

use bytes::{Buf, Bytes, BytesMut};

use super::direct::Direct;
use super::error::ServerFault;
use super::pass::Pass;
use super::settle::settle;
use super::{error_fields, Io, Relay};
use crate::prepared;
use crate::protocol::backend as b;
use crate::protocol::{frame, frontend, sqlstate};
use crate::server::{Owed, ServerState, Step};

/// The largest message accepted from a server (PostgreSQL's own limit is 1 GB).
const SERVER_MAX_MESSAGE: usize = 1 << 30;
/// The largest server message the pooler holds whole to read it (ReadyForQuery,
/// ParameterStatus, CommandComplete, an ErrorResponse it may rewrite). Anything else larger
/// than `client.buffer_size` is passed on in pieces.
const SERVER_HOLD_MAX: usize = 1 << 20;

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

/// NotificationResponse `msg` with its sender's process id as the client knows it
/// ([`Io::notifier`]; `arrived`: when it was received, `None` for now), if that differs from
/// the server's.
pub(super) fn renumbered<I: Io>(msg: &[u8], arrived: Option<Instant>, io: &mut I) -> Option<Bytes> {
    let (pid, _, _) = crate::listen::parse_notification(&msg[frame::HEADER_LEN..])?;
    let to = io.notifier(pid, arrived);
    (to != pid).then(|| crate::listen::with_pid(msg, to))
}

impl Relay {
    /// Handles every whole message buffered from held server `srv` (its read buffer):
    /// forwarded messages and the pooler's own answers go to the client in order. A leading
    /// run of messages forwarded unchanged is offered to the client straight from the
    /// server's buffer ([`Io::offer_client`]), unless it ends the transaction; only what the
    /// client does not take is copied to the client buffer.
    pub fn on_server<I: Io>(
        &mut self,
        srv: &mut ServerState,
        io: &mut I,
    ) -> Result<(), ServerFault> {
        if self.batch.release_due && self.release_ready(srv) {
            // Bytes after the transaction's end: left for the pool to see (above).
            return Ok(());
        }
        // Messages are handled in place and the buffer advanced once: no split per message.
        // The buffer is lent out meanwhile and put back on every path.
        let mut rbuf = std::mem::take(&mut srv.rbuf);
        let mut direct = Direct {
            allowed: self.client.cout.is_empty() && io.direct(),
            run: None,
        };
        let mut done = 0;
        let res = self.drain_messages(srv, &rbuf, &mut done, &mut direct, io);
        if let Some(run) = direct.run.take() {
            let bytes = &rbuf[run];
            // After an error the run is only queued: the error path flushes it first. A run
            // that ends the transaction is queued too and written after the release, so a
            // client holding its reply finds the transaction counted and the server back in
            // the pool (the admin server scrapes from another thread).
            let n = if res.is_ok() && !self.release_ready(srv) {
                io.offer_client(bytes)
            } else {
                0
            };
            if n > 0 {
                self.metrics.clients.bytes_out.inc_by(n as u64);
            }
            self.client.cout.extend_from_slice(&bytes[n..]);
        }
        rbuf.advance(done);
        srv.rbuf = rbuf;
        res
    }

    fn count_query<I: Io>(&mut self, io: &mut I) {
        let m = &self.metrics.clients;
        m.queries.inc();
        if let Some(since) = self.clock.request_since.take() {
            let now = io.now();
            let took = now.saturating_duration_since(since).as_secs_f64();
            m.query_seconds.observe(took);
            // One subtraction for both histograms when the query began the transaction.
            let began = self.clock.held_since == Some(since);
            self.clock.ready_at = Some((now, began.then_some(took as f32)));
        }
    }

    /// Handles the messages of `buf` from `done` on, advancing `done` past each: whole ones,
    /// and the first bytes of one too large to hold, whose rest is passed on (or dropped) as
    /// it arrives.
    fn drain_messages<I: Io>(
        &mut self,
        srv: &mut ServerState,
        buf: &[u8],
        done: &mut usize,
        direct: &mut Direct,
        io: &mut I,
    ) -> Result<(), ServerFault> {
        loop {
            if !self.spass.is_idle() {
                let n = self.spass.take(buf.len() - *done);
                if n == 0 {
                    return Ok(());
                }
                if self.spass.keeps() {
                    direct.pass_on(&mut self.client.cout, buf, *done, *done + n);
                }
                *done += n;
                continue;
            }
            let rest = &buf[*done..];
            let Some((tag, len)) = frame::peek_header(rest) else {
                return Ok(());
            };
            let total = frame::checked_total(len, SERVER_MAX_MESSAGE)?;
            let whole = rest.len() >= total;
            if !whole {
                if total > self.policy.buffer() && !must_hold(tag, total) {
                    self.server_head(srv, tag, total, buf, done, direct, io)?;
                    continue;
                }
                if total > SERVER_HOLD_MAX {
                    let max = SERVER_HOLD_MAX;
                    return Err(ServerFault::TooLarge { tag, total, max });
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
                direct.pass_on(&mut self.client.cout, buf, *done, *done + end);
                *done += end;
                continue;
            }
            let msg = &rest[..total];
            let at = *done;
            *done += total;
            let (step, substitute) = self.classify(srv, tag, Some(msg), buf, direct, io)?;
            if step.forward {
                match substitute {
                    Some(own) => {
                        direct.spill(&mut self.client.cout, buf);
                        self.client.cout.extend_from_slice(&own);
                    }
                    None if tag == b::ERROR_RESPONSE_TAG && self.policy.tracking => {
                        match super::tracking::unrename_error(msg, self.id) {
                            Some(m) => {
                                direct.spill(&mut self.client.cout, buf);
                                self.client.cout.extend_from_slice(&m);
                            }
                            None => direct.pass_on(&mut self.client.cout, buf, at, at + total),
                        }
                    }
                    // The sender as the client knows it: the key the pooler gave that client.
                    None if tag == b::NOTIFICATION_RESPONSE_TAG => {
                        match renumbered(msg, None, io) {
                            Some(m) => {
                                direct.spill(&mut self.client.cout, buf);
                                self.client.cout.extend_from_slice(&m);
                            }
                            None => direct.pass_on(&mut self.client.cout, buf, at, at + total),
                        }
                    }
                    None => direct.pass_on(&mut self.client.cout, buf, at, at + total),
                }
                if step.ready {
                    self.count_query(io);
                }
            }
            self.after_step(srv, &step, buf, direct);
            if step.ready && self.release_ready(srv) {
                // The server goes back now: what it sent after its ReadyForQuery (a fast
                // shutdown's FATAL, a notification for a LISTEN) is no client's. It stays in
                // the server's buffer, and the pool closes a server returned with bytes unread.
                return Ok(());
            }
        }
    }

    /// The first bytes of a server message too large to hold (never one the pooler reads):
    /// classified by its tag, the bytes there are passed on or dropped, and the rest follows
    /// as it arrives.
    #[cold]
    #[allow(clippy::too_many_arguments)]
    fn server_head<I: Io>(
        &mut self,
        srv: &mut ServerState,
        tag: u8,
        total: usize,
        buf: &[u8],
        done: &mut usize,
        direct: &mut Direct,
        io: &mut I,
    ) -> Result<(), ServerFault> {
        let at = *done;
        let seen = buf.len() - at;
        *done = buf.len();
        let (step, substitute) = self.classify(srv, tag, None, buf, direct, io)?;
        let keep = step.forward && substitute.is_none();
        if keep {
            direct.pass_on(&mut self.client.cout, buf, at, at + seen);
        } else if let Some(own) = substitute.filter(|_| step.forward) {
            direct.spill(&mut self.client.cout, buf);
            self.client.cout.extend_from_slice(&own);
        }
        self.spass = Pass::rest(total, seen, keep);
        self.after_step(srv, &step, buf, direct);
        Ok(())
    }

    /// What one server message means for the reply queue and the session: the step, and the
    /// pooler's own error to send in its place. `msg` is the whole message, or `None` for
    /// one passed on in pieces (never one whose body the pooler reads).
    #[inline(always)]
    fn classify<I: Io>(
        &mut self,
        srv: &mut ServerState,
        tag: u8,
        msg: Option<&[u8]>,
        buf: &[u8],
        direct: &mut Direct,
        io: &mut I,
    ) -> Result<(Step, Option<Bytes>), ServerFault> {
        let body = || msg.map_or(&[][..], |m| &m[frame::HEADER_LEN..]);
        let mut fatal = false;
        if let Some(m) = msg.filter(|_| tag == b::ERROR_RESPONSE_TAG) {
            let signs = error_signs(&m[frame::HEADER_LEN..]);
            fatal = signs.fatal;
            self.batch.server_fatal |= signs.fatal;
            // Checked at release, where the pool knows whether it needs writes.
            srv.read_only_error |= signs.read_only;
        }
        let mut step = if tag == b::ERROR_RESPONSE_TAG {
            let held = match srv.replies.front() {
                Some(Owed::TrackedBind { id }) => self.batch.retry.hold(*id, msg),
                _ => false,
            };
            let mut step = srv.replies.on_error(&mut self.batch.skipped);
            step.forward &= !held;
            if srv.replies.skips_to_sync() {
                // The server now ignores the client's messages up to its Sync, so the pooler
                // drops them as well, answering none; the batch cannot be sent again whole.
                self.client.skipping = true;
                self.batch.retry.disable();
            }
            step
        } else {
            srv.replies.on_message(tag)
        };
        match tag {
            b::PARAMETER_STATUS_TAG => {
                let (k, v) = b::parse_parameter_status(body())?;
                srv.set_param(k, v);
                // The client changed it (SET), or the settings sync did (the server's
                // spelling): it is the client's value now. What a clean-up brings back is
                // the server's default, not the client's.
                if !self.cleaning() {
                    self.client.params.set(k, v);
                }
            }
            b::READY_FOR_QUERY_TAG => {
                self.batch.status = b::parse_ready_for_query(body())?;
                // (A session that checks its server keeps marks meanwhile: the check's
                // answer costs the usual path nothing.)
                if self.marks.is_some() {
                    if self.checking() {
                        self.check_ready(self.batch.status)?;
                    }
                    let now = io.now();
                    if let Some(t) = self.marks.as_deref_mut() {
                        t.quiet_since = now;
                    }
                }
            }
            // (The pooler's own clean-up drops the server's copies, not the client's
            // statements: `cleanup` forgets those copies itself.)
            b::COMMAND_COMPLETE_TAG
                if self.policy.tracking
                    && !self.in_prelude()
                    && prepared::drops_all_statements(body()) =>
            {
                self.forget_dropped_statements(srv, &step);
            }
            _ => {}
        }
        if tag == b::DATA_ROW_TAG && matches!(srv.replies.front(), Some(Owed::Check)) {
            if let Some(Some(v)) = msg
                .and_then(|m| b::parse_data_row(&m[frame::HEADER_LEN..]).ok())
                .and_then(|row| row.first().copied())
            {
                self.pin_checked(v);
            }
        }
        let failed = tag == b::ERROR_RESPONSE_TAG;
        if failed && self.in_prelude() {
            return Err(self.prelude_error(body()));
        }
        if failed {
            // Nothing a failed batch would have removed counts.
            self.client.pin.on_error();
            self.note_settings_error();
        }
        let mut substitute = None;
        if let Some(done) = step.completed.take() {
            // A FATAL ends the session whatever it met: it is the client's to see, never
            // replaced by the pooler's own answer to the request in front.
            if let Owed::Substitute { error, .. } = &done {
                if !fatal {
                    substitute = Some(error.clone());
                }
            }
            settle(&mut self.statements, &mut srv.statements, done, failed);
        }
        // Only an error skips anything: an empty drain still costs its set-up and drop.
        if !self.batch.skipped.is_empty() {
            self.settle_skipped(srv);
        }
        let drained = srv.replies.is_empty();
        if step.ready && drained && self.retry_holds_error() {
            // The held error goes out before this ReadyForQuery: whatever was forwarded so
            // far must precede it.
            direct.spill(&mut self.client.cout, buf);
        }
        if step.ready && drained && self.settle_retry(srv, self.batch.status) {
            // The batch is being sent again: this ReadyForQuery is not the client's.
            step.forward = false;
            step.ready = false;
        }
        if step.ready
            && step.forward
            && self.policy.is_statement()
            && self.batch.status != b::TX_IDLE
        {
            step.forward = false;
            self.refuse_transaction(srv);
        }
        Ok((step, substitute))
    }

    /// The server ran DEALLOCATE ALL / DISCARD ALL: what existed before the command is gone,
    /// for this client and on this server.
    fn forget_dropped_statements(&mut self, srv: &mut ServerState, step: &Step) {
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
        let (client_seq, server_seq) = marks.unwrap_or((u64::MAX, srv.statements.next_seq()));
        self.statements.drop_older_than(client_seq);
        srv.statements.drop_older_than(server_seq);
    }

    /// After a server message: the pooler's answers that reached the front go to the client,
    /// and a ReadyForQuery with nothing left owed makes the server due for release.
    #[inline(always)]
    fn after_step(&mut self, srv: &mut ServerState, step: &Step, buf: &[u8], direct: &mut Direct) {
        while let Some(answer) = srv.replies.pop_answer() {
            direct.spill(&mut self.client.cout, buf);
            if let Owed::Synthetic(m) = answer {
                self.client.cout.extend_from_slice(&m);
            }
        }
        if step.ready && self.in_prelude() {
            self.prelude_ready(srv);
            return;
        }
        if step.ready && srv.replies.is_empty() {
            if self.client.log.is_some() {
                self.settle_settings(srv);
            }
            if self.client.pin.has_pending() {
                self.client.pin.on_ready(self.batch.status == b::TX_IDLE);
            }
            if self.pin_check_due(srv) {
                // A pinned client's transaction is over after something that may have
                // removed the last of its state: the server is asked before it may go back,
                // and the client hears of its transaction's end once the answer is in (its
                // next message, or its leaving, finds the server settled).
                direct.spill(&mut self.client.cout, buf);
                let n = self.client.cout.len();
                let rfq = (n >= 6 && self.client.cout[n - 6] == b::READY_FOR_QUERY_TAG)
                    .then(|| self.client.cout.split_off(n - 6).freeze());
                self.ask_pin_check(srv);
                if let Some(rfq) = rfq {
                    self.owe(srv, Owed::Synthetic(rfq));
                }
                self.batch.release_due = false;
                return;
            }
            // Decided once, here: until something more is sent (which clears it) none of
            // these can change.
            self.batch.release_due = self.may_release() && !self.batch.execute_replay;
            self.batch.clean = true;
        }
    }

    /// Whether the client's transaction is over as far as the last ReadyForQuery, the mode
    /// and the pin say (its server may go back once nothing more is owed).
    pub(super) fn may_release(&self) -> bool {
        self.batch.status == b::TX_IDLE
            && !self.policy.is_session()
            && self.client.pin.reason.is_none()
    }

    /// Statement mode: a statement left a transaction open. Roll it back and tell the client.
    fn refuse_transaction(&mut self, srv: &mut ServerState) {
        frontend::query(&mut self.sout, "ROLLBACK");
        self.owe(srv, Owed::Internal);
        let mut m = BytesMut::new();
        b::error_response(
            &mut m,
            &error_fields(
                sqlstate::FEATURE_NOT_SUPPORTED,
                "transaction blocks are not allowed in statement pooling mode".into(),
            ),
        );
        b::ready_for_query(&mut m, b::TX_IDLE);
        self.owe(srv, Owed::Synthetic(Bytes::from(m)));
        // The rest of the block, already sent by the client, must not run outside it.
        self.client.refused_bytes = u32::try_from(self.client.cbuf.len()).unwrap_or(u32::MAX);
    }

    /// Settles the requests an error made the server skip (never executed).
    #[cold]
    fn settle_skipped(&mut self, srv: &mut ServerState) {
        for o in self.batch.skipped.drain(..) {
            settle(&mut self.statements, &mut srv.statements, o, true);
        }
    }
}
