//! Per-pool housekeeping once a second: retire idle and expired servers, keep the warm
//! minimum open, and start logins for waiters nobody is connecting for.

use std::time::{Duration, Instant};

use super::Pool;

const TICK: Duration = Duration::from_secs(1);

pub(super) fn spawn(pool: Pool) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = pool.inner.shutdown.cancelled() => break,
                _ = tick.tick() => pool.maintain(),
            }
        }
        pool.close_idle();
    });
}

impl Pool {
    fn maintain(&self) {
        let now = Instant::now();
        self.settle_debt();
        let s = self.settings();
        let retire = {
            let mut st = self.lock();
            let mut keep = std::collections::VecDeque::with_capacity(st.idle.len());
            let mut retire = Vec::new();
            let mut open = self.open_count();
            // Oldest-used first, so the warm minimum keeps the most recently used servers.
            while let Some(conn) = st.idle.pop_front() {
                let idle_too_long = !s.idle_timeout.is_zero()
                    && now.duration_since(conn.last_used) >= s.idle_timeout
                    && open > s.min_size;
                if conn.is_expired(now) || idle_too_long || !conn.is_usable_idle() {
                    open -= 1;
                    retire.push(conn);
                } else {
                    keep.push_back(conn);
                }
            }
            st.idle = keep;
            self.spawn_connects(&mut st);
            retire
        };
        for conn in retire {
            self.close(conn);
        }
        let mut open = self.open_count();
        while open < s.min_size && self.spawn_warm() {
            open += 1;
        }
    }

    fn close_idle(&self) {
        let idle: Vec<_> = self.lock().idle.drain(..).collect();
        for conn in idle {
            self.close(conn);
        }
    }
}
