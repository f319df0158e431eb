//! The transparent retry after DDL changed a prepared statement's result type: when the server
//! answers the Bind of a tracked statement with 0A000 "cached plan must not change result
//! type" outside an explicit transaction, the statement is parsed again on that connection and
//! the client's batch (Bind through Sync, with the pooler's own answers in it) is sent once
//! more; the client never sees the error. Only a batch that starts with that Bind qualifies:
//! anything executed before it was rolled back by the error and must not be lost silently.
//! And only one that describes what it runs (a Describe in the batch): a client that executes
//! on a row description it keeps from earlier must see the error, as it would directly.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;

use super::Relay;
use crate::prepared::Kept;
use crate::protocol::backend;
use crate::protocol::frame::HEADER_LEN;
use crate::protocol::{frontend as f, sqlstate};
use crate::server::{Owed, Request, ServerState};

/// One thing of the recorded batch, in order. Messages are ranges of [`Recording::sent`].
#[derive(Debug)]
pub(super) enum LogItem {
    /// Bytes sent to the server, and what the server owes for them.
    Sent {
        at: Range<usize>,
        req: Option<Request>,
    },
    /// An answer of the pooler's, in its place.
    Answer(Owed),
    /// A client's Close of a tracked statement sent to the server (renamed): on a resend it
    /// closes the statement again, which the failed first attempt brought back.
    Close {
        at: Range<usize>,
        name: Range<usize>,
        kept: Arc<Kept>,
    },
}

impl LogItem {
    fn describes(&self) -> bool {
        matches!(
            self,
            LogItem::Sent {
                req: Some(Request::Describe),
                ..
            }
        )
    }
}

/// A batch being recorded: its messages copied one after the other into `sent`. Boxed (most
/// sessions never record one); kept from batch to batch while the session keeps its buffers
/// (a warm session), so a tracked transaction copies its messages without allocating.
#[derive(Debug)]
pub(super) struct Recording {
    kept: Option<Arc<Kept>>,
    log: Vec<LogItem>,
    sent: Vec<u8>,
    synced: bool,
}

/// The longest batch kept for a retry: beyond either bound the batch is not retried and a
/// plan-change error goes to the client, so the log cannot grow with what a client sends.
const MAX_LOG_ITEMS: usize = 1000;
const MAX_LOG_BYTES: usize = 1 << 20;
/// The largest recording kept from one batch for the next.
const SPARE_BYTES: usize = 8 * 1024;
const SPARE_ITEMS: usize = 16;

impl Recording {
    /// Whether `more` bytes would take the batch past its bounds.
    fn is_full(&self, more: usize) -> bool {
        self.log.len() >= MAX_LOG_ITEMS || self.sent.len() + more > MAX_LOG_BYTES
    }

    /// Copies `msg` into `sent`; returns where it is.
    fn copy(&mut self, msg: &[u8]) -> Range<usize> {
        let start = self.sent.len();
        self.sent.extend_from_slice(msg);
        start..self.sent.len()
    }
}

/// A held plan-change error and the batch to resend.
#[derive(Debug)]
pub(super) struct Failed {
    rec: Box<Recording>,
    error: Bytes,
    resend_ok: bool,
}

/// Where the retry stands in the current batch.
#[derive(Debug, Default)]
enum Phase {
    /// Nothing recorded in this batch yet.
    #[default]
    Idle,
    /// A tracked Bind opened the batch: its messages through Sync are kept.
    Recording(Box<Recording>),
    /// The Bind failed with a plan change; the error waits for the batch's ReadyForQuery.
    /// `resend_ok` turns false if anything was sent after the batch (a resend would reorder).
    Failed(Box<Failed>),
    /// Not eligible in this batch.
    Off,
}

/// The retry's state for the current batch, and the recording a finished batch left (its
/// buffers are used again by the next one).
#[derive(Debug, Default)]
pub(super) struct PlanRetry {
    phase: Phase,
    spare: Option<Box<Recording>>,
}

impl PlanRetry {
    /// A tracked Bind was sent; `clean`: nothing was executed earlier in this batch.
    pub(super) fn start(&mut self, kept: &Arc<Kept>, bind: &[u8], clean: bool) {
        match &mut self.phase {
            Phase::Idle if clean => {
                let mut rec = self.spare.take().unwrap_or_else(|| {
                    Box::new(Recording {
                        kept: None,
                        log: Vec::new(),
                        sent: Vec::new(),
                        synced: false,
                    })
                });
                rec.kept = Some(kept.clone());
                let at = rec.copy(bind);
                rec.log.push(LogItem::Sent {
                    at,
                    req: Some(Request::Bind),
                });
                self.phase = Phase::Recording(rec);
            }
            Phase::Failed(f) => f.resend_ok = false,
            _ => self.off(),
        }
    }

    pub(super) fn disable(&mut self) {
        match &mut self.phase {
            Phase::Idle | Phase::Off => {}
            Phase::Failed(f) => f.resend_ok = false,
            Phase::Recording(_) => self.off(),
        }
    }

    /// Not eligible in this batch: a recording's buffers are kept for the next one.
    fn off(&mut self) {
        if let Phase::Recording(rec) = std::mem::replace(&mut self.phase, Phase::Off) {
            self.shelve(rec);
        }
    }

    /// Keeps `rec`'s buffers, emptied, for the next batch, unless a large batch grew them (a
    /// session holding its server never gets to free them between transactions).
    fn shelve(&mut self, mut rec: Box<Recording>) {
        if rec.sent.capacity() > SPARE_BYTES || rec.log.capacity() > SPARE_ITEMS {
            return;
        }
        rec.kept = None;
        rec.log.clear();
        rec.sent.clear();
        rec.synced = false;
        self.spare = Some(rec);
    }

    /// Frees the kept buffers if they hold more than `keep_up_to` bytes: a warm session keeps
    /// them up to a bound between transactions, any other keeps none (0).
    pub(super) fn free_spare(&mut self, keep_up_to: usize) {
        if self
            .spare
            .as_ref()
            .is_some_and(|r| keep_up_to == 0 || r.sent.capacity() > keep_up_to)
        {
            self.spare = None;
        }
    }

    /// Keeps a message sent in a batch being recorded.
    pub(super) fn record(&mut self, msg: &[u8], req: Option<Request>) {
        match &mut self.phase {
            Phase::Recording(r) => {
                if r.synced || req == Some(Request::Query) || r.is_full(msg.len()) {
                    self.off();
                    return;
                }
                let at = r.copy(msg);
                r.log.push(LogItem::Sent { at, req });
                r.synced = req == Some(Request::Sync);
            }
            Phase::Failed(f) => f.resend_ok = false,
            Phase::Idle | Phase::Off => {}
        }
    }

    /// Keeps a client's Close of tracked statement `kept` (sent renamed as `msg`).
    pub(super) fn record_close(&mut self, msg: &[u8], name: &[u8], kept: &Arc<Kept>) {
        if let Phase::Recording(r) = &mut self.phase {
            if r.synced || r.is_full(msg.len() + name.len()) {
                self.off();
                return;
            }
            let at = r.copy(msg);
            let name = r.copy(name);
            r.log.push(LogItem::Close {
                at,
                name,
                kept: kept.clone(),
            });
        } else {
            self.record(msg, Some(Request::Close));
        }
    }

    /// Keeps an answer of the pooler's queued in a batch being recorded.
    pub(super) fn record_answer(&mut self, o: &Owed) {
        if let Phase::Recording(r) = &mut self.phase {
            if r.synced || r.is_full(0) {
                self.off();
                return;
            }
            r.log.push(LogItem::Answer(o.clone()));
        }
    }

    /// Whether this ErrorResponse to a tracked Bind should be held back for a retry (`None`:
    /// an error too large to hold, which is never the plan-change one).
    pub(super) fn hold(&mut self, id: u64, error: Option<&[u8]>) -> bool {
        // Only a batch that describes what it runs: its client learns the new shape from the
        // new RowDescription. One that binds and executes on a description it keeps (asyncpg,
        // tokio-postgres) would decode the new rows with the old types; it gets the 0A000, as
        // directly, and prepares again.
        let eligible = matches!(&self.phase, Phase::Recording(r)
            if r.synced
                && r.kept.as_ref().is_some_and(|k| k.id == id)
                && r.log.iter().any(LogItem::describes));
        let Some(error) = error.filter(|e| eligible && is_plan_change(e)) else {
            self.disable();
            return false;
        };
        if let Phase::Recording(rec) = std::mem::take(&mut self.phase) {
            self.phase = Phase::Failed(Box::new(Failed {
                rec,
                error: Bytes::copy_from_slice(error),
                resend_ok: true,
            }));
        }
        true
    }
}

fn is_plan_change(error: &[u8]) -> bool {
    backend::parse_error(&error[HEADER_LEN..]).is_ok_and(|e| {
        e.code == sqlstate::FEATURE_NOT_SUPPORTED
            && e.message
                .contains("cached plan must not change result type")
    })
}

impl Relay {
    /// Whether [`Relay::settle_retry`] may write a held error to the client.
    pub(super) fn retry_holds_error(&self) -> bool {
        matches!(self.batch.retry.phase, Phase::Failed(_))
    }

    /// At the batch's ReadyForQuery: retry if a plan-change error is held, the client is not
    /// in a transaction and nothing came after the batch (then the ReadyForQuery is swallowed:
    /// returns true); otherwise deliver the held error before it. Resets for the next batch.
    pub(super) fn settle_retry(&mut self, srv: &mut ServerState, status: u8) -> bool {
        match std::mem::take(&mut self.batch.retry.phase) {
            Phase::Failed(f) => {
                let Failed {
                    rec,
                    error,
                    resend_ok,
                } = *f;
                let retried = status == backend::TX_IDLE && resend_ok;
                if retried {
                    self.resend(srv, &rec);
                    self.batch.retry.phase = Phase::Off;
                } else {
                    self.client.cout.extend_from_slice(&error);
                }
                self.batch.retry.shelve(rec);
                retried
            }
            Phase::Recording(rec) => {
                self.batch.retry.shelve(rec);
                false
            }
            Phase::Idle | Phase::Off => false,
        }
    }

    fn resend(&mut self, srv: &mut ServerState, rec: &Recording) {
        let Some(kept) = rec.kept.as_ref() else {
            return;
        };
        self.metrics.prepared.plan_retries.inc();
        tracing::info!(
            client = self.id,
            "statement plan changed after DDL: re-preparing and retrying once"
        );
        // The server still has the statement with its old plan: replace it.
        if srv.statements.holds(&kept.server_name).is_some() {
            f::close_statement(&mut self.sout, &kept.server_name);
            srv.statements.remove(&kept.server_name);
            let close = Owed::InjectedClose {
                server_name: kept.server_name.clone(),
                id: kept.id,
            };
            super::owe_on(srv, &mut self.statements, close);
        }
        let client_name = client_name(&kept.server_name, self.id);
        let replay = Owed::Replay {
            server_name: kept.server_name.clone(),
            id: kept.id,
        };
        self.send_parse(srv, kept, &client_name, replay, false);
        for item in &rec.log {
            match item {
                LogItem::Sent { at, req } => {
                    self.sout.extend_from_slice(&rec.sent[at.clone()]);
                    if let Some(r) = req {
                        self.owe(srv, Owed::Client(*r));
                    }
                }
                LogItem::Answer(o) => self.owe(srv, o.clone()),
                LogItem::Close { at, name, kept } => {
                    let name = &rec.sent[name.clone()];
                    if self.statements.get(name).is_some_and(|k| k.id == kept.id) {
                        self.statements.remove(name);
                    }
                    let had = srv.statements.held(&kept.server_name);
                    srv.statements.remove(&kept.server_name);
                    self.sout.extend_from_slice(&rec.sent[at.clone()]);
                    self.owe(
                        srv,
                        Owed::ClientClose {
                            name: Bytes::copy_from_slice(name),
                            kept: kept.clone(),
                            had,
                        },
                    );
                }
            }
        }
    }
}

/// The client's name back from `p<c>_<name>` (a numbered `P` name has none: use it as is).
fn client_name(server_name: &[u8], client: u64) -> Vec<u8> {
    let prefix = format!("p{client}_");
    server_name
        .strip_prefix(prefix.as_bytes())
        .unwrap_or(server_name)
        .to_vec()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::*;

    fn kept(id: u64) -> Arc<Kept> {
        Arc::new(Kept {
            id,
            server_name: Bytes::from_static(b"p1_s"),
            parse: Bytes::new(),
            confirmed: AtomicBool::new(true),
            needs: None,
            subscribes: false,
            signal: None,
            unseen: None,
        })
    }

    /// Bind, Describe, Execute, Sync of one batch, recorded; the batch then ends.
    fn batch(r: &mut PlanRetry, k: &Arc<Kept>, bind: &[u8]) {
        r.start(k, bind, true);
        r.record(b"D-portal", Some(Request::Describe));
        r.record(b"E-exec", Some(Request::Execute));
        r.record(b"S", Some(Request::Sync));
        match std::mem::take(&mut r.phase) {
            Phase::Recording(rec) => r.shelve(rec),
            other => panic!("not recording: {other:?}"),
        }
    }

    #[test]
    fn one_recording_serves_batch_after_batch() {
        let k = kept(7);
        let mut r = PlanRetry::default();
        batch(&mut r, &k, b"B-first");
        let first = r.spare.as_ref().map(|b| &**b as *const Recording);
        assert!(first.is_some(), "the recording is kept");
        r.start(&k, b"B-second", true);
        let Phase::Recording(rec) = &r.phase else {
            panic!("not recording");
        };
        assert_eq!(
            Some(&**rec as *const Recording),
            first,
            "the same box again"
        );
        // Emptied when kept: the second batch starts from its own Bind.
        assert_eq!(rec.sent, b"B-second");
        assert_eq!(rec.log.len(), 1);
        assert!(rec.kept.as_ref().is_some_and(|x| x.id == 7));
        assert!(r.spare.is_none());
    }

    #[test]
    fn a_large_recording_is_not_kept_and_spares_follow_the_buffers() {
        let k = kept(1);
        let mut r = PlanRetry::default();
        batch(&mut r, &k, &vec![b'x'; SPARE_BYTES + 1]);
        assert!(r.spare.is_none(), "a large recording is freed");
        batch(&mut r, &k, b"B-small");
        assert!(r.spare.is_some());
        // Nothing holds the statement once the batch is over.
        assert_eq!(Arc::strong_count(&k), 1);
        // A warm session keeps it up to its bound; any other frees it with its buffers.
        r.free_spare(64 * 1024);
        assert!(r.spare.is_some());
        r.free_spare(0);
        assert!(r.spare.is_none());
    }

    #[test]
    fn recorded_messages_are_the_ones_sent() {
        let k = kept(3);
        let mut r = PlanRetry::default();
        r.start(&k, b"B-1", true);
        r.record_close(b"C-close", b"name", &k);
        r.record(b"S", Some(Request::Sync));
        let Phase::Recording(rec) = &r.phase else {
            panic!("not recording");
        };
        let parts: Vec<&[u8]> = rec
            .log
            .iter()
            .flat_map(|item| match item {
                LogItem::Sent { at, .. } => vec![&rec.sent[at.clone()]],
                LogItem::Close { at, name, .. } => {
                    vec![&rec.sent[at.clone()], &rec.sent[name.clone()]]
                }
                LogItem::Answer(_) => vec![],
            })
            .collect();
        assert_eq!(
            parts,
            [&b"B-1"[..], &b"C-close"[..], &b"name"[..], &b"S"[..]]
        );
    }
}
