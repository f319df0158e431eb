//! Capped exponential backoff with full jitter for retried server connection attempts.
//!
//! `delay(n) = random(0, min(cap, base * 2^n))`: the ceiling grows, the draw spreads clients
//! that failed together so they do not retry together. The random source is the caller's.

use std::time::Duration;

use rand::Rng;

use super::{BackoffConfig, ResilienceConfigError};

/// The exponential ceiling `min(cap, base * 2^attempt)`, computed without overflow for any
/// `attempt` (an overflowing product is simply above the cap).
pub fn ceiling(base: Duration, cap: Duration, attempt: u32) -> Duration {
    if attempt >= 128 {
        return cap;
    }
    match base.as_nanos().checked_mul(1u128 << attempt) {
        Some(nanos) if nanos < cap.as_nanos() => duration_from_nanos(nanos),
        _ => cap,
    }
}

/// One full-jitter delay: uniform in `[0, ceiling(base, cap, attempt)]` at nanosecond resolution.
pub fn full_jitter<R: Rng + ?Sized>(
    base: Duration,
    cap: Duration,
    attempt: u32,
    rng: &mut R,
) -> Duration {
    uniform(Duration::ZERO, ceiling(base, cap, attempt), rng)
}

/// Uniform in `[low, high]` (inclusive, nanosecond resolution); `low` if `high < low`.
pub(super) fn uniform<R: Rng + ?Sized>(low: Duration, high: Duration, rng: &mut R) -> Duration {
    let low = saturating_nanos(low);
    let high = saturating_nanos(high);
    if high <= low {
        return Duration::from_nanos(low);
    }
    Duration::from_nanos(rng.gen_range(low..=high))
}

fn saturating_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn duration_from_nanos(nanos: u128) -> Duration {
    u64::try_from(nanos).map_or(Duration::MAX, Duration::from_nanos)
}

/// The backoff state of one retrying loop (e.g. one backend's connect loop): which attempt
/// comes next. Not shared: each loop owns its `Backoff`.
#[derive(Debug, Clone)]
pub struct Backoff {
    config: BackoffConfig,
    attempt: u32,
}

impl Backoff {
    /// A backoff at attempt 0. Fails if the config is invalid (see [`BackoffConfig::validate`]).
    pub fn new(config: BackoffConfig) -> Result<Self, ResilienceConfigError> {
        config.validate()?;
        Ok(Backoff { config, attempt: 0 })
    }

    /// The delay before the next retry, drawn with `rng`; advances the attempt counter.
    /// The first call after `new` or `reset` draws from `[0, base]`.
    pub fn next_delay<R: Rng + ?Sized>(&mut self, rng: &mut R) -> Duration {
        let delay = full_jitter(self.config.base, self.config.cap, self.attempt, rng);
        self.attempt = self.attempt.saturating_add(1);
        delay
    }

    /// Back to attempt 0: call it when an attempt succeeds.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }

    /// Retries drawn since the last reset (the exponent of the next ceiling).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The config this backoff was built with.
    pub fn config(&self) -> &BackoffConfig {
        &self.config
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use rand::rngs::StdRng;
    use rand::SeedableRng;

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn attempt_three_is_bounded_and_actually_random() {
        let mut rng = StdRng::seed_from_u64(7);
        let (base, cap) = (50 * MS, 2000 * MS);
        let mut seen = HashSet::new();
        for _ in 0..1000 {
            let d = full_jitter(base, cap, 3, &mut rng);
            assert!(d <= 400 * MS, "{d:?} above min(cap, base*8)");
            seen.insert(d);
        }
        assert!(seen.len() >= 100, "only {} distinct delays", seen.len());
    }

    #[test]
    fn cap_holds_at_high_attempts_and_nothing_overflows() {
        let mut rng = StdRng::seed_from_u64(1);
        let (base, cap) = (50 * MS, 1000 * MS);
        for attempt in [5, 10, 31, 32, 63, 64, 127, 128, 1000, u32::MAX] {
            assert_eq!(ceiling(base, cap, attempt), cap, "attempt {attempt}");
            for _ in 0..100 {
                assert!(full_jitter(base, cap, attempt, &mut rng) <= cap);
            }
        }
        assert_eq!(ceiling(Duration::MAX, Duration::MAX, 1000), Duration::MAX);
        assert_eq!(ceiling(base, cap, 0), base);
        assert_eq!(ceiling(base, cap, 4), 800 * MS);
    }

    #[test]
    fn tiny_base_grows_past_u32_exponents() {
        // 1 ns * 2^40 ≈ 18 min: must not be clamped early just because the exponent is large.
        let cap = Duration::from_secs(3600);
        assert_eq!(
            ceiling(Duration::from_nanos(1), cap, 40),
            Duration::from_nanos(1 << 40)
        );
    }

    #[test]
    fn backoff_grows_then_resets() {
        let mut rng = StdRng::seed_from_u64(3);
        let config = BackoffConfig {
            base: 50 * MS,
            cap: 1000 * MS,
        };
        let mut backoff = Backoff::new(config).expect("valid config");
        for max in [50, 100, 200, 400, 800, 1000, 1000] {
            let d = backoff.next_delay(&mut rng);
            assert!(d <= max * MS, "{d:?} > {max} ms");
        }
        assert_eq!(backoff.attempt(), 7);
        // At the cap, the draws spread over the whole range rather than sitting at its top.
        let late: Vec<Duration> = (0..200).map(|_| backoff.next_delay(&mut rng)).collect();
        assert!(late.iter().any(|d| *d < 250 * MS) && late.iter().any(|d| *d > 750 * MS));
        backoff.reset();
        assert_eq!(backoff.attempt(), 0);
        assert!(backoff.next_delay(&mut rng) <= 50 * MS);
    }

    #[test]
    fn invalid_configs_are_refused() {
        let zero = BackoffConfig {
            base: Duration::ZERO,
            cap: MS,
        };
        assert!(Backoff::new(zero).is_err());
        let inverted = BackoffConfig {
            base: 2 * MS,
            cap: MS,
        };
        assert!(Backoff::new(inverted).is_err());
    }
}
