//! Opening server connections: the only thing the pooler retries. A login tries the pool's
//! hosts in its route's order, each under its own circuit breaker and with its own backoff; a
//! host that answers but does not fit (a standby where writes are needed) is closed and
//! remembered, which is no failure of the host. A transient failure is retried with capped
//! exponential backoff and full jitter while clients still wait and the shared retry budget
//! allows (a refused retry counts as overflow); at most `max_connecting` logins are in flight
//! per pool. Wrong credentials or an unknown database are never retried. While clients are
//! held (`failover.hold_timeout`), the login goes on within the breakers until one fits. A
//! standby it reached is kept open and asked again at each recheck rather than logged in to
//! anew (a promoted standby keeps its sessions, and they take writes), by the same login while
//! it goes on and by the next one after it gave up (`parked`), so a promotion costs the new
//! primary no extra logins.

use std::time::{Duration, Instant};

use super::hosts::{recheck_at, Host, Hosts, Route, RECHECK};
use super::{Pool, PoolError, PoolState};
use crate::config::TargetSessionAttrs;
use crate::logs::{Escaped, LogLimit};
use crate::resilience::{Admission, Backoff, BackoffConfig, BreakerState, RetryBudget};
use crate::server::{self, Role, ServerConn, ServerError, ServerTarget};

/// The backend's shared failure handling: the hosts (a breaker each) and one retry budget.
pub struct Backend {
    pub hosts: Hosts,
    pub budget: RetryBudget,
    pub backoff: BackoffConfig,
    pub max_connecting: usize,
    /// What a client refused while a probe runs is told to wait.
    pub probe_hint: Duration,
    /// The log lines of server logins PostgreSQL refused: clients that make up databases or
    /// users make one each.
    pub refused_logins: LogLimit,
}

impl Backend {
    pub fn from_config(cfg: &crate::config::Config) -> Backend {
        // Config::validate has checked this; the default is the fallback of last resort.
        let budget = RetryBudget::new(&cfg.retry_budget)
            .or_else(|_| RetryBudget::new(&Default::default()))
            .expect("the default budget settings are valid");
        Backend {
            hosts: Hosts::new(cfg.breaker),
            budget,
            backoff: cfg.backoff,
            max_connecting: cfg.pool.max_connecting,
            probe_hint: cfg.breaker.cooldown_base,
            refused_logins: LogLimit::refusals("server login refused"),
        }
    }
}

/// Why a connection could not be opened.
pub(super) enum Failure {
    Server(ServerError),
    CircuitOpen(Duration),
    /// Hosts answered but none fits: what each was, and the standbys reached (to be kept for
    /// the next recheck).
    NoFit(String, Vec<ServerConn>),
}

/// One host's state within one login loop: its backoff, its last failure, and the standby
/// it reached.
struct HostTry {
    backoff: Backoff,
    not_before: Option<Instant>,
    error: Option<ServerError>,
    kept: Option<ServerConn>,
}

impl Drop for HostTry {
    fn drop(&mut self) {
        // The loop ended (a server found, or given up): the standby it kept is closed politely.
        if let (Some(conn), Ok(rt)) = (self.kept.take(), tokio::runtime::Handle::try_current()) {
            rt.spawn(super::terminate(Box::new(conn)));
        }
    }
}

/// What one pass over the hosts found, when nothing fit.
#[derive(Default)]
struct Round {
    /// The earliest time a skipped host may be tried again.
    wake: Option<Instant>,
    /// A login failed (its host is retried only within the budget).
    failed: bool,
    /// Hosts that answered but did not fit, as `name is a standby`.
    misfits: Vec<String>,
    /// prefer-standby: a primary kept while the other hosts are tried for a standby.
    fallback: Option<ServerConn>,
}

impl Round {
    fn wake_at(&mut self, at: Instant) {
        self.wake = Some(self.wake.map_or(at, |w| w.min(at)));
    }
}

impl Pool {
    /// Starts logins while live waiters outnumber logins in flight, within `max_connecting`,
    /// the pool's capacity (and reserve) and the shared limits.
    #[inline]
    pub(super) fn spawn_connects(&self, st: &mut PoolState) {
        let max = self.inner.backend.max_connecting.max(1);
        // Checked first, inline: a full pool with a long queue must not scan the queue per
        // arrival (the reserve, when there is one, looks at its first live waiter only), and
        // a full pool's every queued checkout comes here.
        if st.connecting >= max || (self.inner.capacity.available() == 0 && !self.reserve_open(st))
        {
            return;
        }
        self.start_connects(st, max);
    }

    /// Opens servers for the waiters, up to `max` logins at a time.
    #[inline(never)]
    fn start_connects(&self, st: &mut PoolState, max: usize) {
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

    /// One login over the pool's hosts, retried while it makes sense.
    pub(super) async fn connect(&self, warm: bool) -> Result<ServerConn, Failure> {
        let b = &self.inner.backend;
        let route = self.route();
        let backoff = Backoff::new(b.backoff).unwrap_or_else(|_| {
            Backoff::new(Default::default()).expect("the default backoff is valid")
        });
        let mut tries: Vec<HostTry> = route
            .hosts
            .iter()
            .map(|_| HostTry {
                backoff: backoff.clone(),
                not_before: None,
                error: None,
                kept: None,
            })
            .collect();
        let mut topology = b.hosts.topology().subscribe();
        let mut attempts = 0u32;
        loop {
            let mut round = Round::default();
            if let Some(conn) = self
                .login_round(&route, &mut tries, &mut round, &mut attempts)
                .await?
            {
                return Ok(conn);
            }
            let now = Instant::now();
            let waiting = self.has_live_waiters();
            let held = waiting && !self.settings().hold_timeout.is_zero();
            if !held && ((!warm && !waiting) || !round.failed || route.all_open()) {
                return Err(self.failure(&route, &mut tries, round, now));
            }
            if held {
                self.enter_hold();
            }
            if round.failed && !b.budget.try_withdraw(now) {
                self.inner.metrics.retries.overflow.inc();
                if !held || round.misfits.is_empty() {
                    return Err(self.failure(&route, &mut tries, round, now));
                }
                // Held for a host that may be promoted: the failed ones wait their longest.
                for t in tries.iter_mut().filter(|t| t.error.is_some()) {
                    t.not_before = Some(now + b.backoff.cap);
                }
            }
            let wake = round
                .wake
                .unwrap_or(now + RECHECK)
                .max(now + Duration::from_millis(1));
            tokio::select! {
                _ = tokio::time::sleep_until(wake.into()) => {}
                // A role learned elsewhere (a promotion reported) may make a host fit now.
                _ = topology.changed() => {}
            }
        }
    }

    /// Tries each host once, in the route's order; `Ok(None)` when none fit.
    async fn login_round(
        &self,
        route: &Route,
        tries: &mut [HostTry],
        round: &mut Round,
        attempts: &mut u32,
    ) -> Result<Option<ServerConn>, Failure> {
        let order = route.order(&mut rand::thread_rng());
        let tsa = route.tsa();
        for (pos, &i) in order.iter().enumerate() {
            let host = &route.hosts[i];
            let now = Instant::now();
            if let Some(at) = tries[i].not_before.filter(|at| *at > now) {
                round.wake_at(at);
                continue;
            }
            if let Some(at) = recheck_at(&host.record, tsa, now) {
                round.wake_at(at);
                round.misfits.push(misfit(host, host.record.role()));
                continue;
            }
            // A standby this loop or an earlier one kept is asked again: no new login.
            let kept = tries[i].kept.take();
            if let Some(conn) = kept.or_else(|| self.unpark(&host.record.addr)) {
                if let Some((conn, role)) = self.ask_again(host, conn).await {
                    let rest = &order[pos + 1..];
                    let keep = Some(&mut tries[i].kept);
                    if let Some(conn) = settle(route, rest, host, conn, role, round, keep) {
                        return Ok(Some(conn));
                    }
                    continue;
                }
            }
            let permit = match host.breaker.try_acquire(now) {
                Admission::Allowed(p) | Admission::Probe(p) => p,
                Admission::Rejected { retry_after } => {
                    round.wake_at(now + retry_after);
                    continue;
                }
            };
            if *attempts == 0 {
                self.inner.backend.budget.deposit(now);
            } else {
                self.inner.metrics.retries.retries.inc();
            }
            *attempts += 1;
            let before = host.breaker.state();
            let res = self.login_at(host, tsa).await;
            let now = Instant::now();
            match res {
                Ok((conn, role)) => {
                    permit.record_success(now);
                    self.note_breaker(host, before);
                    tries[i].backoff.reset();
                    tries[i].error = None;
                    let rest = &order[pos + 1..];
                    let keep = Some(&mut tries[i].kept);
                    if let Some(conn) = settle(route, rest, host, conn, role, round, keep) {
                        return Ok(Some(conn));
                    }
                }
                // The database answered: the host is up, the settings are wrong.
                Err(e) if e.is_config_error() => {
                    permit.record_success(now);
                    self.note_breaker(host, before);
                    return Err(Failure::Server(e));
                }
                Err(e) => {
                    permit.record_failure(now);
                    self.note_breaker(host, before);
                    tracing::warn!(pool = %self.log_name(), host = %host.record.name, error = %Escaped::new(&e), attempt = tries[i].backoff.attempt(), "server login failed");
                    let at = now + tries[i].backoff.next_delay(&mut rand::thread_rng());
                    tries[i].not_before = Some(at);
                    tries[i].error = Some(e);
                    round.failed = true;
                    round.wake_at(at);
                }
            }
        }
        Ok(round.fallback.take())
    }

    /// Logs in to `host` and learns its role where the pool needs it.
    async fn login_at(
        &self,
        host: &Host,
        tsa: TargetSessionAttrs,
    ) -> Result<(ServerConn, Option<Role>), ServerError> {
        let base = &self.inner.target;
        let target = ServerTarget {
            host: host.record.addr.host.clone(),
            port: host.record.addr.port,
            ..base.clone()
        };
        let mut conn = server::login(&target).await?;
        let role = match Role::from_params(conn.params()) {
            Some(r) => Some(r),
            None if tsa == TargetSessionAttrs::Any => None,
            // Older servers do not report their role: ask, as libpq does.
            None => Some(
                tokio::time::timeout(base.connect_timeout, server::ask_role(&mut conn))
                    .await
                    .map_err(|_| ServerError::Timeout)??,
            ),
        };
        if let Some(r) = role {
            host.record.learned(r, Instant::now());
        }
        conn.host = Some(host.record.clone());
        conn.fit_epoch = self.inner.backend.hosts.topology().epoch();
        Ok((conn, role))
    }

    /// Asks a kept standby its role again; `None` when the connection is lost (a login
    /// follows).
    async fn ask_again(
        &self,
        host: &Host,
        mut conn: ServerConn,
    ) -> Option<(ServerConn, Option<Role>)> {
        let limit = self.inner.target.connect_timeout;
        let role = tokio::time::timeout(limit, server::ask_role(&mut conn))
            .await
            .ok()?
            .ok()?;
        host.record.learned(role, Instant::now());
        conn.fit_epoch = self.inner.backend.hosts.topology().epoch();
        Some((conn, Some(role)))
    }

    /// What a login that gives up reports: the breakers' Retry-After when every host's is
    /// open, else the hosts that did not fit, else the last failure.
    fn failure(&self, route: &Route, tries: &mut [HostTry], round: Round, now: Instant) -> Failure {
        if route.all_open() {
            return Failure::CircuitOpen(route.retry_after(now));
        }
        let errors = tries.iter_mut().filter_map(|t| t.error.take());
        if round.misfits.is_empty() {
            return match errors.last() {
                Some(e) => Failure::Server(e),
                None => Failure::CircuitOpen(route.retry_after(now)),
            };
        }
        let mut what = round.misfits;
        what.extend(route.hosts.iter().zip(tries.iter()).filter_map(|(h, t)| {
            t.not_before
                .map(|_| format!("{} did not answer", h.record.name))
        }));
        let standbys = tries.iter_mut().filter_map(|t| t.kept.take()).collect();
        Failure::NoFit(what.join(", "), standbys)
    }

    fn has_live_waiters(&self) -> bool {
        self.lock().waiters.iter().any(|w| !w.is_closed())
    }

    /// Publishes a host breaker's state and counts a transition.
    fn note_breaker(&self, host: &Host, before: BreakerState) {
        let after = host.breaker.state();
        let m = &self.inner.metrics.retries;
        m.breaker_state
            .with_label_values(&[host.record.name.as_str()])
            .set(match after {
                BreakerState::Closed => 0,
                BreakerState::HalfOpen => 1,
                BreakerState::Open => 2,
            });
        if after != before {
            m.breaker_transitions
                .with_label_values(&[after.as_str()])
                .inc();
            tracing::warn!(backend = %host.record.name, from = before.as_str(), to = after.as_str(), "circuit breaker");
        }
    }

    /// While every host's breaker is open or half-open, a client that needs a new connection
    /// is refused at once (or held, with `failover.hold_timeout`): during the cooldown, while
    /// the probe runs, and when the cooldown has just ended (then the client's demand starts
    /// the probe in the background; it never waits on it).
    pub(super) fn circuit_open(&self, st: &mut PoolState) -> Option<PoolError> {
        if !st.route.all_open() {
            return None;
        }
        let retry_after = st.route.retry_after(Instant::now());
        if !retry_after.is_zero() {
            return Some(self.circuit_error(retry_after));
        }
        // If no login can start (capacity, or logins already in flight), one in flight is the
        // probe; either way the client is told when to come back.
        self.spawn_warm_locked(st);
        Some(self.circuit_error(self.inner.backend.probe_hint))
    }

    pub(super) fn circuit_error(&self, retry_after: Duration) -> PoolError {
        PoolError::CircuitOpen {
            database: self.inner.database.clone(),
            retry_after,
        }
    }
}

/// What a login that succeeded leads to: the connection to use, or `None` (try the next
/// host) when it did not fit (it is closed, or a standby put in `keep` when given) or is a
/// primary kept as prefer-standby's fallback while hosts that may be standbys are left
/// (`rest`: the positions still to try).
fn settle(
    route: &Route,
    rest: &[usize],
    host: &Host,
    conn: ServerConn,
    role: Option<Role>,
    round: &mut Round,
    keep: Option<&mut Option<ServerConn>>,
) -> Option<ServerConn> {
    let tsa = route.tsa();
    if role.is_some_and(|r| !r.fits(tsa)) {
        round.misfits.push(misfit(host, role));
        match keep {
            Some(slot) if role.is_some_and(|r| r.standby) => *slot = Some(conn),
            _ => {
                tokio::spawn(super::terminate(Box::new(conn)));
            }
        }
        return None;
    }
    let standby = role.is_some_and(|r| r.standby);
    let more = rest
        .iter()
        .any(|&j| route.hosts[j].record.role() != Some(Role::PRIMARY));
    if tsa == TargetSessionAttrs::PreferStandby && !standby && more {
        match round.fallback {
            None => round.fallback = Some(conn),
            Some(_) => {
                tokio::spawn(super::terminate(Box::new(conn)));
            }
        }
        return None;
    }
    if let Some(spare) = round.fallback.take() {
        tokio::spawn(super::terminate(Box::new(spare)));
    }
    Some(conn)
}

/// How a host that did not fit is described to a client.
fn misfit(host: &Host, role: Option<Role>) -> String {
    let what = match role {
        Some(r) if r.standby => "a standby",
        Some(r) if r.read_only => "read-only",
        Some(_) => "a primary",
        None => "of unknown role",
    };
    format!("{} is {what}", host.record.name)
}
