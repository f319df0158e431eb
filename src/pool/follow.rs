//! Following the primary: a server whose host no longer fits its pool (now a standby, made
//! read-only, promoted away from a standby pool, or dropped from the pool's hosts by a reload)
//! is not handed out again: idle ones are closed as soon as the change is known, busy ones
//! when their client releases them. A server that answered 25006 is asked at release whether
//! its host still takes writes (a client's own read-only transaction says nothing about the
//! host). Until the topology changes this costs one atomic load per checkout and checkin.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use super::hosts::Route;
use super::settings::RouteSpec;
use super::{CloseReason, Pool};
use crate::server::{self, Server, ServerConn};

impl Pool {
    /// The route in force.
    pub(super) fn route(&self) -> Arc<Route> {
        self.lock().route.clone()
    }

    /// Applies reloaded hosts and roles: servers outside them are closed at release (idle
    /// ones at once, by the maintenance task the change wakes).
    pub fn set_route(&self, spec: RouteSpec) {
        {
            let mut st = self.lock();
            if st.route.spec == spec {
                return;
            }
            st.route = Arc::new(Route::new(spec, &self.inner.backend.hosts));
        }
        self.inner.backend.hosts.topology().bump();
    }

    /// Whether `conn` may serve this pool's clients now: at once while the topology is what
    /// it was when `conn` was last checked.
    #[inline]
    pub(super) fn check_fit(
        &self,
        route: &Route,
        conn: &mut ServerConn,
    ) -> Result<(), CloseReason> {
        let epoch = self.inner.backend.hosts.topology().epoch();
        if conn.fit_epoch == epoch {
            return Ok(());
        }
        self.refit(route, conn, epoch)
    }

    #[cold]
    fn refit(&self, route: &Route, conn: &mut ServerConn, epoch: u64) -> Result<(), CloseReason> {
        self.publish_roles();
        if let Some(h) = &conn.host {
            route.admits(h)?;
        }
        conn.fit_epoch = epoch;
        Ok(())
    }

    /// Closes the idle servers that no longer fit (after a role or route change).
    pub(super) fn sweep_misfits(&self) {
        let out: Vec<_> = {
            let mut st = self.lock();
            let route = st.route.clone();
            let mut keep = VecDeque::with_capacity(st.idle.len());
            let mut out = Vec::new();
            for mut conn in st.idle.drain(..) {
                match self.check_fit(&route, &mut conn) {
                    Ok(()) => keep.push_back(conn),
                    Err(reason) => out.push((conn, reason)),
                }
            }
            st.idle = keep;
            out
        };
        for (conn, reason) in out {
            self.close(conn, reason);
        }
        // Each change is published once, by whichever pool sees it first.
        self.publish_roles();
    }

    pub(super) fn publish_roles(&self) {
        let i = &self.inner;
        i.backend.hosts.publish_roles(&i.metrics, &i.events);
    }

    /// A server that answered 25006 in a pool that needs writes: asked its role before it
    /// goes back; one whose host no longer takes writes is closed by that checkin.
    pub(super) fn verify_writable(&self, mut conn: Server) {
        let pool = self.clone();
        let used = self.resetting();
        tokio::spawn(async move {
            let limit = pool.inner.target.connect_timeout;
            let asked = tokio::time::timeout(limit, server::ask_role(&mut conn)).await;
            drop(used);
            match asked {
                Ok(Ok(role)) => {
                    if let Some(h) = &conn.host {
                        h.learned(role, Instant::now());
                    }
                    conn.read_only_error = false;
                    pool.checkin(conn);
                }
                _ => pool.discard(conn, CloseReason::Broken),
            }
        });
    }
}
