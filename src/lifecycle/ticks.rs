//! Once-a-second ticks for the data plane's housekeeping (the liveness beats, each pool's
//! upkeep, the reload poll), counted on a small thread of their own. The data plane's timer
//! wheel then holds no interval: while no deadline is armed, a park of its runtime reads no
//! timer and walks no wheel (about 400 instructions per `-S` transaction at one client, with
//! a 1 s interval in the wheel). A tick still proves the data plane turns: the task that
//! beats runs there.

use std::time::Duration;

use tokio::sync::watch;

/// A receiver of the ticks; clones share the one ticker, which ends once none is left.
#[derive(Debug, Clone)]
pub struct Ticks {
    rx: watch::Receiver<u64>,
}

impl Ticks {
    /// Ticks every `every` until no [`Ticks`] is left. Should no thread start, a task of the
    /// current runtime ticks instead (its interval then sits in that runtime's wheel).
    pub fn start(every: Duration) -> Ticks {
        let (tx, rx) = watch::channel(0u64);
        let started = std::thread::Builder::new()
            .name("droid-pool-ticks".into())
            .stack_size(64 * 1024)
            .spawn(move || {
                let mut n = 0u64;
                loop {
                    std::thread::sleep(every);
                    n += 1;
                    // Every receiver is gone: nothing is left to tick for.
                    if tx.send(n).is_err() {
                        return;
                    }
                }
            });
        if let Err(e) = started {
            tracing::error!(error = %e, "no ticker thread; ticking in the runtime");
            let (tx, rx) = watch::channel(0u64);
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    let mut every =
                        tokio::time::interval_at(tokio::time::Instant::now() + every, every);
                    let mut n = 0u64;
                    loop {
                        every.tick().await;
                        n += 1;
                        if tx.send(n).is_err() {
                            return;
                        }
                    }
                });
            }
            return Ticks { rx };
        }
        Ticks { rx }
    }

    /// Waits for the next tick; ticks missed meanwhile count as one.
    pub async fn tick(&mut self) {
        if self.rx.changed().await.is_err() {
            // No ticker (no thread and no runtime to tick in): no tick comes.
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every clone sees a tick; ticks missed while away count as one, not as a burst.
    #[tokio::test]
    async fn clones_tick_and_missed_ticks_count_once() {
        let mut a = Ticks::start(Duration::from_millis(100));
        let mut b = a.clone();
        tokio::time::timeout(Duration::from_secs(5), a.tick())
            .await
            .expect("a tick");
        tokio::time::timeout(Duration::from_secs(5), b.tick())
            .await
            .expect("a clone's tick");
        std::thread::sleep(Duration::from_millis(450));
        let now = |t: &Ticks| {
            let mut t = t.clone();
            async move { tokio::time::timeout(Duration::ZERO, t.tick()).await.is_ok() }
        };
        assert!(now(&a).await, "the ticks missed meanwhile are seen at once");
        a.tick().await;
        assert!(!now(&a).await, "and only once");
    }
}
