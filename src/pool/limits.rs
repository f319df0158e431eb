//! What a login counts against beyond its pool's size: the reserve, and the limits pools
//! share (PgBouncer's `max_db_connections`, `max_user_connections`, `reserve_pool_size`).
//! A pool at a shared limit waits as a full pool does; its login queues for the limit's
//! next free slot behind other pools' (first come, first served) after closing the oldest
//! idle server of another pool, as PgBouncer evicts one. A server released with nobody of its
//! own pool waiting goes when another pool waits for its room. Nothing here runs per
//! transaction but two atomic reads per limit at checkin.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::OwnedSemaphorePermit;

use super::{CloseReason, Limit, LimitKind, Pool, PoolClient, PoolState};
use crate::metrics::LimitCounts;
use crate::server::Slots;

impl Pool {
    /// The slots one more login needs: the pool's (or, once a client has waited
    /// `reserve_timeout`, the reserve's) and every shared limit's. `None` when one is full;
    /// a full shared limit is then waited for in the background.
    pub(super) fn take_slots(&self, st: &mut PoolState) -> Option<Slots> {
        let (pool, reserve) = match self.inner.capacity.try_take() {
            Some(p) => (p, false),
            None => (self.reserve_slot(st)?, true),
        };
        let mut shared = Vec::with_capacity(self.inner.limits.len());
        for (i, limit) in self.inner.limits.iter().enumerate() {
            let granted = st.granted.get_mut(i).and_then(Option::take);
            match granted.or_else(|| limit.cap.try_take()) {
                Some(slot) => shared.push(slot),
                None => {
                    self.wait_for_limit(st, i);
                    return None;
                }
            }
        }
        Some(Slots {
            pool: Some(pool),
            reserve,
            shared,
        })
    }

    /// Whether a reserve slot could be taken now (checked before anything is taken).
    #[inline]
    pub(super) fn reserve_open(&self, st: &PoolState) -> bool {
        self.inner.reserve.available() > 0 && self.reserve_due(st)
    }

    /// The oldest client still waiting has waited `reserve_timeout`.
    fn reserve_due(&self, st: &PoolState) -> bool {
        let s = self.settings();
        s.reserve_size > 0
            && st
                .waiters
                .iter()
                .find(|w| !w.is_closed())
                .is_some_and(|w| w.since.elapsed() >= s.reserve_timeout)
    }

    fn reserve_slot(&self, st: &PoolState) -> Option<OwnedSemaphorePermit> {
        if !self.reserve_open(st) {
            return None;
        }
        let slot = self.inner.reserve.try_take()?;
        tracing::info!(pool = %self.log_name(), "a client waited pool.reserve_timeout: opening a reserve server");
        Some(slot)
    }

    /// Queues one login of this pool for `limits[i]`'s next free slot (once at a time), after
    /// closing the oldest idle server of another pool under that limit.
    fn wait_for_limit(&self, st: &mut PoolState, i: usize) {
        let bit = 1u32 << i;
        if st.waiting_on & bit != 0 {
            return;
        }
        st.waiting_on |= bit;
        let pool = self.clone();
        tokio::spawn(async move {
            let limit = pool.inner.limits[i].clone();
            pool.evict_for(&limit);
            let slot = tokio::select! {
                s = limit.wait() => s,
                _ = pool.inner.shutdown.cancelled() => None,
            };
            pool.limit_granted(i, slot);
        });
    }

    /// A slot of `limits[i]` came free for this pool: logins start if clients still wait; an
    /// unused slot passes on to the next pool in line.
    fn limit_granted(&self, i: usize, slot: Option<OwnedSemaphorePermit>) {
        let unused = {
            let mut st = self.lock();
            st.waiting_on &= !(1u32 << i);
            if let Some(g) = st.granted.get_mut(i) {
                *g = slot;
            }
            self.spawn_connects(&mut st);
            st.granted.get_mut(i).and_then(Option::take)
        };
        drop(unused);
    }

    /// Closes the least recently used idle server of another pool under `limit`, if any; a
    /// standby another pool keeps for its next recheck (it serves nobody) goes first.
    fn evict_for(&self, limit: &Limit) {
        let mut oldest: Option<(Instant, Pool)> = None;
        for inner in limit.members() {
            if Arc::ptr_eq(&inner, &self.inner) {
                continue;
            }
            let other = Pool { inner };
            if other.parked_count() > 0 {
                return other.sweep_parked(Instant::now(), true);
            }
            let at = other.lock().idle.front().map(|c| c.last_used);
            if let Some(at) = at {
                if oldest.as_ref().map_or(true, |(o, _)| at < *o) {
                    oldest = Some((at, other));
                }
            }
        }
        let Some((_, other)) = oldest else {
            return;
        };
        let conn = other.lock().idle.pop_front();
        if let Some(conn) = conn {
            tracing::debug!(pool = %other.log_name(), limit = limit.kind.setting(), "closing an idle server to make room for another pool");
            other.close(conn, CloseReason::Evicted);
        }
    }

    /// A shared limit was lowered below what is open: a released server goes.
    #[inline]
    pub(super) fn limits_over(&self) -> bool {
        self.inner.limits.iter().any(|l| l.cap.is_over())
    }

    /// A shared limit is lowered or another pool waits for room under it.
    #[inline]
    pub(super) fn limits_want_room(&self) -> bool {
        self.inner.limits.iter().any(|l| l.wants_room())
    }

    fn limit(&self, kind: LimitKind) -> Option<&Arc<Limit>> {
        self.inner.limits.iter().find(|l| l.kind == kind)
    }

    /// The shared limits' counts, for status and metrics.
    pub(super) fn limit_snapshot(&self) -> LimitCounts {
        let counts = |k| {
            self.limit(k)
                .map_or((0, 0), |l| (l.open() as i64, l.max() as i64))
        };
        let (db_connections, max_db_connections) = counts(LimitKind::Database);
        let (user_connections, max_user_connections) = counts(LimitKind::User);
        LimitCounts {
            db_connections,
            max_db_connections,
            user_connections,
            max_user_connections,
            user_clients: self
                .limit(LimitKind::User)
                .map_or(0, |l| l.clients() as i64),
        }
    }

    /// A session attaches to the pool for its life, unless its user already has `max`
    /// clients (`client.max_user_connections`; `0`: no limit).
    pub fn try_attach(&self, max: usize) -> Option<PoolClient> {
        if let Some(user) = self.limit(LimitKind::User) {
            if !user.add_client(max) {
                return None;
            }
        }
        self.inner.clients.fetch_add(1, Ordering::Relaxed);
        Some(PoolClient(self.clone()))
    }

    /// A session left: its user has one client fewer.
    pub(super) fn detach_user_client(&self) {
        if let Some(user) = self.limit(LimitKind::User) {
            user.remove_client();
        }
    }
}
