//! Breaker tests: transitions, one probe under contention, stale generations, cooldowns.

use std::collections::HashSet;
use std::sync::Barrier;

use rand::rngs::StdRng;
use rand::SeedableRng;

use super::*;

const MS: Duration = Duration::from_millis(1);

fn config() -> BreakerConfig {
    BreakerConfig {
        consecutive_failures: 5,
        failure_ratio: 0.5,
        ratio_window: Duration::from_secs(10),
        min_requests: 20,
        cooldown_base: 250 * MS,
        cooldown_cap: 1000 * MS,
    }
}

fn breaker(config: &BreakerConfig, seed: u64) -> CircuitBreaker {
    CircuitBreaker::with_rng(config, StdRng::seed_from_u64(seed)).expect("valid config")
}

fn permit(admission: Admission) -> Permit {
    match admission {
        Admission::Allowed(p) | Admission::Probe(p) => p,
        Admission::Rejected { retry_after } => panic!("rejected, retry after {retry_after:?}"),
    }
}

fn probe(b: &CircuitBreaker, now: Instant) -> Permit {
    match b.try_acquire(now) {
        Admission::Probe(p) => p,
        other => panic!("expected a probe, got {other:?}"),
    }
}

fn rejected_for(b: &CircuitBreaker, now: Instant) -> Duration {
    match b.try_acquire(now) {
        Admission::Rejected { retry_after } => retry_after,
        other => panic!("expected a rejection, got {other:?}"),
    }
}

fn fail_n(b: &CircuitBreaker, n: u32, now: Instant) {
    for _ in 0..n {
        permit(b.try_acquire(now)).record_failure(now);
    }
}

/// Opens `b` (closed) at `now` and returns the drawn cooldown.
fn open(b: &CircuitBreaker, now: Instant) -> Duration {
    fail_n(b, 5, now);
    assert_eq!(b.state(), BreakerState::Open);
    b.retry_after(now)
}

#[test]
fn consecutive_failures_open_and_a_success_resets_the_streak() {
    let t0 = Instant::now();
    let b = breaker(&config(), 1);
    fail_n(&b, 4, t0);
    permit(b.try_acquire(t0)).record_success(t0);
    fail_n(&b, 4, t0);
    assert_eq!(b.state(), BreakerState::Closed);
    assert_eq!(b.generation(), 0);
    fail_n(&b, 1, t0);
    assert_eq!(b.state(), BreakerState::Open);
    assert_eq!(b.state().as_str(), "open");
    assert_eq!(b.generation(), 1);
    let wait = rejected_for(&b, t0 + 10 * MS);
    assert!((115 * MS..=240 * MS).contains(&wait), "{wait:?}");
    assert_eq!(b.counters().opened, 1);
    assert_eq!(b.counters().rejected, 1);
}

#[test]
fn failure_ratio_opens_once_min_requests_are_seen() {
    let t0 = Instant::now();
    let config = BreakerConfig {
        consecutive_failures: 100,
        min_requests: 10,
        ..config()
    };
    let b = breaker(&config, 2);
    // 5 successes and 4 failures: ratio above 0.5 is not checked below 10 results.
    for i in 0..9 {
        let p = permit(b.try_acquire(t0));
        if i % 2 == 0 {
            p.record_success(t0);
        } else {
            p.record_failure(t0);
        }
    }
    permit(b.try_acquire(t0)).record_failure(t0);
    assert_eq!(b.state(), BreakerState::Open, "5 of 10 failed");
}

#[test]
fn failures_older_than_the_ratio_window_do_not_count() {
    let t0 = Instant::now();
    let config = BreakerConfig {
        consecutive_failures: 100,
        min_requests: 10,
        ..config()
    };
    let b = breaker(&config, 3);
    // 9 failures: below min_requests, so the ratio is not considered yet.
    fail_n(&b, 9, t0);
    assert_eq!(b.state(), BreakerState::Closed);
    // One more failure would make 10 of 10, but the first nine have left the window.
    fail_n(&b, 1, t0 + Duration::from_secs(10));
    assert_eq!(b.state(), BreakerState::Closed);
}

#[test]
fn probe_success_closes() {
    let t0 = Instant::now();
    let b = breaker(&config(), 4);
    assert!(b.is_closed());
    let cooldown = open(&b, t0);
    assert!(!b.is_closed(), "the lock-free flag follows the phase");
    assert_eq!(b.retry_after(t0 + cooldown), Duration::ZERO);
    assert_eq!(b.state(), BreakerState::Open, "until someone asks");
    let t1 = t0 + cooldown;
    let p = probe(&b, t1);
    assert!(p.is_probe());
    assert_eq!(b.state(), BreakerState::HalfOpen);
    assert!(!b.is_closed());
    assert_eq!(rejected_for(&b, t1), 250 * MS, "probe running: short hint");
    p.record_success(t1);
    assert_eq!(b.state(), BreakerState::Closed);
    assert!(b.is_closed());
    assert!(matches!(b.try_acquire(t1), Admission::Allowed(_)));
    let c = b.counters();
    assert_eq!((c.opened, c.half_opened, c.closed), (1, 1, 1));
}

#[test]
fn probe_failure_reopens_with_a_longer_cooldown_and_new_generation() {
    let t0 = Instant::now();
    let b = breaker(&config(), 5);
    let first = open(&b, t0);
    assert!((125 * MS..=250 * MS).contains(&first), "{first:?}");
    let t1 = t0 + first;
    probe(&b, t1).record_failure(t1);
    assert_eq!(b.state(), BreakerState::Open);
    assert_eq!(b.generation(), 2);
    let second = b.retry_after(t1);
    assert!((250 * MS..=500 * MS).contains(&second), "{second:?}");
}

#[test]
fn cooldown_doubles_per_opening_up_to_the_cap_and_resets_on_close() {
    let mut t = Instant::now();
    let b = breaker(&config(), 6);
    let mut cooldown = open(&b, t);
    for ceiling_ms in [500, 1000, 1000, 1000, 1000] {
        t += cooldown;
        probe(&b, t).record_failure(t);
        cooldown = b.retry_after(t);
        let range = (ceiling_ms / 2) * MS..=ceiling_ms * MS;
        assert!(range.contains(&cooldown), "{cooldown:?} outside {range:?}");
    }
    t += cooldown;
    probe(&b, t).record_success(t);
    let again = open(&b, t);
    assert!(again <= 250 * MS, "a close resets the doubling: {again:?}");
}

#[test]
fn cooldown_jitter_is_bounded_and_spread() {
    let mut seen = HashSet::new();
    for seed in 0..200 {
        let b = breaker(&config(), seed);
        let cooldown = open(&b, Instant::now());
        assert!((125 * MS..=250 * MS).contains(&cooldown), "{cooldown:?}");
        seen.insert(cooldown);
    }
    assert!(seen.len() >= 100, "only {} distinct cooldowns", seen.len());
}

#[test]
fn exactly_one_of_eight_concurrent_callers_gets_the_probe() {
    let t0 = Instant::now();
    let b = breaker(&config(), 7);
    let t1 = t0 + open(&b, t0);
    let gate = Barrier::new(8);
    let admissions: Vec<Admission> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| {
                    gate.wait();
                    b.try_acquire(t1)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread ok"))
            .collect()
    });
    let probes = admissions
        .iter()
        .filter(|a| matches!(a, Admission::Probe(_)))
        .count();
    let rejected = admissions
        .iter()
        .filter(|a| matches!(a, Admission::Rejected { .. }))
        .count();
    assert_eq!((probes, rejected), (1, 7));
    assert_eq!(b.counters().half_opened, 1);
}

#[test]
fn stale_generation_results_cannot_close_a_newer_opening() {
    let t0 = Instant::now();
    let b = breaker(&config(), 8);
    let late = permit(b.try_acquire(t0));
    assert_eq!(late.generation(), 0);
    let t1 = t0 + open(&b, t0);
    late.record_success(t1);
    assert_eq!(b.state(), BreakerState::Open);
    assert_eq!(b.counters().stale_results, 1);

    // A probe of generation 1 fails; the breaker reopens as generation 2, and only
    // generation 2's probe can close it.
    probe(&b, t1).record_failure(t1);
    let t2 = t1 + b.retry_after(t1);
    let p2 = probe(&b, t2);
    assert_eq!(p2.generation(), 2);
    p2.record_success(t2);
    assert_eq!(b.state(), BreakerState::Closed);
}

#[test]
fn late_failures_of_an_old_generation_do_not_reopen() {
    let t0 = Instant::now();
    let b = breaker(&config(), 10);
    let stragglers: Vec<Permit> = (0..5).map(|_| permit(b.try_acquire(t0))).collect();
    let t1 = t0 + open(&b, t0);
    probe(&b, t1).record_success(t1);
    for p in stragglers {
        p.record_failure(t1);
    }
    assert_eq!(b.state(), BreakerState::Closed);
    assert_eq!(b.counters().stale_results, 5);
}

#[test]
fn an_abandoned_probe_frees_the_slot() {
    let t0 = Instant::now();
    let b = breaker(&config(), 11);
    let t1 = t0 + open(&b, t0);
    drop(probe(&b, t1));
    assert_eq!(b.state(), BreakerState::HalfOpen);
    assert_eq!(b.retry_after(t1), Duration::ZERO);
    probe(&b, t1).record_success(t1);
    assert_eq!(b.state(), BreakerState::Closed);
}

#[test]
fn invalid_configs_are_refused() {
    for bad in [
        BreakerConfig {
            consecutive_failures: 0,
            ..config()
        },
        BreakerConfig {
            failure_ratio: 0.0,
            ..config()
        },
        BreakerConfig {
            cooldown_cap: 100 * MS,
            ..config()
        },
        BreakerConfig {
            cooldown_base: Duration::ZERO,
            ..config()
        },
    ] {
        assert!(CircuitBreaker::new(&bad).is_err(), "{bad:?}");
    }
}
