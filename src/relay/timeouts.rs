//! The pooler's own timeouts on a held server (`pool.query_timeout`,
//! `pool.idle_transaction_timeout`, `pool.transaction_timeout`) as deadlines: the machine says
//! when the next one falls due and which; its driver keeps the timer.

use std::time::Instant;

use super::Relay;
use crate::protocol::{backend, sqlstate};
use crate::server::ServerState;

/// Which timeout fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Query,
    IdleTransaction,
    Transaction,
    /// The idle check's answer (`server.connect_timeout`).
    Check,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::Query => "query",
            Kind::IdleTransaction => "idle_transaction",
            Kind::Transaction => "transaction",
            Kind::Check => "server_check",
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
    /// When the idle check of the server just taken is given up on.
    pub check_until: Option<Instant>,
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
        if self.checking() {
            if let Some(at) = t.check_until {
                consider(at, Kind::Check);
            }
        }
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

    /// Timeout `kind` fired while the client holds `srv`: counted, and what the driver does
    /// is decided here.
    pub(super) fn timed_out(&mut self, kind: Kind, srv: Option<&ServerState>) -> TimedOut {
        if kind == Kind::Check {
            // Not the client's timeout: the server is replaced, the client waits on.
            return TimedOut::CheckFailed;
        }
        self.metrics
            .clients
            .timeouts
            .with_label_values(&[kind.label()])
            .inc();
        let (code, message) = match kind {
            Kind::Query => {
                // Its cancel is not armed again for the same request.
                if let Some(t) = self.marks.as_deref_mut() {
                    t.cancelled = self.clock.request_since;
                }
                return TimedOut::CancelQuery;
            }
            Kind::IdleTransaction => (
                sqlstate::IDLE_IN_TRANSACTION_TIMEOUT,
                "terminating connection due to idle-in-transaction timeout (pool.idle_transaction_timeout)",
            ),
            Kind::Transaction | Kind::Check => (
                sqlstate::TRANSACTION_TIMEOUT,
                "terminating connection due to transaction timeout (pool.transaction_timeout)",
            ),
        };
        // The session ends for a reason of the pooler's: the server's close is not the FATAL's.
        self.batch.server_fatal = false;
        TimedOut::Close {
            code,
            message,
            cancel_running: srv.is_some_and(|s| !s.replies.is_empty()),
        }
    }
}

/// What a fired timeout asks of the driver ([`super::Event::TimedOut`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimedOut {
    /// Cancel the running query (the session goes on).
    CancelQuery,
    /// The server just taken did not answer its idle check within `server.connect_timeout`:
    /// it is closed and the client, its messages still waiting, takes another.
    CheckFailed,
    /// End the session with this FATAL, its server closed rather than returned (closing it
    /// is PostgreSQL's rollback); `cancel_running`: a statement still runs there, cancel it
    /// first, or the backend would run it to its end.
    Close {
        code: &'static str,
        message: &'static str,
        cancel_running: bool,
    },
}
