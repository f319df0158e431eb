//! Taking a server for a client: at once when one is idle and was used recently, else by
//! waiting in the pool (still noticing the client leaving or a console KILL, and held by
//! PAUSE), checking a server idle past `server.check_delay`. The relay then brings the
//! server's session in line with the client's before the client's first message runs there
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
use crate::pool::CloseReason;
use crate::server::Server;

/// What [`Session::acquire_now`] leaves for the waiting path.
pub(super) struct Taken {
    pub(super) started: Instant,
    /// The pid of a server the message in front signals: not to be taken for it.
    pub(super) spare: Option<NonZeroI32>,
    /// A server taken at once that is due for its idle check.
    pub(super) conn: Option<Server>,
}

impl Session {
    /// The common case without a future: an idle server, taken at once. Otherwise hands
    /// [`Session::acquire`] what it needs: the clock read, and the server taken if it is due
    /// for its idle check. A message that signals a backend by pid (`spare`, from
    /// [`crate::relay::Next::NeedServer`]) takes the waiting path, which spares that
    /// backend's server.
    pub(super) fn acquire_now(&mut self, spare: Option<NonZeroI32>) -> Result<(), Taken> {
        let started = Instant::now();
        if spare.is_some() || self.shared.lifecycle.is_paused_for(self.pool.database()) {
            return Err(Taken {
                started,
                spare,
                conn: None,
            });
        }
        match self.pool.try_checkout(started) {
            // One idle past server.check_delay is checked first, on the waiting path.
            Some(conn) if !conn.check_due => {
                self.shared.metrics.clients.wait_seconds.observe(0.0);
                self.hold(conn, started);
                Ok(())
            }
            conn => Err(Taken {
                started,
                spare: None,
                conn,
            }),
        }
    }

    /// Takes a server from the pool (or finishes with the one `taken` holds), waiting if need
    /// be, still noticing if the client leaves meanwhile.
    pub(super) async fn acquire(&mut self, taken: Taken) -> Result<(), ClientError> {
        let Taken {
            started,
            spare,
            mut conn,
        } = taken;
        loop {
            let c = match conn.take() {
                Some(c) => c,
                None => {
                    // The wait is written out here rather than in a future of its own: most
                    // transactions wait when clients outnumber servers.
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
                    let r = reading_client(&mut self.client, &mut self.relay, checkout).await?;
                    if self.cancel.is_killed() {
                        if let Ok(conn) = r {
                            self.pool.discard(conn, CloseReason::Killed);
                        }
                        return Err(ClientError::Killed);
                    }
                    r?
                }
            };
            // The common case after a wait, without entering the check's future.
            if !c.check_due {
                self.hold_taken(c, started);
                return Ok(());
            }
            // One that fails its check is closed: the next idle server, or a new login. Boxed:
            // a large future, not due on most waits.
            if let Some(c) = Box::pin(self.checked(c)).await? {
                self.hold_taken(c, started);
                return Ok(());
            }
        }
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

    /// Starts holding a server taken (and synced) at `now`, under the pool's policy now (a
    /// reloaded mode or setting applies from this transaction on).
    fn hold(&mut self, mut conn: Server, now: Instant) {
        // The pool publishes its policy (a `users:` entry or a `databases:` alias may set its
        // own mode); read again only when it changed.
        let fresh = (self.pool.policy_generation() != self.policy_generation).then(|| {
            let (generation, policy) = self.pool.policy();
            self.policy_generation = generation;
            policy
        });
        self.relay
            .hold(&mut conn.state, fresh, now, self.pool.orphans());
        Timer::configure(&mut self.timer, self.relay.policy().has_timeouts());
        self.cancel.set(
            conn.addr,
            conn.key,
            conn.state.id,
            conn.generation.number(),
            now,
        );
        self.server = Some(conn);
    }
}
