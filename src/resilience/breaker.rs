//! Circuit breaker for one backend: closed → open → half-open (one probe) → closed or open.
//!
//! Opens after `consecutive_failures` failures in a row, or when the failure ratio over
//! `ratio_window` reaches `failure_ratio` with at least `min_requests` results. An opening lasts
//! a jittered cooldown whose ceiling doubles per consecutive opening up to `cooldown_cap`; then
//! exactly one probe is admitted (reserved under the lock). Its success closes the breaker, its
//! failure opens it again. Every opening starts a new generation; results carried by permits of
//! an older generation are ignored, so a late success cannot close a newer opening.

#[cfg(test)]
mod tests;

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

use super::backoff::{ceiling, uniform};
use super::window::Buckets;
use super::{BreakerConfig, ResilienceConfigError};

/// What the breaker currently does with new attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BreakerState {
    /// Attempts proceed; results are counted.
    Closed,
    /// Attempts are refused until the cooldown ends.
    Open,
    /// The cooldown ended: one probe may run (or is running); everything else is refused.
    HalfOpen,
}

impl BreakerState {
    /// A bounded metric label: `closed`, `open` or `half_open`.
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}

/// Monotonic counters since the breaker was built (for metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BreakerCounters {
    /// Transitions into `Open` (from closed, or from a failed probe).
    pub opened: u64,
    /// Transitions into `HalfOpen` (cooldowns that ended with an attempt waiting).
    pub half_opened: u64,
    /// Transitions into `Closed` (successful probes).
    pub closed: u64,
    /// Attempts refused with `Admission::Rejected`.
    pub rejected: u64,
    /// Results ignored because their permit belonged to an older generation.
    pub stale_results: u64,
}

/// The answer of [`CircuitBreaker::try_acquire`].
#[derive(Debug)]
#[must_use = "an admitted attempt must report its outcome through the permit"]
pub enum Admission {
    /// Closed: make the attempt and report its outcome.
    Allowed(Permit),
    /// Half-open: this attempt is the one probe; its outcome closes or reopens the breaker.
    Probe(Permit),
    /// Open (or a probe is already running): do not attempt. `retry_after` is the time until
    /// the next probe may be admitted (the pooler's Retry-After).
    Rejected { retry_after: Duration },
}

/// A circuit breaker for one backend. `&self` methods over one short `Mutex`; clones are
/// handles to the same breaker.
#[derive(Clone)]
pub struct CircuitBreaker {
    shared: Arc<Mutex<Inner>>,
    /// Whether the phase is `Closed`, readable without the lock: every wait for a server
    /// asks whether all breakers are open.
    closed: Arc<AtomicBool>,
}

/// Leave to attempt once; report the outcome with [`Permit::record_success`] or
/// [`Permit::record_failure`]. Dropping it unreported (a cancelled attempt, or an outcome
/// that says nothing about the backend's health) reports nothing and frees the probe slot.
#[must_use = "report the attempt's outcome, or drop the permit to abandon it"]
pub struct Permit {
    shared: Arc<Mutex<Inner>>,
    generation: u64,
    probe: bool,
    reported: bool,
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    Closed,
    Open { until: Instant },
    HalfOpen { probe_in_flight: bool },
}

#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    succeeded: u32,
    failed: u32,
}

struct Inner {
    config: BreakerConfig,
    phase: Phase,
    /// `phase` is `Closed`; written with it, under the lock.
    closed: Arc<AtomicBool>,
    generation: u64,
    consecutive_failures: u32,
    /// Openings since the breaker last closed: the exponent of the next cooldown ceiling.
    openings_in_row: u32,
    outcomes: Buckets<Tally>,
    rng: Box<dyn RngCore + Send>,
    counters: BreakerCounters,
}

impl CircuitBreaker {
    /// A closed breaker whose cooldown jitter comes from an entropy-seeded generator.
    pub fn new(config: &BreakerConfig) -> Result<Self, ResilienceConfigError> {
        Self::with_rng(config, StdRng::from_entropy())
    }

    /// A closed breaker drawing cooldown jitter from `rng` (seed it in tests).
    /// Fails if the config is invalid (see [`BreakerConfig::validate`]).
    pub fn with_rng<R>(config: &BreakerConfig, rng: R) -> Result<Self, ResilienceConfigError>
    where
        R: RngCore + Send + 'static,
    {
        config.validate()?;
        let closed = Arc::new(AtomicBool::new(true));
        let inner = Inner {
            config: *config,
            phase: Phase::Closed,
            closed: closed.clone(),
            generation: 0,
            consecutive_failures: 0,
            openings_in_row: 0,
            outcomes: Buckets::new(config.ratio_window),
            rng: Box::new(rng),
            counters: BreakerCounters::default(),
        };
        Ok(CircuitBreaker {
            shared: Arc::new(Mutex::new(inner)),
            closed,
        })
    }

    /// Whether the breaker is closed, without taking its lock.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Ask to make an attempt at `now`. In half-open, exactly one caller gets `Probe` until
    /// that probe's permit is reported or dropped.
    pub fn try_acquire(&self, now: Instant) -> Admission {
        let mut inner = lock(&self.shared);
        let generation = inner.generation;
        match inner.phase {
            Phase::Closed => Admission::Allowed(self.permit(generation, false)),
            Phase::Open { until } if now < until => {
                inner.counters.rejected += 1;
                Admission::Rejected {
                    retry_after: until - now,
                }
            }
            Phase::Open { .. }
            | Phase::HalfOpen {
                probe_in_flight: false,
            } => {
                if matches!(inner.phase, Phase::Open { .. }) {
                    inner.counters.half_opened += 1;
                }
                inner.phase = Phase::HalfOpen {
                    probe_in_flight: true,
                };
                Admission::Probe(self.permit(generation, true))
            }
            Phase::HalfOpen {
                probe_in_flight: true,
            } => {
                inner.counters.rejected += 1;
                Admission::Rejected {
                    retry_after: inner.probe_wait_hint(),
                }
            }
        }
    }

    /// The current state. An open breaker whose cooldown has ended stays `Open` until the
    /// next `try_acquire` turns it half-open.
    pub fn state(&self) -> BreakerState {
        match lock(&self.shared).phase {
            Phase::Closed => BreakerState::Closed,
            Phase::Open { .. } => BreakerState::Open,
            Phase::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    /// Time from `now` until an attempt could be admitted: zero when closed or when a probe
    /// could start now; the rest of the cooldown when open; while a probe is running, a short
    /// hint (`cooldown_base`), since its result is expected within one login.
    pub fn retry_after(&self, now: Instant) -> Duration {
        let inner = lock(&self.shared);
        match inner.phase {
            Phase::Closed => Duration::ZERO,
            Phase::Open { until } => until.saturating_duration_since(now),
            Phase::HalfOpen {
                probe_in_flight: false,
            } => Duration::ZERO,
            Phase::HalfOpen {
                probe_in_flight: true,
            } => inner.probe_wait_hint(),
        }
    }

    /// The current generation: 0 at first, +1 at every opening.
    pub fn generation(&self) -> u64 {
        lock(&self.shared).generation
    }

    /// Transition and refusal counters since the breaker was built.
    pub fn counters(&self) -> BreakerCounters {
        lock(&self.shared).counters
    }

    fn permit(&self, generation: u64, probe: bool) -> Permit {
        Permit {
            shared: Arc::clone(&self.shared),
            generation,
            probe,
            reported: false,
        }
    }
}

impl fmt::Debug for CircuitBreaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = lock(&self.shared);
        f.debug_struct("CircuitBreaker")
            .field("phase", &inner.phase)
            .field("generation", &inner.generation)
            .field("consecutive_failures", &inner.consecutive_failures)
            .field("counters", &inner.counters)
            .finish_non_exhaustive()
    }
}

impl Permit {
    /// The attempt succeeded at `now`: resets the failure streak, or closes the breaker if
    /// this is the current generation's probe.
    pub fn record_success(mut self, now: Instant) {
        self.reported = true;
        lock(&self.shared).on_result(self.generation, self.probe, true, now);
    }

    /// The attempt failed at `now` with a failure that counts against the backend (refused,
    /// reset, timeout, TLS failure, 57P03, 53300): may open the breaker, and reopens it if
    /// this is the current generation's probe.
    pub fn record_failure(mut self, now: Instant) {
        self.reported = true;
        lock(&self.shared).on_result(self.generation, self.probe, false, now);
    }

    /// Whether this permit is the half-open probe.
    pub fn is_probe(&self) -> bool {
        self.probe
    }

    /// The generation the permit was issued in.
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if self.reported || !self.probe {
            return;
        }
        // An abandoned probe frees its slot so the next attempt can probe; a stale one must
        // not free the slot of a newer probe.
        let mut inner = lock(&self.shared);
        if inner.generation == self.generation && matches!(inner.phase, Phase::HalfOpen { .. }) {
            inner.phase = Phase::HalfOpen {
                probe_in_flight: false,
            };
        }
    }
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("generation", &self.generation)
            .field("probe", &self.probe)
            .finish()
    }
}

impl Inner {
    fn on_result(&mut self, generation: u64, probe: bool, succeeded: bool, now: Instant) {
        if generation != self.generation {
            self.counters.stale_results += 1;
            return;
        }
        match (self.phase, probe) {
            (Phase::HalfOpen { .. }, true) if succeeded => self.close(),
            (Phase::HalfOpen { .. }, true) => self.open(now),
            (Phase::Closed, false) => self.count_closed_result(succeeded, now),
            // Unreachable with generations bumped at every opening; ignore rather than guess.
            _ => self.counters.stale_results += 1,
        }
    }

    fn count_closed_result(&mut self, succeeded: bool, now: Instant) {
        let tally = self.outcomes.current(now);
        if succeeded {
            tally.succeeded = tally.succeeded.saturating_add(1);
            self.consecutive_failures = 0;
            return;
        }
        tally.failed = tally.failed.saturating_add(1);
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        if self.consecutive_failures >= self.config.consecutive_failures || self.ratio_tripped() {
            self.open(now);
        }
    }

    fn ratio_tripped(&self) -> bool {
        let (succeeded, failed) = self.outcomes.iter().fold((0u64, 0u64), |(s, f), t| {
            (s + u64::from(t.succeeded), f + u64::from(t.failed))
        });
        let total = succeeded + failed;
        total >= u64::from(self.config.min_requests)
            && failed as f64 >= self.config.failure_ratio * total as f64
    }

    /// Open with a new generation and a jittered cooldown drawn from `[ceiling/2, ceiling]`,
    /// `ceiling = min(cap, base * 2^openings_in_row)`: never zero, never above the cap.
    fn open(&mut self, now: Instant) {
        let top = ceiling(
            self.config.cooldown_base,
            self.config.cooldown_cap,
            self.openings_in_row,
        );
        let cooldown = uniform(top / 2, top, &mut self.rng);
        self.phase = Phase::Open {
            until: now.checked_add(cooldown).unwrap_or(now),
        };
        self.closed.store(false, Ordering::Release);
        self.generation += 1;
        self.openings_in_row = self.openings_in_row.saturating_add(1);
        self.consecutive_failures = 0;
        self.outcomes.clear();
        self.counters.opened += 1;
    }

    fn close(&mut self) {
        self.phase = Phase::Closed;
        self.closed.store(true, Ordering::Release);
        self.openings_in_row = 0;
        self.consecutive_failures = 0;
        self.outcomes.clear();
        self.counters.closed += 1;
    }

    fn probe_wait_hint(&self) -> Duration {
        self.config.cooldown_base
    }
}

fn lock(shared: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    // Nothing panics while the lock is held, so a poisoned lock still holds a consistent state.
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}
