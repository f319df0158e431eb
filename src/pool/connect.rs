//! Opening server connections: the only thing the pooler retries. A login runs under the
//! backend's circuit breaker; a transient failure is retried with capped exponential backoff
//! and full jitter while clients still wait and the retry budget allows (a refused retry counts
//! as overflow); at most `max_connecting` logins are in flight per pool. Wrong credentials or
//! an unknown database are never retried.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Pool, PoolError, PoolState};
use crate::resilience::{Admission, Backoff, BreakerState, CircuitBreaker, RetryBudget};
use crate::server::{self, Generation, ServerConn, ServerError, Slots};

/// The backend's shared failure handling: one breaker and one retry budget for all pools.
pub struct Backend {
    pub name: String,
    pub breaker: CircuitBreaker,
    pub budget: RetryBudget,
    pub backoff: crate::resilience::BackoffConfig,
    pub max_connecting: usize,
    /// What a client refused while a probe runs is told to wait.
    pub probe_hint: Duration,
}

impl Backend {
    pub fn from_config(cfg: &crate::config::Config) -> Backend {
        // Config::validate has checked these; the defaults are the fallback of last resort.
        let breaker = CircuitBreaker::new(&cfg.breaker)
            .or_else(|_| CircuitBreaker::new(&Default::default()))
            .expect("the default breaker settings are valid");
        let budget = RetryBudget::new(&cfg.retry_budget)
            .or_else(|_| RetryBudget::new(&Default::default()))
            .expect("the default budget settings are valid");
        Backend {
            name: format!("{}:{}", cfg.server.host, cfg.server.port),
            breaker,
            budget,
            backoff: cfg.backoff,
            max_connecting: cfg.pool.max_connecting,
            probe_hint: cfg.breaker.cooldown_base,
        }
    }
}

/// Why a connection could not be opened.
enum Failure {
    Server(ServerError),
    CircuitOpen(Duration),
}

impl Pool {
    /// Starts logins while live waiters outnumber logins in flight, within `max_connecting`,
    /// the pool's capacity (and reserve) and the shared limits.
    pub(super) fn spawn_connects(&self, st: &mut PoolState) {
        let max = self.inner.backend.max_connecting.max(1);
        // Checked first: a full pool with a long queue must not scan the queue per arrival
        // (the reserve, when there is one, looks at its first live waiter only).
        if st.connecting >= max || (self.inner.capacity.available() == 0 && !self.reserve_open(st))
        {
            return;
        }
        let limit = st
            .waiters
            .iter()
            .filter(|w| !w.is_closed())
            .take(max)
            .count();
        while st.connecting < limit {
            let Some(slots) = self.take_slots(st) else {
                return;
            };
            st.connecting += 1;
            let pool = self.clone();
            // Held by the login, so a RECONNECT meanwhile counts it as one to close.
            let generation = st.generation.clone();
            tokio::spawn(async move {
                let res = pool.connect(false).await;
                pool.login_done(res, slots, generation);
            });
        }
    }

    /// Opens one server for the warm minimum, without a waiter.
    pub(super) fn spawn_warm(&self) -> bool {
        let mut st = self.lock();
        self.spawn_warm_locked(&mut st)
    }

    /// As [`Pool::spawn_warm`], with the pool state already locked.
    fn spawn_warm_locked(&self, st: &mut PoolState) -> bool {
        if st.connecting >= self.inner.backend.max_connecting.max(1) {
            return false;
        }
        // The warm minimum never takes the reserve: it is for clients that waited.
        if self.inner.capacity.available() == 0 {
            return false;
        }
        let Some(slots) = self.take_slots(st) else {
            return false;
        };
        st.connecting += 1;
        let pool = self.clone();
        let generation = st.generation.clone();
        tokio::spawn(async move {
            let res = pool.connect(true).await;
            pool.login_done(res, slots, generation);
        });
        true
    }

    /// One login, retried while it makes sense.
    async fn connect(&self, warm: bool) -> Result<ServerConn, Failure> {
        let b = &self.inner.backend;
        let metrics = &self.inner.metrics;
        let mut backoff = Backoff::new(b.backoff).unwrap_or_else(|_| {
            Backoff::new(Default::default()).expect("the default backoff is valid")
        });
        let mut first = true;
        loop {
            let permit = match b.breaker.try_acquire(Instant::now()) {
                Admission::Allowed(p) | Admission::Probe(p) => p,
                Admission::Rejected { retry_after } => {
                    return Err(Failure::CircuitOpen(retry_after))
                }
            };
            if first {
                b.budget.deposit(Instant::now());
            } else {
                metrics.retries.retries.inc();
            }
            let res = server::login(&self.inner.target).await;
            let now = Instant::now();
            let before = b.breaker.state();
            match res {
                Ok(conn) => {
                    permit.record_success(now);
                    self.note_breaker(before);
                    return Ok(conn);
                }
                // The database answered: the backend is up, the settings are wrong.
                Err(e) if e.is_config_error() => {
                    permit.record_success(now);
                    self.note_breaker(before);
                    return Err(Failure::Server(e));
                }
                Err(e) => {
                    permit.record_failure(now);
                    self.note_breaker(before);
                    tracing::warn!(pool = %self.inner.name, error = %e, attempt = backoff.attempt(), "server login failed");
                    if b.breaker.state() == BreakerState::Open {
                        return Err(Failure::CircuitOpen(b.breaker.retry_after(now)));
                    }
                    if !warm && !self.has_live_waiters() {
                        return Err(Failure::Server(e));
                    }
                    if !b.budget.try_withdraw(now) {
                        metrics.retries.overflow.inc();
                        return Err(Failure::Server(e));
                    }
                    let delay = backoff.next_delay(&mut rand::thread_rng());
                    tokio::time::sleep(delay).await;
                    first = false;
                }
            }
        }
    }

    fn has_live_waiters(&self) -> bool {
        self.lock().waiters.iter().any(|w| !w.is_closed())
    }

    /// Publishes the breaker's state and counts a transition.
    fn note_breaker(&self, before: BreakerState) {
        let b = &self.inner.backend;
        let after = b.breaker.state();
        let m = &self.inner.metrics.retries;
        m.breaker_state
            .with_label_values(&[b.name.as_str()])
            .set(match after {
                BreakerState::Closed => 0,
                BreakerState::HalfOpen => 1,
                BreakerState::Open => 2,
            });
        if after != before {
            m.breaker_transitions
                .with_label_values(&[after.as_str()])
                .inc();
            tracing::warn!(backend = %b.name, from = before.as_str(), to = after.as_str(), "circuit breaker");
        }
    }

    /// While the breaker is not closed, a client that needs a new connection is refused at
    /// once: during the cooldown, while the probe runs, and when the cooldown has just ended
    /// (then the client's demand starts the probe in the background; it never waits on it).
    pub(super) fn circuit_open(&self, st: &mut PoolState) -> Option<PoolError> {
        let b = &self.inner.backend;
        if b.breaker.state() == BreakerState::Closed {
            return None;
        }
        let retry_after = b.breaker.retry_after(Instant::now());
        if !retry_after.is_zero() {
            return Some(self.circuit_error(retry_after));
        }
        // If no login can start (capacity, or logins already in flight), one in flight is the
        // probe; either way the client is told when to come back.
        self.spawn_warm_locked(st);
        Some(self.circuit_error(b.probe_hint))
    }

    fn circuit_error(&self, retry_after: Duration) -> PoolError {
        PoolError::CircuitOpen {
            database: self.inner.database.clone(),
            retry_after,
        }
    }

    fn login_done(&self, res: Result<ServerConn, Failure>, slots: Slots, generation: Generation) {
        self.lock().connecting -= 1;
        let count = |result: &str| {
            self.inner
                .metrics
                .servers
                .connects
                .with_label_values(&[result])
                .inc()
        };
        match res {
            Ok(mut conn) => {
                count("success");
                self.inner.login_ok.store(true, Ordering::Relaxed);
                conn.id = self.inner.counters.next_server_id();
                conn.slots = slots;
                conn.generation = generation;
                conn.expires = self.expiry();
                self.inner.events.server_connected(conn.id);
                {
                    let mut st = self.lock();
                    if st.startup_params.is_none() {
                        st.startup_params = Some(Arc::new(conn.params().clone()));
                    }
                }
                self.checkin(Box::new(conn));
            }
            Err(Failure::CircuitOpen(retry_after)) => {
                drop(slots);
                count("circuit_open");
                self.inner.login_ok.store(false, Ordering::Relaxed);
                self.fail_waiters(self.circuit_error(retry_after), true);
            }
            Err(Failure::Server(e)) => {
                drop(slots);
                count(if e.is_config_error() {
                    "config_error"
                } else {
                    "failure"
                });
                self.inner.login_ok.store(false, Ordering::Relaxed);
                if e.is_config_error() {
                    tracing::error!(pool = %self.inner.name, error = %e, "server login refused: check credentials and database");
                }
                // With no server open, nobody will be served soon: tell every waiter now.
                // Otherwise a busy server will come back; fail only one waiter.
                let all = e.is_config_error() || self.open_count() == 0;
                let err = if e.is_config_error() {
                    PoolError::from_server(&e)
                } else {
                    PoolError::Unavailable {
                        database: self.inner.database.clone(),
                        reason: e.to_string(),
                    }
                };
                self.fail_waiters(err, all);
            }
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
