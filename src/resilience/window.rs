//! A sliding time window cut into a fixed ring of buckets, moved forward by the caller's `Instant`.
//!
//! Shared by the retry budget (net tokens per bucket) and the circuit breaker (outcomes per
//! bucket). Advancing costs at most one pass over the ring, however long the window sat idle.

use std::time::{Duration, Instant};

/// Buckets per window: a value recorded at `t` counts until somewhere in
/// `(t + window - window/BUCKETS, t + window]`.
pub(super) const BUCKETS: usize = 10;

/// A ring of `BUCKETS` values of `T`, the head being the bucket that receives new records.
#[derive(Debug, Clone)]
pub(super) struct Buckets<T> {
    slots: [T; BUCKETS],
    head: usize,
    /// Start of the head bucket; `None` until the first record (so constructors need no clock).
    head_start: Option<Instant>,
    slot_len: Duration,
}

impl<T: Copy + Default> Buckets<T> {
    /// A window of `window`, split in `BUCKETS` equal buckets (at least 1 ns each).
    pub(super) fn new(window: Duration) -> Self {
        let slot_len = (window / BUCKETS as u32).max(Duration::from_nanos(1));
        Buckets {
            slots: [T::default(); BUCKETS],
            head: 0,
            head_start: None,
            slot_len,
        }
    }

    /// The bucket that receives records made at `now`, after expiring older buckets.
    pub(super) fn current(&mut self, now: Instant) -> &mut T {
        self.advance(now);
        &mut self.slots[self.head]
    }

    /// Every bucket still inside the window as of the last `advance`.
    pub(super) fn iter(&self) -> impl Iterator<Item = &T> {
        self.slots.iter()
    }

    /// Forget everything recorded so far.
    pub(super) fn clear(&mut self) {
        self.slots = [T::default(); BUCKETS];
        self.head_start = None;
    }

    /// Expire the buckets that `now` has moved past. A `now` earlier than the head bucket
    /// (callers racing with slightly older clocks) is counted in the head bucket.
    pub(super) fn advance(&mut self, now: Instant) {
        let Some(start) = self.head_start else {
            self.head_start = Some(now);
            return;
        };
        let elapsed = now.saturating_duration_since(start);
        let steps = elapsed.as_nanos() / self.slot_len.as_nanos();
        if steps == 0 {
            return;
        }
        if steps >= BUCKETS as u128 {
            self.slots = [T::default(); BUCKETS];
            self.head_start = Some(now);
            return;
        }
        for _ in 0..steps {
            self.head = (self.head + 1) % BUCKETS;
            self.slots[self.head] = T::default();
        }
        // steps < BUCKETS, so the cast is lossless and the product cannot overflow.
        self.head_start = Some(start + self.slot_len * steps as u32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_expire_after_one_window() {
        let t0 = Instant::now();
        let mut w: Buckets<u32> = Buckets::new(Duration::from_secs(10));
        *w.current(t0) += 5;
        *w.current(t0 + Duration::from_millis(8_999)) += 1;
        assert_eq!(w.iter().sum::<u32>(), 6);
        w.advance(t0 + Duration::from_secs(10));
        assert_eq!(
            w.iter().sum::<u32>(),
            1,
            "the first record expired, the later one not"
        );
        w.advance(t0 + Duration::from_secs(3600));
        assert_eq!(w.iter().sum::<u32>(), 0);
    }

    #[test]
    fn older_now_counts_in_head() {
        let t0 = Instant::now() + Duration::from_secs(5);
        let mut w: Buckets<u32> = Buckets::new(Duration::from_secs(1));
        *w.current(t0) += 1;
        *w.current(t0 - Duration::from_secs(5)) += 1;
        assert_eq!(w.iter().sum::<u32>(), 2);
    }
}
