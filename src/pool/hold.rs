//! The hold through a failover (`failover.hold_timeout`): while no host fits (every breaker
//! open, or only standbys where a primary is needed), a transaction that needs a new server
//! waits for one up to the hold, never past `pool.query_wait_timeout` and within
//! `pool.max_waiting_clients`, instead of getting 57P03 at once. Waiters keep their arrival
//! order, so the first server that fits serves the first of them; logins go on within the
//! breakers meanwhile (see `connect`).

use super::{Pool, PoolSettings, PoolState};

impl Pool {
    /// No host fits from `now` on: every waiter not yet held waits at most the hold from now.
    pub(super) fn enter_hold(&self) {
        let mut st = self.lock();
        self.hold_locked(&mut st, &self.settings());
    }

    /// As [`Pool::enter_hold`], with the pool state locked.
    pub(super) fn hold_locked(&self, st: &mut PoolState, s: &PoolSettings) {
        if s.hold_timeout.is_zero() || st.held {
            return;
        }
        st.held = true;
        let until = tokio::time::Instant::now() + s.hold_timeout;
        for w in st.waiters.iter_mut() {
            if w.deadline.map_or(true, |d| until <= d) {
                w.deadline = Some(until);
                w.held = true;
            }
        }
        if st.sweep_at.map_or(true, |at| until < at) {
            st.sweep_at = Some(until);
            self.inner.rearm.notify_one();
        }
    }

    /// A new waiter's deadline (`query_wait_timeout`, or the hold's if that comes first) and
    /// whether it is the hold's.
    pub(super) fn deadline_for(
        st: &PoolState,
        s: &PoolSettings,
        since: tokio::time::Instant,
    ) -> (Option<tokio::time::Instant>, bool) {
        let wait = s.query_wait_timeout;
        let deadline = (!wait.is_zero()).then(|| since + wait);
        if st.held && !s.hold_timeout.is_zero() {
            let until = since + s.hold_timeout;
            if deadline.map_or(true, |d| until <= d) {
                return (Some(until), true);
            }
        }
        (deadline, false)
    }
}
