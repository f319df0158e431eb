//! The drain, held in one place: its state (an enum that only moves forward, and that the
//! `droidpool_drain_state` gauge follows), and what each task waits on to end, one handle per
//! task in the manner of mini-redis's `Shutdown`: a [`Shutdown`] for the pooler's own loops
//! (accepting, heartbeats, reload), a [`ClientShutdown`] that every client task watches, and
//! for the pools a token cancelled when the pooler stops ([`Drain::pool_token`]) beside the
//! drain's begun flag they read on every checkin.

use std::sync::atomic::{AtomicBool, Ordering};

use prometheus::IntGauge;
use tokio::sync::futures::Notified;
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

use super::signal::{Signal, Watch};

/// Where a drain is; the gauge's value is the number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum DrainState {
    Serving = 0,
    /// Draining, still accepting for the accept window.
    Accepting = 1,
    /// Draining, listener closed, waiting for clients.
    Closing = 2,
    Stopped = 3,
}

impl DrainState {
    pub fn as_str(self) -> &'static str {
        match self {
            DrainState::Serving => "serving",
            DrainState::Accepting => "draining-accepting",
            DrainState::Closing => "draining-closing",
            DrainState::Stopped => "stopped",
        }
    }
}

/// The drain's state and the signals that end client sessions. SIGTERM, SIGINT, `POST /drain`
/// and the console's `SHUTDOWN` begin it; the composition root moves it on and fires the
/// client signals as the drain mode and the deadline say.
#[derive(Debug)]
pub struct Drain {
    state: watch::Sender<DrainState>,
    /// `droidpool_drain_state`: set only where the state moves.
    gauge: IntGauge,
    clients: ClientShutdown,
    /// `state` is past `Serving`: read on every checkin, where the watch takes a lock.
    begun: AtomicBool,
    /// Cancelled when the pooler stops: every pool's own token is a child of it.
    stopped: CancellationToken,
}

impl Drain {
    /// A drain not begun; `gauge` follows its state from now on.
    pub fn new(gauge: IntGauge) -> Self {
        gauge.set(DrainState::Serving as i64);
        Drain {
            state: watch::Sender::new(DrainState::Serving),
            gauge,
            clients: ClientShutdown::default(),
            begun: AtomicBool::new(false),
            stopped: CancellationToken::new(),
        }
    }

    pub fn state(&self) -> DrainState {
        *self.state.borrow()
    }

    /// Whether a drain has begun (it is never undone).
    pub fn is_draining(&self) -> bool {
        self.begun.load(Ordering::Acquire)
    }

    /// Moves the state forward to `to` (never back), the gauge with it.
    fn advance(&self, to: DrainState) {
        let moved = self.state.send_if_modified(|s| {
            let forward = to > *s;
            if forward {
                *s = to;
                // Before the watchers are woken: one that wakes reads it set.
                self.begun.store(true, Ordering::Release);
            }
            forward
        });
        if moved {
            self.gauge.set(to as i64);
        }
    }

    /// Begins the drain: still accepting, for the accept window.
    pub fn begin(&self) {
        self.advance(DrainState::Accepting);
    }

    /// The listener is closed: clients are closed as they finish, at their next transaction
    /// boundary when `at_boundary`.
    pub fn close_listener(&self, at_boundary: bool) {
        self.advance(DrainState::Closing);
        if at_boundary {
            self.clients.close_idle.fire();
        }
    }

    /// The deadline passed: every client task ends now.
    pub fn abort(&self) {
        self.clients.abort.fire();
        self.clients.close_idle.fire();
    }

    /// The pooler has stopped: the loops holding a [`Shutdown`] end, and so do the pools'.
    pub fn stop(&self) {
        self.advance(DrainState::Stopped);
        self.stopped.cancel();
    }

    /// A pool's own token: cancelled when the pooler stops, or by the pool alone when it is
    /// retired.
    pub fn pool_token(&self) -> CancellationToken {
        self.stopped.child_token()
    }

    /// A handle for one of the pooler's own loops.
    pub fn shutdown(&self) -> Shutdown {
        Shutdown {
            state: self.state.subscribe(),
        }
    }

    /// What every client task watches.
    pub fn clients(&self) -> &ClientShutdown {
        &self.clients
    }
}

/// One loop's view of the drain (mini-redis's `Shutdown`): it waits for the drain to begin
/// or for the pooler to stop, whichever ends it.
#[derive(Debug)]
pub struct Shutdown {
    state: watch::Receiver<DrainState>,
}

impl Shutdown {
    /// Waits until a drain has begun (at once if it has).
    pub async fn draining(&mut self) {
        // An error means the drain itself is gone: nothing is left to wait for.
        let _ = self.state.wait_for(|s| *s != DrainState::Serving).await;
    }

    /// Waits until the pooler has stopped (at once if it has).
    pub async fn stopped(&mut self) {
        let _ = self.state.wait_for(|s| *s == DrainState::Stopped).await;
    }
}

/// What a client task watches to end: the drain closing it at its next transaction boundary,
/// the deadline ending it now, the console's KILL waking it to look at its own slot. Reading
/// it is an atomic load, and a pinned [`Watch`] registers its waker once for as long as it
/// lasts, so a busy session pays no allocation and no registration per transaction.
#[derive(Debug, Default)]
pub struct ClientShutdown {
    /// Sessions close at their next transaction boundary with 57P01 (fired by the deadline
    /// too, so a watch of it covers both).
    close_idle: Signal,
    /// The deadline passed: sessions end now.
    abort: Signal,
    /// The console killed clients: sessions waiting for a server look at their own slot
    /// (busy and idle sessions are woken through their watches, see [`ClientShutdown::kick`]).
    kicked: Notify,
}

impl ClientShutdown {
    /// Completes when the session must close at its boundary, or was kicked.
    pub fn closing(&self) -> Watch<'_> {
        self.close_idle.watch()
    }

    /// Completes when the session must end now, or was kicked.
    pub fn aborting(&self) -> Watch<'_> {
        self.abort.watch()
    }

    /// Whether sessions close at their next transaction boundary (or now).
    pub fn is_closing(&self) -> bool {
        self.close_idle.is_fired()
    }

    /// Whether sessions end now.
    pub fn is_aborted(&self) -> bool {
        self.abort.is_fired()
    }

    /// Completes at the next kick, from its creation on: make it before looking at the slot.
    pub fn kicked(&self) -> Notified<'_> {
        self.kicked.notified()
    }

    /// Wakes every idle session once (busy ones and those waiting for a server sleep on): an
    /// idle one that may be parked leaves its task (`client::park`).
    pub fn nudge_idle(&self) {
        self.close_idle.kick();
    }

    /// Wakes every session once, wherever it waits (idle, busy, or for a server), to see
    /// whether the console has killed it; nothing else changes for the others.
    pub fn kick(&self) {
        self.close_idle.kick();
        self.abort.kick();
        self.kicked.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The state only moves forward, the gauge with it; a loop's handle sees the drain begin
    /// and the pooler stop, even when it asks late.
    #[tokio::test]
    async fn the_state_moves_forward_and_the_gauge_follows() {
        let gauge = IntGauge::new("drain_state", "test").unwrap();
        let drain = Drain::new(gauge.clone());
        assert!(!drain.is_draining());
        let mut early = drain.shutdown();
        let waiting = tokio::spawn(async move {
            early.draining().await;
            early.stopped().await;
        });
        drain.begin();
        assert_eq!((drain.state(), gauge.get()), (DrainState::Accepting, 1));
        drain.close_listener(false);
        assert!(!drain.clients().is_closing());
        drain.begin();
        assert_eq!((drain.state(), gauge.get()), (DrainState::Closing, 2));
        let pool = drain.pool_token();
        assert!(drain.is_draining() && !pool.is_cancelled());
        drain.stop();
        assert_eq!((drain.state(), gauge.get()), (DrainState::Stopped, 3));
        assert!(pool.is_cancelled(), "the stop reaches every pool");
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the handle saw the drain begin and the pooler stop")
            .unwrap();
        let mut late = drain.shutdown();
        late.draining().await;
        late.stopped().await;
    }

    #[test]
    fn the_deadline_ends_sessions_at_once_and_at_their_boundary() {
        let drain = Drain::new(IntGauge::new("drain_state", "test").unwrap());
        drain.close_listener(true);
        assert!(drain.clients().is_closing() && !drain.clients().is_aborted());
        drain.abort();
        assert!(drain.clients().is_closing() && drain.clients().is_aborted());
    }
}
