//! Per-pool housekeeping once a second: retire idle and expired servers, keep the warm
//! minimum open, and start logins for waiters nobody is connecting for. The same task
//! answers waiters at their `query_wait_timeout` deadline, and closes idle servers whose host
//! stopped fitting as soon as that is known.

use std::pin::Pin;
use std::time::Instant;

use tokio::time::Sleep;

use crate::lifecycle::Ticks;

use super::{CloseReason, Pool};

pub(super) fn spawn(pool: Pool, mut ticks: Ticks) {
    tokio::spawn(async move {
        // Armed only while a waiter has a deadline: otherwise the pool keeps no timer in the
        // data plane's wheel (see `Ticks`).
        let mut sweep: Option<Pin<Box<Sleep>>> = None;
        let mut topology = pool.inner.backend.hosts.topology().subscribe();
        loop {
            tokio::select! {
                _ = pool.inner.shutdown.cancelled() => break,
                // A host's role or the pool's hosts changed: idle servers that no longer fit
                // go now, not at their next checkout.
                Ok(()) = topology.changed() => pool.sweep_misfits(),
                _ = ticks.tick() => {
                    pool.maintain();
                    // A rearm is never missed for longer than a tick, and a timer nobody waits
                    // on any more is dropped (the wheel is then empty again).
                    match pool.sweep_at() {
                        Some(at) if sweep.as_ref().map_or(true, |s| at < s.deadline()) => {
                            arm(&mut sweep, Some(at));
                        }
                        Some(_) => {}
                        None => sweep = None,
                    }
                }
                _ = armed(&mut sweep) => {
                    let next = pool.sweep_waiters(tokio::time::Instant::now());
                    arm(&mut sweep, next);
                }
                _ = pool.inner.rearm.notified() => arm(&mut sweep, pool.sweep_at()),
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

/// The sweep's timer set for `at`, or none.
fn arm(sweep: &mut Option<Pin<Box<Sleep>>>, at: Option<tokio::time::Instant>) {
    match (at, sweep.as_mut()) {
        (Some(at), Some(s)) => s.as_mut().reset(at),
        (Some(at), None) => *sweep = Some(Box::pin(tokio::time::sleep_until(at))),
        (None, _) => *sweep = None,
    }
}

/// Completes when the sweep's timer fires; never while none is armed.
async fn armed(sweep: &mut Option<Pin<Box<Sleep>>>) {
    match sweep {
        Some(s) => s.as_mut().await,
        None => std::future::pending().await,
    }
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
