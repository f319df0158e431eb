//! The pooler's own timeouts on a held server (`pool.query_timeout`,
//! `pool.idle_transaction_timeout`, `pool.transaction_timeout`): one timer per session, boxed
//! and only for sessions that have a timeout configured, re-armed only when its deadline moves.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::time::Sleep;

use super::session::Session;
use crate::config::PoolConfig;
use crate::protocol::backend;

/// Which timeout fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Query,
    IdleTransaction,
    Transaction,
}

impl Kind {
    pub(super) fn label(self) -> &'static str {
        match self {
            Kind::Query => "query",
            Kind::IdleTransaction => "idle_transaction",
            Kind::Transaction => "transaction",
        }
    }
}

pub(super) struct Timeouts {
    query: Duration,
    idle_transaction: Duration,
    transaction: Duration,
    timer: Pin<Box<Sleep>>,
    armed: Option<(Instant, Kind)>,
    /// The request whose query timeout already fired (its cancel is on the way).
    cancelled: Option<Instant>,
    /// When the held server last sent ReadyForQuery: an idle transaction is idle since then.
    pub(super) quiet_since: Instant,
}

/// Takes the timeouts in force from `cfg` (a reload reaches the next held server): `None`
/// when all are off, so a session without them carries no timer.
pub(super) fn configure(slot: &mut Option<Box<Timeouts>>, cfg: &PoolConfig) {
    let (q, i, t) = (
        cfg.query_timeout,
        cfg.idle_transaction_timeout,
        cfg.transaction_timeout,
    );
    if q.is_zero() && i.is_zero() && t.is_zero() {
        *slot = None;
        return;
    }
    let t_ = slot.get_or_insert_with(|| {
        Box::new(Timeouts {
            query: q,
            idle_transaction: i,
            transaction: t,
            timer: Box::pin(tokio::time::sleep(Duration::from_secs(86_400))),
            armed: None,
            cancelled: None,
            quiet_since: Instant::now(),
        })
    });
    t_.query = q;
    t_.idle_transaction = i;
    t_.transaction = t;
}

impl Timeouts {
    /// Polls the timer for `due` (re-armed if the deadline moved).
    pub(super) fn poll_due(
        &mut self,
        due: Option<(Instant, Kind)>,
        cx: &mut Context<'_>,
    ) -> Poll<Kind> {
        let Some((at, kind)) = due else {
            self.armed = None;
            return Poll::Pending;
        };
        if self.armed != due {
            self.timer
                .as_mut()
                .reset(tokio::time::Instant::from_std(at));
            self.armed = due;
        }
        match self.timer.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.armed = None;
                Poll::Ready(kind)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Session<'_> {
    /// The earliest timeout that applies to the held server now, if any.
    pub(super) fn timeout_due(&self) -> Option<(Instant, Kind)> {
        let t = self.timeouts.as_deref()?;
        let srv = self.server.as_ref()?;
        let in_transaction = self.status != backend::TX_IDLE;
        let mut due: Option<(Instant, Kind)> = None;
        let mut consider = |at: Instant, kind| {
            if due.map_or(true, |(d, _)| at < d) {
                due = Some((at, kind));
            }
        };
        if !t.query.is_zero() && !srv.replies.is_empty() {
            if let Some(since) = self.request_since.filter(|s| t.cancelled != Some(*s)) {
                consider(since + t.query, Kind::Query);
            }
        }
        if !t.idle_transaction.is_zero()
            && in_transaction
            && srv.replies.is_empty()
            && self.cbuf.is_empty()
        {
            consider(t.quiet_since + t.idle_transaction, Kind::IdleTransaction);
        }
        if !t.transaction.is_zero() && in_transaction {
            if let Some(since) = self.held_since {
                consider(since + t.transaction, Kind::Transaction);
            }
        }
        due
    }

    /// A query ran past `pool.query_timeout`: cancel it (the client gets the server's 57014).
    pub(super) fn query_timed_out(&mut self) {
        if let Some(t) = self.timeouts.as_deref_mut() {
            t.cancelled = self.request_since;
        }
        self.count_timeout(Kind::Query);
        tracing::info!(
            client = self.id,
            "query_timeout: cancelling the running query"
        );
        self.cancel.cancel_now(&self.shared);
    }

    pub(super) fn count_timeout(&self, kind: Kind) {
        self.shared
            .metrics
            .clients
            .timeouts
            .with_label_values(&[kind.label()])
            .inc();
    }
}
