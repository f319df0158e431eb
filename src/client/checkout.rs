//! Taking a server for a client: at once when one is idle, else by waiting in the pool
//! (still noticing the client leaving or a console KILL, and held by PAUSE). The relay then
//! checks a server idle past `server.check_delay` (`relay::check`) and brings the server's
//! session in line with the client's before the client's first message runs there
//! (`relay::cleanup`).

use std::future::Future;
use std::num::NonZeroI32;
use std::pin::pin;
use std::task::Poll;
use std::time::Instant;

use super::error::ClientError;
use super::session::Session;
use super::timer::Timer;
use super::wait::reading_client;
use crate::pool::{CloseReason, Handoff, PoolError};
use crate::relay::{Check, Policy};
use crate::server::{Server, ServerState};

/// What [`Session::acquire_now`] leaves for the waiting path.
pub(super) struct Taken {
    pub(super) started: Instant,
    /// The pid of a server the message in front signals: not to be taken for it.
    pub(super) spare: Option<NonZeroI32>,
    /// The place in the pool's queue taken in the same look as for an idle server (the
    /// wait's number in the session's hand-over slot), or the pool's refusal; `None`: the
    /// wait is still to be asked for (a PAUSE, a pid spared).
    pub(super) queued: Option<Result<u64, PoolError>>,
}

impl Session {
    /// The common case without a future: an idle server, taken at once, or else a place in
    /// the pool's queue taken in the same look (one lock). Otherwise hands
    /// [`Session::acquire`] what it needs: the clock read, the place. A message that signals
    /// a backend by pid (`spare`, from [`crate::relay::Next::NeedServer`]) takes the waiting
    /// path, which spares that backend's server.
    pub(super) fn acquire_now(&mut self, spare: Option<NonZeroI32>) -> Result<(), Taken> {
        let started = Instant::now();
        if spare.is_some() || self.shared.lifecycle.is_paused_for(self.pool.database()) {
            return Err(Taken {
                started,
                spare,
                queued: None,
            });
        }
        // The hand-over slot is kept across the session's waits while it works (a parked
        // session drops it).
        let queued =
            match self
                .pool
                .checkout_or_queue(started, self.cancel.ticket(), &mut self.handoff)
            {
                Ok(Ok(conn)) => {
                    self.shared.metrics.clients.wait_seconds.observe(0.0);
                    self.hold(conn, started);
                    return Ok(());
                }
                Ok(Err(wait)) => Ok(wait),
                Err(e) => Err(e),
            };
        Err(Taken {
            started,
            spare: None,
            queued: Some(queued),
        })
    }

    /// Takes a server from the pool, waiting if need be, still noticing if the client leaves
    /// meanwhile.
    pub(super) async fn acquire(&mut self, taken: Taken) -> Result<(), ClientError> {
        let Taken {
            started,
            spare,
            queued,
        } = taken;
        let r = match queued {
            // Queued already: the wait alone is left (the pool's KILL check was made).
            Some(queued) => {
                let wait = queued?;
                let r = {
                    // (Made by `acquire_now` with the place: a new one would answer at once.)
                    let handoff = self.handoff.get_or_insert_with(Handoff::new);
                    let waiting = pin!(self.pool.waiting(handoff, wait));
                    reading_client(&mut self.client, &mut self.relay, waiting).await?
                };
                r.unwrap_or_else(|| Err(PoolError::Closed(self.pool.name().to_owned())))
            }
            None => {
                // The wait is written out here rather than in a future of its own.
                self.check_killed()?;
                // The wait for a server (and its deadline) starts after any PAUSE.
                let since = if self.shared.lifecycle.is_paused_for(self.pool.database()) {
                    Box::pin(self.wait_unpaused()).await?
                } else {
                    tokio::time::Instant::from_std(started)
                };
                // A KILL stops this wait through the ticket (the pool drops the waiter, or
                // refuses to queue it once killed): no registration of its own per wait.
                let pool = self.pool.clone();
                let checkout = pin!(pool.checkout_as(since, Some(self.cancel.ticket()), spare));
                reading_client(&mut self.client, &mut self.relay, checkout).await?
            }
        };
        if self.cancel.is_killed() {
            if let Ok(conn) = r {
                self.pool.discard(conn, CloseReason::Killed);
            }
            return Err(ClientError::Killed);
        }
        self.hold_taken(r?, started);
        Ok(())
    }

    /// Waits out a PAUSE of this client's database (running transactions finish meanwhile),
    /// still seeing the client leave or a KILL; returns when it ended.
    async fn wait_unpaused(&mut self) -> Result<tokio::time::Instant, ClientError> {
        let l = self.shared.lifecycle.clone();
        let pool = self.pool.clone();
        while l.is_paused_for(pool.database()) {
            // Made before the look at the slot, so a KILL in between is not missed (a
            // Notified hears notify_waiters from its creation on).
            let kicked = l.client_shutdown().kicked();
            self.check_killed()?;
            let mut unpaused = pin!(l.wait_unpaused_for(pool.database()));
            let mut kicked = pin!(kicked);
            let either = std::future::poll_fn(|cx| {
                if unpaused.as_mut().poll(cx).is_ready() || kicked.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(());
                }
                Poll::Pending
            });
            reading_client(&mut self.client, &mut self.relay, pin!(either)).await?;
        }
        Ok(tokio::time::Instant::now())
    }

    /// Holds a server that was ready to use, counting the wait since `started`.
    fn hold_taken(&mut self, conn: Server, started: Instant) {
        let now = Instant::now();
        self.shared
            .metrics
            .clients
            .wait_seconds
            .observe(now.duration_since(started).as_secs_f64());
        self.hold(conn, now);
    }

    /// Starts holding a server taken at `now`, under the pool's policy now (a reloaded mode
    /// or setting applies from this transaction on); one the pool flagged idle past
    /// `server.check_delay` is checked first.
    fn hold(&mut self, mut conn: Server, now: Instant) {
        // The pool publishes its policy (a `users:` entry or a `databases:` alias may set its
        // own mode); read again only when it changed.
        let fresh = (self.pool.policy_generation() != self.policy_generation).then(|| {
            let (generation, policy) = self.pool.policy();
            self.policy_generation = generation;
            policy
        });
        if conn.check_due {
            conn.check_due = false;
            self.hold_checked(&mut conn.state, fresh, now);
        } else {
            self.relay
                .hold(&mut conn.state, fresh, now, self.pool.orphans(), None);
        }
        Timer::configure(&mut self.timer, self.relay.stand(None).timed());
        self.cancel.set(
            conn.addr,
            conn.key,
            conn.state.id,
            conn.generation.number(),
            now,
        );
        self.server = Some(conn);
    }

    /// [`Session::hold`] for a server due for its idle check, under the configuration now.
    #[cold]
    #[inline(never)]
    fn hold_checked(&mut self, srv: &mut ServerState, fresh: Option<Policy>, now: Instant) {
        let cfg = self.shared.config.load();
        // A reload may have turned the check off since the pool flagged the server.
        let check = (!cfg.server.check_query.is_empty()).then(|| Check {
            sql: &cfg.server.check_query,
            within: cfg.server.connect_timeout,
        });
        self.relay.hold(srv, fresh, now, self.pool.orphans(), check);
    }
}
