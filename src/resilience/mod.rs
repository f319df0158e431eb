//! Resilience primitives for server connection attempts: pure, synchronous logic with the
//! clock (`now: Instant`) and the random source passed in by the caller.
//!
//! - [`backoff`]: capped exponential backoff with full jitter, `random(0, min(cap, base·2^n))`,
//!   reset by a success — spreads the retries of clients that failed together.
//! - [`budget`]: a retry budget — retries may add at most `percent` on top of first attempts
//!   over a sliding window, plus a floor of `min_per_second`; a refused retry is an overflow.
//! - [`breaker`]: a circuit breaker per backend — fails fast while the backend is down and
//!   lets exactly one probe through after each (doubling, capped, jittered) cooldown.
//!
//! This module imports nothing else from the crate. Each piece has a serde config struct with
//! the defaults of issue 5 and a `validate()` that the config layer calls at load time.

pub mod backoff;
pub mod breaker;
pub mod budget;
mod window;

use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;

pub use backoff::{full_jitter, Backoff};
pub use breaker::{Admission, BreakerCounters, BreakerState, CircuitBreaker, Permit};
pub use budget::RetryBudget;

/// Longest window or cooldown accepted: keeps `Instant` arithmetic far from overflow.
const MAX_DURATION: Duration = Duration::from_secs(3600);

/// A resilience setting outside its allowed range.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid setting {field}: must be {requirement}")]
pub struct ResilienceConfigError {
    /// The setting, as written in the config file (e.g. `retry_budget.percent`).
    pub field: &'static str,
    /// What the setting must satisfy.
    pub requirement: &'static str,
}

fn check(
    ok: bool,
    field: &'static str,
    requirement: &'static str,
) -> Result<(), ResilienceConfigError> {
    if ok {
        Ok(())
    } else {
        Err(ResilienceConfigError { field, requirement })
    }
}

/// Backoff between retried server connection attempts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BackoffConfig {
    /// Ceiling of the first retry's delay; doubles per further retry.
    #[serde(with = "humantime_serde")]
    pub base: Duration,
    /// Largest ceiling: no delay is ever longer.
    #[serde(with = "humantime_serde")]
    pub cap: Duration,
}

impl Default for BackoffConfig {
    /// 50 ms doubling up to 1 s: a retry waits at most 1 s, so one sleeping through the
    /// database's return still reconnects within about a second.
    fn default() -> Self {
        BackoffConfig {
            base: Duration::from_millis(50),
            cap: Duration::from_secs(1),
        }
    }
}

impl BackoffConfig {
    /// `0 < base <= cap <= 1 h`.
    pub fn validate(&self) -> Result<(), ResilienceConfigError> {
        check(!self.base.is_zero(), "backoff.base", "greater than zero")?;
        check(
            self.cap >= self.base,
            "backoff.cap",
            "at least backoff.base",
        )?;
        check(self.cap <= MAX_DURATION, "backoff.cap", "at most 1h")
    }
}

/// Retry budget shared by the connection attempts it governs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BudgetConfig {
    /// Retries allowed per 100 first attempts within the window (20 → one retry per five).
    pub percent: f64,
    /// How long a first attempt (and a retry) counts.
    #[serde(with = "humantime_serde")]
    pub window: Duration,
    /// Retries per second allowed with no traffic at all, in addition to `percent`.
    pub min_per_second: u32,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        BudgetConfig {
            percent: 20.0,
            window: Duration::from_secs(10),
            min_per_second: 1,
        }
    }
}

impl BudgetConfig {
    /// `0 <= percent <= 1000`, `1 s <= window <= 1 h`.
    pub fn validate(&self) -> Result<(), ResilienceConfigError> {
        check(
            (0.0..=1000.0).contains(&self.percent),
            "retry_budget.percent",
            "between 0 and 1000",
        )?;
        check(
            (Duration::from_secs(1)..=MAX_DURATION).contains(&self.window),
            "retry_budget.window",
            "between 1s and 1h",
        )
    }
}

/// Circuit breaker of one backend.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BreakerConfig {
    /// Failures in a row that open the breaker.
    pub consecutive_failures: u32,
    /// Fraction of failed attempts over `ratio_window` that opens the breaker (0 < r <= 1).
    pub failure_ratio: f64,
    /// Window of the failure ratio.
    #[serde(with = "humantime_serde")]
    pub ratio_window: Duration,
    /// Results needed in the window before the ratio is considered.
    pub min_requests: u32,
    /// Longest first cooldown; each cooldown is drawn from `[ceiling/2, ceiling]` with the
    /// ceiling doubling per consecutive opening.
    #[serde(with = "humantime_serde")]
    pub cooldown_base: Duration,
    /// Largest cooldown ceiling: bounds the time between the database's return and the next
    /// probe.
    #[serde(with = "humantime_serde")]
    pub cooldown_cap: Duration,
}

impl Default for BreakerConfig {
    /// 5 failures in a row, or half of at least 20 attempts in 10 s; cooldowns of 250 ms
    /// doubling to 1 s, so a probe reaches a recovered database within about a second.
    fn default() -> Self {
        BreakerConfig {
            consecutive_failures: 5,
            failure_ratio: 0.5,
            ratio_window: Duration::from_secs(10),
            min_requests: 20,
            cooldown_base: Duration::from_millis(250),
            cooldown_cap: Duration::from_secs(1),
        }
    }
}

impl BreakerConfig {
    /// `consecutive_failures >= 1`, `0 < failure_ratio <= 1`, `1 s <= ratio_window <= 1 h`,
    /// `min_requests >= 1`, `0 < cooldown_base <= cooldown_cap <= 1 h`.
    pub fn validate(&self) -> Result<(), ResilienceConfigError> {
        check(
            self.consecutive_failures >= 1,
            "breaker.consecutive_failures",
            "at least 1",
        )?;
        check(
            self.failure_ratio > 0.0 && self.failure_ratio <= 1.0,
            "breaker.failure_ratio",
            "above 0 and at most 1",
        )?;
        check(
            (Duration::from_secs(1)..=MAX_DURATION).contains(&self.ratio_window),
            "breaker.ratio_window",
            "between 1s and 1h",
        )?;
        check(self.min_requests >= 1, "breaker.min_requests", "at least 1")?;
        check(
            !self.cooldown_base.is_zero(),
            "breaker.cooldown_base",
            "greater than zero",
        )?;
        check(
            self.cooldown_cap >= self.cooldown_base,
            "breaker.cooldown_cap",
            "at least breaker.cooldown_base",
        )?;
        check(
            self.cooldown_cap <= MAX_DURATION,
            "breaker.cooldown_cap",
            "at most 1h",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_round_trip() {
        BackoffConfig::default().validate().expect("valid");
        BudgetConfig::default().validate().expect("valid");
        BreakerConfig::default().validate().expect("valid");
        let yaml = serde_yaml::to_string(&BreakerConfig::default()).expect("serializes");
        assert!(yaml.contains("cooldown_base: 250ms"), "{yaml}");
        let back: BreakerConfig = serde_yaml::from_str(&yaml).expect("parses");
        assert_eq!(back, BreakerConfig::default());
    }

    #[test]
    fn partial_config_takes_defaults_and_unknown_fields_are_refused() {
        let budget: BudgetConfig = serde_yaml::from_str("percent: 10\nwindow: 30s").expect("ok");
        assert_eq!(budget.percent, 10.0);
        assert_eq!(budget.window, Duration::from_secs(30));
        assert_eq!(budget.min_per_second, 1);
        assert!(serde_yaml::from_str::<BackoffConfig>("bsae: 1s").is_err());
    }

    #[test]
    fn validation_names_the_setting() {
        let config = BreakerConfig {
            failure_ratio: 1.5,
            ..BreakerConfig::default()
        };
        let err = config.validate().expect_err("ratio above 1");
        assert_eq!(err.field, "breaker.failure_ratio");
        assert_eq!(
            err.to_string(),
            "invalid setting breaker.failure_ratio: must be above 0 and at most 1"
        );
    }
}
