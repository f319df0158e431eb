//! Standbys kept between logins. A login that finds only standbys where writes are needed
//! leaves the standby it reached here, holding the login's pool slot, instead of closing it;
//! the next login that rechecks that host asks this connection its role again rather than
//! logging in anew. Rechecking then costs the standby a query, not a login, and the
//! promotion's first server is this very connection (PostgreSQL keeps a promoted standby's
//! sessions, and they take writes), so a promotion brings the new primary no more logins
//! than the pool has slots. One per host; closed after [`PARKED_FOR`] without a recheck, on
//! RECONNECT, when its host leaves the route, and when the pool shuts down.

use std::time::{Duration, Instant};

use super::Pool;
use crate::config::HostAddr;
use crate::server::{Generation, ServerConn, Slots};

/// How long a kept standby waits for the next login to ask it again.
pub(super) const PARKED_FOR: Duration = Duration::from_secs(60);

impl Pool {
    /// Keeps `conn`, a standby a failed login reached, with that login's slots: the first
    /// kept standby of each host stays, any other is closed.
    pub(super) fn park(&self, mut conn: ServerConn, slots: Slots, generation: Generation) {
        let Some(host) = conn.host.clone() else {
            return self.close_parked(Box::new(conn));
        };
        conn.slots = slots;
        conn.generation = generation;
        conn.last_used = Instant::now();
        let mut st = self.lock();
        let taken = st
            .parked
            .iter()
            .any(|p| p.host.as_ref().is_some_and(|h| h.addr == host.addr));
        if taken
            || self
                .inner
                .closing
                .load(std::sync::atomic::Ordering::Acquire)
        {
            drop(st);
            return self.close_parked(Box::new(conn));
        }
        st.parked.push(Box::new(conn));
    }

    /// The kept standby of `addr`, if any (its slots go with it until its login ends).
    pub(super) fn unpark(&self, addr: &HostAddr) -> Option<ServerConn> {
        let mut st = self.lock();
        let i = st
            .parked
            .iter()
            .position(|p| p.host.as_ref().is_some_and(|h| &h.addr == addr))?;
        Some(*st.parked.swap_remove(i))
    }

    /// How many standbys are kept (each holds a slot but serves nobody).
    pub(super) fn parked_count(&self) -> usize {
        self.lock().parked.len()
    }

    /// Closes kept standbys nobody asked for [`PARKED_FOR`], of an older generation, or
    /// whose host is no longer the pool's; every one when `all`.
    pub(super) fn sweep_parked(&self, now: Instant, all: bool) {
        let out: Vec<_> = {
            let mut st = self.lock();
            let current = st.generation.number();
            let route = st.route.clone();
            let (out, keep) = std::mem::take(&mut st.parked).into_iter().partition(|p| {
                all || now.saturating_duration_since(p.last_used) >= PARKED_FOR
                    || p.generation.number() != current
                    || !p
                        .host
                        .as_ref()
                        .is_some_and(|h| route.hosts.iter().any(|r| r.record.addr == h.addr))
            });
            st.parked = keep;
            out
        };
        for conn in out {
            self.close_parked(conn);
        }
    }

    /// A kept standby never served: no server event, its slots back at once.
    fn close_parked(&self, mut conn: Box<ServerConn>) {
        drop(std::mem::take(&mut conn.slots));
        self.settle_debt();
        tokio::spawn(super::terminate(conn));
    }
}
