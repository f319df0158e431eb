//! The pooler's own timeouts on a held server (`pool.query_timeout`,
//! `pool.idle_transaction_timeout`, `pool.transaction_timeout`) as deadlines: the machine says
//! when the next one falls due and which; its driver keeps the timer.

use std::time::Instant;

use super::Relay;
use crate::protocol::backend;
use crate::server::ServerState;

/// Which timeout fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Query,
    IdleTransaction,
    Transaction,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::Query => "query",
            Kind::IdleTransaction => "idle_transaction",
            Kind::Transaction => "transaction",
        }
    }
}

/// What the deadlines are measured from (kept only by sessions with a timeout on).
#[derive(Debug)]
pub(super) struct Marks {
    /// The request whose query timeout already fired (its cancel is on the way).
    pub cancelled: Option<Instant>,
    /// When the held server last sent ReadyForQuery: an idle transaction is idle since then.
    pub quiet_since: Instant,
}

impl Relay {
    /// The earliest of the pooler's timeouts that applies to the held server now, if any.
    pub fn deadline(&self, srv: &ServerState) -> Option<(Instant, Kind)> {
        let t = self.marks.as_deref()?;
        let p = &self.policy;
        let in_transaction = self.batch.status != backend::TX_IDLE;
        let mut due: Option<(Instant, Kind)> = None;
        let mut consider = |at: Instant, kind| {
            if due.map_or(true, |(d, _)| at < d) {
                due = Some((at, kind));
            }
        };
        if !p.query_timeout().is_zero() && !srv.replies.is_empty() {
            if let Some(since) = self.clock.request_since.filter(|s| t.cancelled != Some(*s)) {
                consider(since + p.query_timeout(), Kind::Query);
            }
        }
        if !p.idle_transaction_timeout().is_zero()
            && in_transaction
            && srv.replies.is_empty()
            && self.client.cbuf.is_empty()
        {
            consider(
                t.quiet_since + p.idle_transaction_timeout(),
                Kind::IdleTransaction,
            );
        }
        if !p.transaction_timeout().is_zero() && in_transaction {
            if let Some(since) = self.clock.held_since {
                consider(since + p.transaction_timeout(), Kind::Transaction);
            }
        }
        due
    }

    /// The query timeout fired: the running request is being cancelled (its cancel is not
    /// armed again for the same request).
    pub fn query_timed_out(&mut self) {
        if let Some(t) = self.marks.as_deref_mut() {
            t.cancelled = self.clock.request_since;
        }
        self.count_timeout(Kind::Query);
    }

    pub fn count_timeout(&self, kind: Kind) {
        self.metrics
            .clients
            .timeouts
            .with_label_values(&[kind.label()])
            .inc();
    }
}
