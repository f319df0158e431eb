//! What a finished login does: its server goes to the first live waiter (ending a hold),
//! or its failure to the waiters: every one when no server will come back soon, one
//! otherwise, none while the pool holds them (`failover.hold_timeout`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::connect::Failure;
use super::{Pool, PoolError};
use crate::logs::Escaped;
use crate::server::{Generation, ServerConn, Slots};

impl Pool {
    pub(super) fn login_done(
        &self,
        res: Result<ServerConn, Failure>,
        slots: Slots,
        generation: Generation,
    ) {
        self.lock().connecting -= 1;
        let count = |result: &str| {
            self.inner
                .metrics
                .servers
                .connects
                .with_label_values(&[result])
                .inc()
        };
        let held = !self.settings().hold_timeout.is_zero();
        match res {
            Ok(mut conn) => {
                count("success");
                self.inner.login_ok.store(true, Ordering::Relaxed);
                conn.id = self.inner.counters.next_server_id();
                conn.slots = slots;
                conn.generation = generation;
                conn.expires = self.expiry();
                self.inner.events.server_connected(conn.id);
                self.publish_roles();
                {
                    let mut st = self.lock();
                    st.held = false;
                    if st.startup_params.is_none() {
                        st.startup_params = Some(Arc::new(conn.params().clone()));
                    }
                }
                self.checkin(Box::new(conn));
                if held {
                    // The hold is over: the clients still queued need servers of their own.
                    self.lock_and_spawn();
                }
            }
            Err(mut failure) => {
                // A standby reached is kept, with this login's slots, for the next recheck.
                match &mut failure {
                    Failure::NoFit(_, standbys) if !standbys.is_empty() => {
                        let first = standbys.swap_remove(0);
                        for extra in standbys.drain(..) {
                            tokio::spawn(super::terminate(Box::new(extra)));
                        }
                        self.park(first, slots, generation);
                    }
                    _ => drop(slots),
                }
                self.inner.login_ok.store(false, Ordering::Relaxed);
                self.publish_roles();
                self.login_failed(failure, held, count);
            }
        }
    }

    fn login_failed(&self, failure: Failure, held: bool, count: impl Fn(&str)) {
        let (err, label) = self.failure_error(failure);
        count(label);
        if label == "config_error" {
            if let Some(earlier_not_logged) = self.inner.backend.refused_logins.admit() {
                tracing::error!(pool = %self.log_name(), error = %Escaped::new(&err), earlier_not_logged, "server login refused: check credentials and database");
            }
            return self.fail_waiters(err, true);
        }
        if held {
            // Held clients wait out their hold; the next login starts with the next arrival
            // or maintenance tick.
            return self.enter_hold();
        }
        // With no server open, nobody will be served soon: tell every waiter now. Otherwise a
        // busy server will come back; fail only one waiter (a circuit or no-fit answer goes to
        // every waiter: no login will start before the next arrival).
        let all = !matches!(err, PoolError::Unavailable { .. })
            || self.open_count() == self.parked_count();
        self.fail_waiters(err, all);
    }

    /// What a client is told of a failed login, and the `result` label it is counted under.
    pub(super) fn failure_error(&self, failure: Failure) -> (PoolError, &'static str) {
        match failure {
            Failure::CircuitOpen(retry_after) => (self.circuit_error(retry_after), "circuit_open"),
            Failure::NoFit(what, _) => (
                PoolError::NoHostFits {
                    database: self.inner.database.clone(),
                    want: self.lock().route.tsa(),
                    detail: what,
                },
                "no_fit",
            ),
            Failure::Server(e) if e.is_config_error() => {
                (PoolError::from_server(&e), "config_error")
            }
            Failure::Server(e) => (
                PoolError::Unavailable {
                    database: self.inner.database.clone(),
                    source: Arc::new(e),
                },
                "failure",
            ),
        }
    }

    fn fail_waiters(&self, err: PoolError, all: bool) {
        let mut st = self.lock();
        while let Some(w) = st.waiters.pop_front() {
            let delivered = w.send(Err(err.clone())).is_ok();
            if delivered && !all {
                break;
            }
        }
    }
}
