//! The transparent retry after DDL changed a prepared statement's result type: when the server
//! answers the Bind of a tracked statement with 0A000 "cached plan must not change result
//! type" outside an explicit transaction, the statement is parsed again on that connection and
//! the client's batch (Bind through Sync) is sent once more; the client never sees the error.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::session::Session;
use crate::prepared::Kept;
use crate::protocol::backend;
use crate::protocol::frame::{self, HEADER_LEN};
use crate::protocol::{frontend as f, sqlstate};
use crate::server::{Owed, Request};

/// The retry's state for the current batch.
#[derive(Debug, Default)]
pub(super) enum PlanRetry {
    /// Nothing recorded in this batch yet.
    #[default]
    Idle,
    /// A tracked Bind was sent: its messages through Sync are kept for a possible resend.
    Recording {
        kept: Arc<Kept>,
        log: BytesMut,
        synced: bool,
    },
    /// The Bind failed with a plan change; the error waits for the batch's ReadyForQuery.
    Failed {
        kept: Arc<Kept>,
        log: BytesMut,
        error: Bytes,
    },
    /// Not eligible in this batch (already retried, or the batch is not a plain Bind..Sync).
    Off,
}

impl PlanRetry {
    pub(super) fn start(&mut self, kept: &Arc<Kept>, bind: &[u8]) {
        *self = match self {
            PlanRetry::Idle => PlanRetry::Recording {
                kept: kept.clone(),
                log: BytesMut::from(bind),
                synced: false,
            },
            _ => PlanRetry::Off,
        };
    }

    pub(super) fn disable(&mut self) {
        if !matches!(self, PlanRetry::Idle) {
            *self = PlanRetry::Off;
        }
    }

    /// Keeps a forwarded message of a batch being recorded.
    pub(super) fn record(&mut self, msg: &[u8], req: Request) {
        if let PlanRetry::Recording { log, synced, .. } = self {
            if *synced || req == Request::Query {
                *self = PlanRetry::Off;
                return;
            }
            log.extend_from_slice(msg);
            *synced = req == Request::Sync;
        }
    }

    /// Whether this ErrorResponse to a tracked Bind should be held back for a retry.
    pub(super) fn hold(&mut self, id: u64, error: &[u8]) -> bool {
        let eligible =
            matches!(self, PlanRetry::Recording { kept, synced: true, .. } if kept.id == id);
        if !eligible || !is_plan_change(error) {
            self.disable();
            return false;
        }
        if let PlanRetry::Recording { kept, log, .. } = std::mem::take(self) {
            *self = PlanRetry::Failed {
                kept,
                log,
                error: Bytes::copy_from_slice(error),
            };
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

impl Session<'_> {
    /// At the batch's ReadyForQuery: retry if a plan-change error is held and the client is not
    /// in a transaction (then the ReadyForQuery is swallowed: returns true); otherwise deliver
    /// the held error before it. Resets the state for the next batch.
    pub(super) fn settle_retry(&mut self, status: u8) -> bool {
        match std::mem::take(&mut self.retry) {
            PlanRetry::Failed { kept, log, error } => {
                if status == backend::TX_IDLE {
                    self.resend(&kept, &log);
                    self.retry = PlanRetry::Off;
                    true
                } else {
                    self.cout.extend_from_slice(&error);
                    false
                }
            }
            _ => false,
        }
    }

    fn resend(&mut self, kept: &Arc<Kept>, log: &BytesMut) {
        let Some(srv) = self.server.as_mut() else {
            return;
        };
        tracing::info!(
            client = self.id,
            "statement plan changed after DDL: re-preparing and retrying once"
        );
        f::close_statement(&mut self.sout, &kept.server_name);
        srv.replies.push(Owed::InjectedClose);
        srv.statements.remove(&kept.server_name);
        let client_name = client_name(&kept.server_name, self.id);
        let replay = Owed::Replay {
            server_name: kept.server_name.clone(),
            id: kept.id,
        };
        self.send_parse(kept, &client_name, replay);
        let mut rest = BytesMut::from(&log[..]);
        while let Ok(Some(m)) = frame::cut(&mut rest, usize::MAX) {
            let owed = match m.tag {
                f::BIND_TAG => Owed::Client(Request::Bind),
                f::EXECUTE_TAG => Owed::Client(Request::Execute),
                f::DESCRIBE_TAG => Owed::Client(Request::Describe),
                f::CLOSE_TAG => Owed::Client(Request::Close),
                f::PARSE_TAG => Owed::Client(Request::Parse),
                f::SYNC_TAG => Owed::Client(Request::Sync),
                _ => {
                    self.sout.extend_from_slice(&m.bytes);
                    continue;
                }
            };
            self.sout.extend_from_slice(&m.bytes);
            self.owe(owed);
        }
    }
}

/// The client's name back from `p<c>_<name>`.
fn client_name(server_name: &[u8], client: u64) -> Vec<u8> {
    let prefix = format!("p{client}_");
    server_name
        .strip_prefix(prefix.as_bytes())
        .unwrap_or(server_name)
        .to_vec()
}
