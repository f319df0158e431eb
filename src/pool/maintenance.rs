//! Per-pool housekeeping once a second: retire idle and expired servers, keep the warm
//! minimum open, and start logins for waiters nobody is connecting for. The same task
//! answers waiters at their `query_wait_timeout` deadline, and closes idle servers whose host
//! stopped fitting as soon as that is known.

use std::time::{Duration, Instant};

use super::{CloseReason, Pool};

pub(super) const TICK: Duration = Duration::from_secs(1);

pub(super) fn spawn(pool: Pool) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Armed for the earliest waiter deadline; parked far ahead while nobody waits.
        let sweep = tokio::time::sleep_until(far_future());
        tokio::pin!(sweep);
        let mut topology = pool.inner.backend.hosts.topology().subscribe();
        loop {
            tokio::select! {
                _ = pool.inner.shutdown.cancelled() => break,
                // A host's role or the pool's hosts changed: idle servers that no longer fit
                // go now, not at their next checkout.
                Ok(()) = topology.changed() => pool.sweep_misfits(),
                _ = tick.tick() => {
                    pool.maintain();
                    // A rearm is never missed for longer than a tick.
                    if let Some(at) = pool.sweep_at().filter(|at| *at < sweep.deadline()) {
                        sweep.as_mut().reset(at);
                    }
                }
                _ = &mut sweep => {
                    let next = pool.sweep_waiters(tokio::time::Instant::now());
                    sweep.as_mut().reset(next.unwrap_or_else(far_future));
                }
                _ = pool.inner.rearm.notified() => {
                    sweep.as_mut().reset(pool.sweep_at().unwrap_or_else(far_future));
                }
            }
        }
        // Servers checked in from now on are closed; those already idle go below.
        pool.inner
            .closing
            .store(true, std::sync::atomic::Ordering::Release);
        pool.drop_waiters();
        pool.close_idle_as(CloseReason::Retired);
    });
}

fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(86_400 * 365)
}

impl Pool {
    fn maintain(&self) {
        let now = Instant::now();
        self.settle_debt();
        self.sweep_parked(now, false);
        let s = self.settings();
        let retire = {
            let mut st = self.lock();
            let mut keep = std::collections::VecDeque::with_capacity(st.idle.len());
            let mut retire = Vec::new();
            let mut open = self.open_count();
            let current = st.generation.number();
            // Oldest-used first, so the warm minimum keeps the most recently used servers.
            while let Some(conn) = st.idle.pop_front() {
                let idle_too_long = !s.idle_timeout.is_zero()
                    && now.duration_since(conn.last_used) >= s.idle_timeout
                    && open > s.min_size;
                let reason = if conn.is_expired(now) {
                    Some(CloseReason::Lifetime)
                } else if idle_too_long {
                    Some(CloseReason::IdleTimeout)
                } else if !conn.is_usable_idle() {
                    Some(CloseReason::Unusable)
                } else if conn.generation.number() != current {
                    Some(CloseReason::Reconnect)
                } else {
                    None
                };
                match reason {
                    Some(r) => {
                        open -= 1;
                        retire.push((conn, r));
                    }
                    None => {
                        // A `check_delay` of a tick or more is marked here rather than worked
                        // out at every checkout (see `Pool::take_idle`).
                        let mut conn = conn;
                        conn.check_due = s
                            .check_delay
                            .is_some_and(|d| now.saturating_duration_since(conn.last_used) >= d);
                        keep.push_back(conn)
                    }
                }
            }
            st.idle = keep;
            self.spawn_connects(&mut st);
            retire
        };
        for (conn, reason) in retire {
            self.close(conn, reason);
        }
        // A draining pooler keeps no warm minimum: its servers go back as clients leave.
        let mut open = self.open_count();
        while !self.is_draining() && open < s.min_size && self.spawn_warm() {
            open += 1;
        }
    }
}
