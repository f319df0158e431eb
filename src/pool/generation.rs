//! The console's hold on a pool's servers: `RECONNECT` starts a new generation (servers opened
//! before it are closed when released, idle ones at once), `WAIT_CLOSE` asks how many of the
//! older ones are still open, and `KILL` closes the idle servers now.

use super::{CloseReason, Pool};
use crate::server::Generation;

impl Pool {
    /// `RECONNECT`: servers opened (or logging in) until now are closed when next released
    /// instead of reused, idle ones at once; new logins are made as clients need them.
    pub fn reconnect(&self) {
        let idle: Vec<_> = {
            let mut st = self.lock();
            let next = st.generation.next();
            let old = std::mem::replace(&mut st.generation, next);
            st.older.push(old);
            st.idle.drain(..).collect()
        };
        for conn in idle {
            self.close(conn, CloseReason::Reconnect);
        }
        self.lock_and_spawn();
    }

    /// Servers opened before the last `RECONNECT` that are still open (busy, idle, being
    /// reset, logging in or saying goodbye): PgBouncer's `close_needed`.
    pub fn close_needed(&self) -> usize {
        let mut st = self.lock();
        st.older.retain(|g| g.others() > 0);
        st.older.iter().map(Generation::others).sum()
    }

    /// The number of the generation new servers are opened under.
    pub fn generation(&self) -> u64 {
        self.lock().generation.number()
    }

    /// The idle servers, for the admin console: number, and whether it must be closed.
    pub fn idle_servers(&self) -> Vec<(u64, bool)> {
        let st = self.lock();
        let current = st.generation.number();
        st.idle
            .iter()
            .map(|c| (c.id, c.generation.number() != current))
            .collect()
    }

    /// Closes every idle server now (`reason`: why, for the metric).
    pub fn close_idle_as(&self, reason: CloseReason) {
        let idle: Vec<_> = self.lock().idle.drain(..).collect();
        for conn in idle {
            self.close(conn, reason);
        }
        self.sweep_parked(std::time::Instant::now(), true);
    }
}
