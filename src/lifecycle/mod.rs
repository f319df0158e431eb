//! Process lifecycle: the startup and readiness latches, the liveness watchdog, and the
//! drain that SIGTERM starts (readiness down at once, an accept window for late endpoint
//! updates, closing at transaction boundaries, cancelling stragglers at the deadline).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

mod signal;
pub use signal::{Signal, Watch};

/// Longest silence of an event loop before liveness fails.
pub const LIVENESS_WINDOW: Duration = Duration::from_secs(5);

/// Where a drain is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// Shared by the admin server (which reads it) and the data plane (which drives it).
pub struct Lifecycle {
    born: Instant,
    started: AtomicBool,
    ready: AtomicBool,
    paused: AtomicBool,
    state: AtomicU8,
    accept_beat: AtomicU64,
    maintenance_beat: AtomicU64,
    /// A drain was requested (SIGTERM, SIGINT, `POST /drain`, `SHUTDOWN`).
    pub drain: CancellationToken,
    /// Sessions close at their next transaction boundary with 57P01.
    pub close_idle: Signal,
    /// The deadline passed: sessions end now.
    pub abort: Signal,
    /// PAUSE lifted.
    pub resumed: tokio::sync::Notify,
    /// The console killed clients: sessions waiting for a server look at their own slot
    /// (busy and idle sessions are woken through `close_idle` and `abort`, see [`Lifecycle::kick`]).
    pub kicked: tokio::sync::Notify,
    /// Databases paused (`PAUSE db`) and disabled (`DISABLE db`) in the console; the flag
    /// spares the data plane the lookup while none is paused.
    paused_dbs: std::sync::Mutex<std::collections::BTreeSet<String>>,
    any_db_paused: AtomicBool,
    disabled_dbs: std::sync::Mutex<std::collections::BTreeSet<String>>,
    pub accepted: AtomicU64,
    pub completed: AtomicU64,
    pub refused: AtomicU64,
    pub aborted: AtomicU64,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle {
            born: Instant::now(),
            started: AtomicBool::new(false),
            ready: AtomicBool::new(false),
            paused: AtomicBool::new(false),
            state: AtomicU8::new(DrainState::Serving as u8),
            accept_beat: AtomicU64::new(0),
            maintenance_beat: AtomicU64::new(0),
            drain: CancellationToken::new(),
            close_idle: Signal::default(),
            abort: Signal::default(),
            resumed: tokio::sync::Notify::new(),
            kicked: tokio::sync::Notify::new(),
            paused_dbs: Default::default(),
            any_db_paused: AtomicBool::new(false),
            disabled_dbs: Default::default(),
            accepted: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            aborted: AtomicU64::new(0),
        }
    }
}

impl Lifecycle {
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
        if !self.drain.is_cancelled() {
            self.ready.store(true, Ordering::Release);
        }
    }

    pub fn is_started(&self) -> bool {
        self.started.load(Ordering::Acquire)
    }

    /// Ready: started, not draining, not paused.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire) && !self.paused.load(Ordering::Acquire)
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

    /// Starts a drain: readiness drops at once (a latch: it never comes back).
    pub fn begin_drain(&self) {
        self.ready.store(false, Ordering::Release);
        if self.state() == DrainState::Serving {
            self.set_state(DrainState::Accepting);
        }
        self.drain.cancel();
    }

    pub fn state(&self) -> DrainState {
        match self.state.load(Ordering::Acquire) {
            0 => DrainState::Serving,
            1 => DrainState::Accepting,
            2 => DrainState::Closing,
            _ => DrainState::Stopped,
        }
    }

    pub fn set_state(&self, s: DrainState) {
        self.state.store(s as u8, Ordering::Release);
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
        self.close_idle.kick();
        self.abort.kick();
        self.kicked.notify_waiters();
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
        let l = Lifecycle::default();
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
