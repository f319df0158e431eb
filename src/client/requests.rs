//! Client → server: each whole message the client sent is forwarded, rewritten, or answered
//! by the pooler, and what the server will owe for it is queued.

use bytes::Buf;

use super::error::ClientError;
use super::pass::Pass;
use super::session::{Flow, Session};
use crate::config::PoolMode;
use crate::protocol::frontend as f;
use crate::protocol::{backend, frame};
use crate::server::{Owed, Request};

const IN_FAILED_TRANSACTION: &str = "25P02";

/// At most this many replies owed by one server before the client's next message waits:
/// a client that pipelines without reading is pushed back instead of queued.
const MAX_OWED: usize = 1024;

fn protocol(e: impl std::fmt::Display) -> ClientError {
    ClientError::Protocol(e.to_string())
}

impl Session<'_> {
    /// Handles every message buffered from the client (whole ones, and the header of one too
    /// large to hold, whose rest is passed on as it arrives), then writes what it produced.
    pub(super) async fn on_client(&mut self) -> Result<Flow, ClientError> {
        loop {
            if !self.cpass.is_idle() {
                if self.cbuf.is_empty() {
                    break;
                }
                self.pass_client();
                continue;
            }
            if self.sout.len() >= self.buffer {
                // A long pipeline goes out as it is read, not after all of it.
                self.flush_server().await?;
            }
            let Some((tag, len)) = frame::peek_header(&self.cbuf) else {
                break;
            };
            let total = frame::checked_total(len, f::LARGE_MESSAGE_LIMIT + frame::HEADER_LEN)
                .map_err(protocol)?;
            if f::exceeds_small_limit(tag, total) {
                return Err(ClientError::Protocol(format!(
                    "invalid message length {len} for message type {tag}"
                )));
            }
            let whole = self.cbuf.len() >= total;
            if !whole && !self.streams(tag, total)? {
                if total > self.max_message {
                    let e = frame::FrameError::TooLarge {
                        len: total,
                        max: self.max_message,
                    };
                    return Err(protocol(e));
                }
                break;
            }
            let seen = if whole { total } else { self.cbuf.len() };
            if tag == f::TERMINATE_TAG {
                self.flush_server().await?;
                self.flush_client().await?;
                return Ok(Flow::Quit);
            }
            if !f::is_known_tag(tag) {
                return Err(ClientError::Protocol(format!(
                    "invalid frontend message type {}",
                    tag
                )));
            }
            if self.must_wait() {
                break;
            }
            if self.refused_bytes > 0 {
                self.refused_bytes = self.refused_bytes.saturating_sub(total);
                self.drop_client(seen, total);
                self.answer_refused(tag);
                continue;
            }
            if self.skipping {
                if tag != f::SYNC_TAG {
                    self.drop_client(seen, total);
                    continue;
                }
                self.skipping = false;
            }
            if self.server.is_none() && self.needs_server(tag, &self.cbuf[..seen], whole)? {
                // Not boxed: a wait is a small future (the idle check and the settings sync,
                // which are not, are boxed inside it when due).
                let res = match self.acquire_now() {
                    Ok(()) => Ok(()),
                    Err(taken) => self.acquire(taken).await,
                };
                if let Err(e) = res {
                    match e {
                        ClientError::Pool(pe) => {
                            self.drop_client(seen, total);
                            self.answer_pool_error(tag, pe)?;
                            continue;
                        }
                        other => return Err(other),
                    }
                }
            }
            // Handled in place (no split of the buffer per message): the buffer is lent out
            // for the call, which needs the session mutably.
            let cbuf = std::mem::take(&mut self.cbuf);
            if self.sout.capacity() == 0 {
                // Room for this batch in one allocation rather than growth by doubling.
                self.sout.reserve(cbuf.len());
            }
            let res = self.on_request(tag, &cbuf[..seen], total);
            self.cbuf = cbuf;
            self.cbuf.advance(seen);
            let passed = res?;
            if !whole {
                // The rest follows the first bytes: to the server, or (a Bind the pooler
                // refused, COPY data with no COPY running) nowhere.
                self.cpass = Pass::rest(total, seen, passed);
            }
        }
        self.finish_round().await?;
        Ok(Flow::Continue)
    }

    /// Passes on (or drops) the next bytes of the client message in progress.
    fn pass_client(&mut self) {
        let n = self.cpass.take(self.cbuf.len());
        if self.cpass.keeps() {
            self.sout.extend_from_slice(&self.cbuf[..n]);
        }
        self.cbuf.advance(n);
    }

    /// Drops a message the pooler does not pass on: the `seen` bytes buffered now, and the
    /// rest of it as it arrives.
    fn drop_client(&mut self, seen: usize, total: usize) {
        self.cbuf.advance(seen);
        if seen < total {
            self.cpass = Pass::rest(total, seen, false);
        }
    }

    /// Whether the next message must stay buffered until the held server has answered more:
    /// statement mode runs one statement at a time (while a COPY FROM STDIN runs, what the
    /// client sends belongs to it, or ends it with an error, as the server decides), and a
    /// server owes at most [`MAX_OWED`] replies (then it is asked to flush what it holds).
    fn must_wait(&mut self) -> bool {
        let Some(srv) = self.server.as_ref() else {
            return false;
        };
        if self.mode == PoolMode::Statement && srv.replies.owes_ready() && !srv.replies.in_copy_in()
        {
            return true;
        }
        if srv.replies.len() >= MAX_OWED {
            // PostgreSQL holds replies until Sync, Flush or a full buffer: without a Flush a
            // pipeline of small requests would wait for replies the server keeps.
            f::flush(&mut self.sout);
            return true;
        }
        false
    }

    /// Whether a message not yet wholly buffered is passed on in pieces: it is larger than a
    /// buffer and the pooler needs no more of it than its first bytes.
    fn streams(&self, tag: u8, total: usize) -> Result<bool, ClientError> {
        if total <= self.buffer {
            return Ok(false);
        }
        Ok(match tag {
            f::QUERY_TAG | f::FUNCTION_CALL_TAG | f::COPY_DATA_TAG => true,
            f::PARSE_TAG if self.tracking => {
                // A named Parse is kept whole for replays; the unnamed one is not.
                f::parse_statement_prefix(&self.cbuf).is_some_and(|span| span.len == 0)
            }
            // A tracked Bind is renamed in its first bytes: both names must be there.
            f::BIND_TAG if self.tracking => f::bind_statement(&self.cbuf).is_ok(),
            f::PARSE_TAG | f::BIND_TAG => true,
            _ => false,
        })
    }

    /// Whether reading the client now could help: its buffer has room, or the message in
    /// front must be held whole and is not complete yet.
    pub(super) fn wants_client(&self) -> bool {
        if self.cbuf.len() < self.buffer {
            return true;
        }
        if !self.cpass.is_idle() {
            return false;
        }
        match frame::peek_header(&self.cbuf) {
            Some((tag, len)) => {
                let total = len as usize + 1;
                total > self.cbuf.len()
                    && total <= self.max_message
                    && !self.streams(tag, total).unwrap_or(true)
            }
            None => true,
        }
    }

    /// A message of a transaction block that statement mode refused: not run, answered as a
    /// server answers inside a failed block.
    fn answer_refused(&mut self, tag: u8) {
        let message = "current transaction is aborted, commands ignored until end of \
                       transaction block (transaction blocks are not allowed in statement pooling mode)";
        match tag {
            f::QUERY_TAG | f::FUNCTION_CALL_TAG => {
                let fields = super::error::error_fields(IN_FAILED_TRANSACTION, message.into());
                backend::error_response(&mut self.cout, &fields);
                backend::ready_for_query(&mut self.cout, backend::TX_IDLE);
            }
            f::SYNC_TAG => {
                self.skipping = false;
                backend::ready_for_query(&mut self.cout, backend::TX_IDLE);
            }
            _ if !self.skipping => self.pooler_error(IN_FAILED_TRANSACTION, message.into()),
            _ => {}
        }
    }

    /// Whether this message has to reach a server (so one must be taken first). `whole`:
    /// `msg` is the whole message, not its first bytes.
    fn needs_server(&self, tag: u8, msg: &[u8], whole: bool) -> Result<bool, ClientError> {
        Ok(match tag {
            f::SYNC_TAG | f::FLUSH_TAG => false,
            f::COPY_DATA_TAG | f::COPY_DONE_TAG | f::COPY_FAIL_TAG => false,
            // Passed on in pieces: unnamed (the check in `streams`).
            f::PARSE_TAG if !whole => true,
            f::PARSE_TAG | f::BIND_TAG | f::DESCRIBE_TAG | f::CLOSE_TAG if self.tracking => {
                self.tracked_needs_server(tag, msg)?
            }
            _ => true,
        })
    }

    /// Handles one client message: `msg` is all of it, or its first bytes when it is passed
    /// on in pieces (`total` is its whole size). Returns whether it went to the server (so the
    /// rest of a message passed on in pieces follows it there).
    fn on_request(&mut self, tag: u8, msg: &[u8], total: usize) -> Result<bool, ClientError> {
        let held = self.server.is_some();
        match tag {
            f::QUERY_TAG => self.forward(msg, Request::Query, total),
            f::FUNCTION_CALL_TAG => self.forward(msg, Request::Query, total),
            f::SYNC_TAG if held => self.forward(msg, Request::Sync, total),
            f::SYNC_TAG => {
                // Nothing of this batch reached a server: the pool answers the Sync itself.
                backend::ready_for_query(&mut self.cout, backend::TX_IDLE);
                return Ok(false);
            }
            f::COPY_DONE_TAG | f::COPY_FAIL_TAG if held => {
                self.sout.extend_from_slice(msg);
                self.retry.record(msg, None);
                self.owe(Owed::CopyEnd);
            }
            f::FLUSH_TAG | f::COPY_DATA_TAG if held => {
                self.sout.extend_from_slice(msg);
                if msg.len() == total {
                    self.retry.record(msg, None);
                } else {
                    self.retry.disable();
                }
            }
            f::EXECUTE_TAG => self.forward(msg, Request::Execute, total),
            f::PARSE_TAG if self.tracking && msg.len() < total => {
                self.forward(msg, Request::Parse, total)
            }
            f::PARSE_TAG | f::BIND_TAG | f::DESCRIBE_TAG | f::CLOSE_TAG if self.tracking => {
                return self.on_tracked(tag, msg, total);
            }
            f::PARSE_TAG => self.forward(msg, Request::Parse, total),
            f::BIND_TAG => self.forward(msg, Request::Bind, total),
            f::DESCRIBE_TAG => self.forward(msg, Request::Describe, total),
            f::CLOSE_TAG => self.forward(msg, Request::Close, total),
            // COPY messages with no server: a server would drop them too.
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Forwards a message unchanged (`msg` may be its first `msg.len()` of `total` bytes) and
    /// queues what the server owes for it.
    pub(super) fn forward(&mut self, msg: &[u8], req: Request, total: usize) {
        if self.request_since.is_none() {
            self.request_since = Some(std::time::Instant::now());
        }
        self.sout.extend_from_slice(msg);
        if matches!(req, Request::Bind | Request::Execute | Request::Query) {
            self.batch_clean = false;
        }
        let owed = match (self.tracking, req, self.server.as_ref()) {
            (true, Request::Query | Request::Execute, Some(srv)) => Owed::Marked {
                req,
                client_seq: self.statements.next_id(),
                server_seq: srv.statements.next_seq(),
            },
            _ => Owed::Client(req),
        };
        self.owe(owed);
        if msg.len() == total {
            self.retry.record(msg, Some(req));
        } else {
            // Not kept whole, so it could not be sent again.
            self.retry.disable();
        }
    }
}
