//! Client → server: each whole message the client sent is forwarded, rewritten, or answered
//! by the pooler, and what the server will owe for it is queued.

use bytes::Buf;

use super::error::ClientError;
use super::session::{Flow, Session};
use crate::config::PoolMode;
use crate::protocol::frontend as f;
use crate::protocol::{backend, frame};
use crate::server::{Owed, Request};

const IN_FAILED_TRANSACTION: &str = "25P02";

impl Session<'_> {
    /// Handles every whole message buffered from the client, then writes what it produced.
    pub(super) async fn on_client(&mut self) -> Result<Flow, ClientError> {
        loop {
            let total = match frame::complete_len(&self.cbuf, self.max_message) {
                Ok(Some(t)) => t,
                Ok(None) => break,
                Err(e) => return Err(ClientError::Protocol(e.to_string())),
            };
            let tag = self.cbuf[0];
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
            if self.mode == PoolMode::Statement
                && self.server.as_ref().is_some_and(|s| s.replies.owes_ready())
            {
                // Statement mode runs one statement at a time: the next waits for this one's
                // ReadyForQuery (and the server's release).
                break;
            }
            if self.refused_bytes > 0 {
                self.refused_bytes = self.refused_bytes.saturating_sub(total);
                self.cbuf.advance(total);
                self.answer_refused(tag);
                continue;
            }
            if self.skipping {
                if tag != f::SYNC_TAG {
                    self.cbuf.advance(total);
                    continue;
                }
                self.skipping = false;
            }
            if self.server.is_none() && self.needs_server(tag, &self.cbuf[..total])? {
                // Boxed: the checkout future is large and only lives while waiting for a server
                // or syncing one.
                let res = match self.acquire_now() {
                    Ok(()) => Ok(()),
                    Err(taken) => Box::pin(self.acquire(taken)).await,
                };
                if let Err(e) = res {
                    match e {
                        ClientError::Pool(pe) => {
                            self.cbuf.advance(total);
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
            let res = self.on_request(tag, &cbuf[..total]);
            self.cbuf = cbuf;
            self.cbuf.advance(total);
            res?;
        }
        self.finish_round().await?;
        Ok(Flow::Continue)
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

    /// Whether this message has to reach a server (so one must be taken first).
    fn needs_server(&self, tag: u8, msg: &[u8]) -> Result<bool, ClientError> {
        Ok(match tag {
            f::SYNC_TAG | f::FLUSH_TAG => false,
            f::COPY_DATA_TAG | f::COPY_DONE_TAG | f::COPY_FAIL_TAG => false,
            f::PARSE_TAG | f::BIND_TAG | f::DESCRIBE_TAG | f::CLOSE_TAG if self.tracking => {
                self.tracked_needs_server(tag, msg)?
            }
            _ => true,
        })
    }

    fn on_request(&mut self, tag: u8, msg: &[u8]) -> Result<(), ClientError> {
        let held = self.server.is_some();
        match tag {
            f::QUERY_TAG => self.forward(msg, Request::Query),
            f::FUNCTION_CALL_TAG => self.forward(msg, Request::Query),
            f::SYNC_TAG if held => self.forward(msg, Request::Sync),
            f::SYNC_TAG => {
                // Nothing of this batch reached a server: the pool answers the Sync itself.
                backend::ready_for_query(&mut self.cout, backend::TX_IDLE);
            }
            f::FLUSH_TAG | f::COPY_DATA_TAG | f::COPY_DONE_TAG | f::COPY_FAIL_TAG if held => {
                self.sout.extend_from_slice(msg);
                self.retry.record(msg, None);
            }
            f::EXECUTE_TAG => self.forward(msg, Request::Execute),
            f::PARSE_TAG | f::BIND_TAG | f::DESCRIBE_TAG | f::CLOSE_TAG if self.tracking => {
                self.on_tracked(tag, msg)?
            }
            f::PARSE_TAG => self.forward(msg, Request::Parse),
            f::BIND_TAG => self.forward(msg, Request::Bind),
            f::DESCRIBE_TAG => self.forward(msg, Request::Describe),
            f::CLOSE_TAG => self.forward(msg, Request::Close),
            _ => {}
        }
        Ok(())
    }

    pub(super) fn forward(&mut self, msg: &[u8], req: Request) {
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
        self.retry.record(msg, Some(req));
    }
}
