//! Process lifecycle: the startup and readiness latches, the liveness watchdog, PAUSE and
//! DISABLE, and the drain that SIGTERM starts (readiness down at once, an accept window for
//! late endpoint updates, closing at transaction boundaries, cancelling stragglers at the
//! deadline; see `drain`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use prometheus::IntGauge;

mod drain;
mod signal;
mod ticks;
pub use drain::{ClientShutdown, Drain, DrainState, Shutdown};
pub use signal::{Signal, Watch};
pub use ticks::Ticks;

/// Longest silence of an event loop before liveness fails.
pub const LIVENESS_WINDOW: Duration = Duration::from_secs(5);

/// How often the data plane's housekeeping runs (see [`Ticks`]).
pub const TICK: Duration = Duration::from_secs(1);

/// Shared by the admin server (which reads it) and the data plane (which drives it).
pub struct Lifecycle {
    born: Instant,
    started: AtomicBool,
    paused: AtomicBool,
    accept_beat: AtomicU64,
    maintenance_beat: AtomicU64,
    /// The data plane's housekeeping clock (clone it to wait for ticks).
    pub ticks: Ticks,
    /// The drain: its state, and what the tasks wait on to end.
    pub drain: Drain,
    /// PAUSE lifted.
    resumed: tokio::sync::Notify,
    /// Databases paused (`PAUSE db`) and disabled (`DISABLE db`) in the console; the flag
    /// spares the data plane the lookup while none is paused.
    paused_dbs: std::sync::Mutex<std::collections::BTreeSet<String>>,
    any_db_paused: AtomicBool,
    disabled_dbs: std::sync::Mutex<std::collections::BTreeSet<String>>,
    pub accepted: AtomicU64,
    pub completed: AtomicU64,
    pub refused: AtomicU64,
    pub aborted: AtomicU64,
    /// A second SIGTERM/SIGINT: stop now, whatever the drain is doing.
    interrupted: AtomicBool,
    interrupt: tokio::sync::Notify,
}

impl Lifecycle {
    /// A pooler not started yet, whose drain state `drain_gauge` (`droidpool_drain_state`)
    /// follows.
    pub fn new(drain_gauge: IntGauge) -> Self {
        Lifecycle {
            born: Instant::now(),
            started: AtomicBool::new(false),
            paused: AtomicBool::new(false),
            accept_beat: AtomicU64::new(0),
            maintenance_beat: AtomicU64::new(0),
            ticks: Ticks::start(TICK),
            drain: Drain::new(drain_gauge),
            resumed: tokio::sync::Notify::new(),
            paused_dbs: Default::default(),
            any_db_paused: AtomicBool::new(false),
            disabled_dbs: Default::default(),
            accepted: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            aborted: AtomicU64::new(0),
            interrupted: AtomicBool::new(false),
            interrupt: tokio::sync::Notify::new(),
        }
    }

    /// Stop now (a second signal): the composition root returns at once, and the process
    /// exits with the code `main.rs` gives an interrupted stop.
    pub fn interrupt(&self) {
        self.interrupted.store(true, Ordering::Release);
        self.interrupt.notify_waiters();
    }

    /// Waits for [`Lifecycle::interrupt`].
    pub async fn interrupted(&self) {
        loop {
            let notified = self.interrupt.notified();
            if self.interrupted.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }

    /// How long this pooler has been up.
    pub fn uptime(&self) -> std::time::Duration {
        self.born.elapsed()
    }

    fn now_ms(&self) -> u64 {
        self.born.elapsed().as_millis() as u64
    }

    /// Config loaded and listener bound: startup done, readiness latched up.
    pub fn mark_started(&self) {
        self.accept_beat.store(self.now_ms(), Ordering::Relaxed);
        self.maintenance_beat
            .store(self.now_ms(), Ordering::Relaxed);
        self.started.store(true, Ordering::Release);
    }

    pub fn is_started(&self) -> bool {
        self.started.load(Ordering::Acquire)
    }

    /// Ready: started, not draining, not paused. A latch: up once started, down for good
    /// when a drain begins.
    pub fn is_ready(&self) -> bool {
        self.is_started() && !self.drain.is_draining() && !self.is_paused()
    }

    pub fn accept_beat(&self) {
        self.accept_beat.store(self.now_ms(), Ordering::Relaxed);
    }

    pub fn maintenance_beat(&self) {
        self.maintenance_beat
            .store(self.now_ms(), Ordering::Relaxed);
    }

    /// Alive while both event loops beat within the window. Never looks at PostgreSQL.
    pub fn is_live(&self) -> bool {
        if !self.is_started() {
            return true;
        }
        let now = self.now_ms();
        let window = LIVENESS_WINDOW.as_millis() as u64;
        let fresh = |beat: &AtomicU64| now.saturating_sub(beat.load(Ordering::Relaxed)) < window;
        fresh(&self.accept_beat) && fresh(&self.maintenance_beat)
    }

    /// Starts a drain (SIGTERM, SIGINT, `POST /drain`, `SHUTDOWN`): readiness drops at once
    /// (a latch: it never comes back).
    pub fn begin_drain(&self) {
        self.drain.begin();
    }

    pub fn state(&self) -> DrainState {
        self.drain.state()
    }

    /// Whether a drain has begun.
    pub fn is_draining(&self) -> bool {
        self.drain.is_draining()
    }

    /// The handle one of the pooler's own loops ends by.
    pub fn shutdown(&self) -> Shutdown {
        self.drain.shutdown()
    }

    /// What every client task watches to end.
    pub fn client_shutdown(&self) -> &ClientShutdown {
        self.drain.clients()
    }

    pub fn pause(&self) {
        self.paused.store(true, Ordering::Release);
    }

    pub fn resume(&self) {
        self.paused.store(false, Ordering::Release);
        self.resumed.notify_waiters();
    }

    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Acquire)
    }

    /// Whether new transactions on `db` wait: everything is paused, or that database is.
    pub fn is_paused_for(&self, db: &str) -> bool {
        self.is_paused()
            || (self.any_db_paused.load(Ordering::Acquire) && lock(&self.paused_dbs).contains(db))
    }

    /// `PAUSE db`.
    pub fn pause_db(&self, db: &str) {
        let mut set = lock(&self.paused_dbs);
        set.insert(db.to_owned());
        self.any_db_paused.store(true, Ordering::Release);
    }

    /// `RESUME db`.
    pub fn resume_db(&self, db: &str) {
        let mut set = lock(&self.paused_dbs);
        set.remove(db);
        self.any_db_paused.store(!set.is_empty(), Ordering::Release);
        drop(set);
        self.resumed.notify_waiters();
    }

    pub fn paused_dbs(&self) -> Vec<String> {
        lock(&self.paused_dbs).iter().cloned().collect()
    }

    /// `DISABLE db` (`false`: `ENABLE db`): new clients of `db` are refused.
    pub fn set_disabled(&self, db: &str, disabled: bool) {
        let mut set = lock(&self.disabled_dbs);
        if disabled {
            set.insert(db.to_owned());
        } else {
            set.remove(db);
        }
    }

    pub fn is_disabled(&self, db: &str) -> bool {
        lock(&self.disabled_dbs).contains(db)
    }

    /// Wakes every session once, wherever it waits (idle, busy, or for a server), to see
    /// whether the console has killed it; nothing else changes for the others.
    pub fn kick(&self) {
        self.drain.clients().kick();
    }

    /// Waits while PAUSE (of everything or of `db`) holds new transactions.
    pub async fn wait_unpaused_for(&self, db: &str) {
        while self.is_paused_for(db) {
            let notified = self.resumed.notified();
            if !self.is_paused_for(db) {
                return;
            }
            notified.await;
        }
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_is_a_latch() {
        let l = Lifecycle::new(IntGauge::new("drain_state", "test").unwrap());
        assert!(!l.is_ready());
        assert!(l.is_live());
        l.mark_started();
        assert!(l.is_ready() && l.is_live());
        l.pause();
        assert!(!l.is_ready());
        l.resume();
        assert!(l.is_ready());
        l.begin_drain();
        assert!(!l.is_ready());
        assert_eq!(l.state(), DrainState::Accepting);
        l.mark_started();
        assert!(!l.is_ready(), "a drain is never undone");
        assert!(l.is_live(), "liveness does not follow readiness");
    }
}
