//! Numbering of clients and servers and counts that are not metrics (open clients, warm
//! sessions), shared by the pools and the client tasks.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Numbering and counts that are not metrics.
#[derive(Debug, Default)]
pub struct Counters {
    next_client: AtomicU64,
    next_server: AtomicU64,
    /// Client connections open now (including those still in startup).
    pub clients_open: AtomicUsize,
    /// Sessions keeping their working buffers between transactions (see [`WarmSlot`]).
    warm_sessions: AtomicUsize,
}

/// A session's right to keep its buffers and round between transactions; given back on drop.
pub struct WarmSlot(Arc<Counters>);

impl Drop for WarmSlot {
    fn drop(&mut self) {
        self.0.warm_sessions.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Counters {
    /// The next client number (1, 2, ...).
    pub fn next_client_id(&self) -> u64 {
        self.next_client.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The next server number (1, 2, ...).
    pub fn next_server_id(&self) -> u64 {
        self.next_server.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// A warm slot, if fewer than `limit` (`client.warm_sessions`) are taken.
    pub fn take_warm(self: &Arc<Self>, limit: usize) -> Option<WarmSlot> {
        self.warm_sessions
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < limit).then_some(n + 1)
            })
            .ok()
            .map(|_| WarmSlot(self.clone()))
    }

    /// How many warm slots are taken.
    pub fn warm_sessions(&self) -> usize {
        self.warm_sessions.load(Ordering::Relaxed)
    }
}
