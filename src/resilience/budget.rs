//! Retry budget: retries may add at most `percent` on top of first attempts over a sliding
//! window, plus a floor of `min_per_second` retries that needs no traffic.
//!
//! Same semantics as Finagle's `RetryBudget` and tower's `TpsBudget` (deposits and withdrawals
//! both expire after the window; the floor is in addition to the percentage), with exact
//! fixed-point arithmetic, an injected clock and an atomic check-and-withdraw.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use super::window::Buckets;
use super::{BudgetConfig, ResilienceConfigError};

/// Token units one retry costs; a first attempt deposits `percent * 100` units, so any percent
/// with two decimals is exact (20 % → 2,000 units: five first attempts pay for one retry).
const RETRY_COST: i64 = 10_000;

/// A shared retry budget. Cheap `&self` methods behind one short `Mutex` (never held across
/// an `.await`: there is none in here).
#[derive(Debug)]
pub struct RetryBudget {
    /// Net units (deposits minus withdrawals) per time bucket.
    window: Mutex<Buckets<i64>>,
    deposit_units: i64,
    /// The floor, `min_per_second * window` retries, in units; refills as withdrawals expire.
    reserve_units: i64,
}

impl RetryBudget {
    /// A budget with nothing deposited. Fails if the config is invalid
    /// (see [`BudgetConfig::validate`]).
    pub fn new(config: &BudgetConfig) -> Result<Self, ResilienceConfigError> {
        config.validate()?;
        // validate() bounds percent to [0, 1000], so the product fits easily.
        let deposit_units = (config.percent * 100.0).round() as i64;
        let window_ms = i64::try_from(config.window.as_millis()).unwrap_or(i64::MAX);
        let reserve_units = i64::from(config.min_per_second)
            .saturating_mul(window_ms)
            .saturating_mul(RETRY_COST)
            / 1000;
        Ok(RetryBudget {
            window: Mutex::new(Buckets::new(config.window)),
            deposit_units,
            reserve_units,
        })
    }

    /// Record a first attempt (not a retry) made at `now`: it earns `percent` of a retry.
    pub fn deposit(&self, now: Instant) {
        let mut window = self.lock();
        let slot = window.current(now);
        *slot = slot.saturating_add(self.deposit_units);
    }

    /// Take one retry at `now` if the budget allows it. `false` means the retry must not be
    /// made; the caller counts it as an overflow (`droidpool_retry_overflow_total`).
    pub fn try_withdraw(&self, now: Instant) -> bool {
        let mut window = self.lock();
        window.advance(now);
        if self.balance(&window) < RETRY_COST {
            return false;
        }
        let slot = window.current(now);
        *slot = slot.saturating_sub(RETRY_COST);
        true
    }

    /// Whole retries the budget would allow at `now` (for status pages and tests).
    pub fn available(&self, now: Instant) -> u64 {
        let mut window = self.lock();
        window.advance(now);
        u64::try_from(self.balance(&window) / RETRY_COST).unwrap_or(0)
    }

    fn balance(&self, window: &Buckets<i64>) -> i64 {
        window
            .iter()
            .fold(self.reserve_units, |sum, units| sum.saturating_add(*units))
    }

    fn lock(&self) -> MutexGuard<'_, Buckets<i64>> {
        // Nothing panics while the lock is held, so a poisoned lock still holds a valid ring.
        self.window.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn budget(percent: f64, window_secs: u64, min_per_second: u32) -> RetryBudget {
        RetryBudget::new(&BudgetConfig {
            percent,
            window: Duration::from_secs(window_secs),
            min_per_second,
        })
        .expect("valid config")
    }

    fn withdraw_all(b: &RetryBudget, now: Instant) -> usize {
        (0..10_000).take_while(|_| b.try_withdraw(now)).count()
    }

    #[test]
    fn hundred_first_attempts_allow_twenty_retries() {
        let t0 = Instant::now();
        let b = budget(20.0, 10, 0);
        assert!(!b.try_withdraw(t0), "no traffic, no floor: no retry");
        for _ in 0..100 {
            b.deposit(t0);
        }
        assert_eq!(b.available(t0), 20);
        for i in 0..20 {
            assert!(b.try_withdraw(t0 + Duration::from_millis(i)), "retry {i}");
        }
        assert!(!b.try_withdraw(t0), "the 21st retry is refused");
    }

    #[test]
    fn floor_allows_min_per_second_times_window_without_traffic() {
        let t0 = Instant::now();
        let b = budget(20.0, 10, 3);
        assert_eq!(withdraw_all(&b, t0), 30);
        // The floor is in addition to the percentage (Finagle / tower semantics).
        let b = budget(20.0, 10, 1);
        for _ in 0..100 {
            b.deposit(t0);
        }
        assert_eq!(withdraw_all(&b, t0), 30);
    }

    #[test]
    fn floor_refills_when_withdrawals_expire() {
        let t0 = Instant::now();
        let b = budget(20.0, 10, 1);
        assert_eq!(withdraw_all(&b, t0), 10);
        assert!(!b.try_withdraw(t0 + Duration::from_secs(5)));
        assert_eq!(withdraw_all(&b, t0 + Duration::from_secs(10)), 10);
    }

    #[test]
    fn old_deposits_expire_after_the_window() {
        let t0 = Instant::now();
        let b = budget(20.0, 10, 0);
        for _ in 0..50 {
            b.deposit(t0);
        }
        // Still counted one bucket (1 s) before the window ends, gone at the window.
        assert_eq!(b.available(t0 + Duration::from_millis(8_999)), 10);
        assert_eq!(b.available(t0 + Duration::from_secs(10)), 0);
        assert!(!b.try_withdraw(t0 + Duration::from_secs(10)));
    }

    #[test]
    fn fractional_percent_is_exact() {
        // tower's TpsBudget truncates 1/percent (tower-rs/tower#857); this must not.
        let t0 = Instant::now();
        let b = budget(30.0, 10, 0);
        for _ in 0..100 {
            b.deposit(t0);
        }
        assert_eq!(withdraw_all(&b, t0), 30);
        let b = budget(12.5, 10, 0);
        for _ in 0..80 {
            b.deposit(t0);
        }
        assert_eq!(withdraw_all(&b, t0), 10);
    }

    #[test]
    fn concurrent_withdrawals_never_overdraw() {
        let t0 = Instant::now();
        let b = budget(20.0, 10, 0);
        for _ in 0..100 {
            b.deposit(t0);
        }
        let granted: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8).map(|_| s.spawn(|| withdraw_all(&b, t0))).collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("thread ok"))
                .sum()
        });
        assert_eq!(granted, 20);
    }

    #[test]
    fn invalid_configs_are_refused() {
        for (percent, window) in [(-1.0, 10), (f64::NAN, 10), (1000.5, 10), (20.0, 0)] {
            let config = BudgetConfig {
                percent,
                window: Duration::from_secs(window),
                min_per_second: 1,
            };
            assert!(RetryBudget::new(&config).is_err(), "{config:?}");
        }
    }
}
