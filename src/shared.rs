//! The context every task shares, built once in the composition root and passed by handle.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::client::cancel::Cancels;
use crate::config::Config;
use crate::events::Events;
use crate::pool::Pools;

/// Numbering and counts that are not metrics.
#[derive(Debug, Default)]
pub struct Counters {
    next_client: AtomicU64,
    next_server: AtomicU64,
    /// Client connections open now (including those still in startup).
    pub clients_open: AtomicUsize,
}

impl Counters {
    pub fn next_client_id(&self) -> u64 {
        self.next_client.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub fn next_server_id(&self) -> u64 {
        self.next_server.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// Everything a client task needs from the rest of the pooler.
pub struct Shared {
    pub config: Arc<Config>,
    pub events: Events,
    pub counters: Arc<Counters>,
    pub pools: Pools,
    pub cancels: Cancels,
    pub shutdown: CancellationToken,
}

impl Shared {
    pub fn new(config: Config, shutdown: CancellationToken) -> Arc<Shared> {
        let config = Arc::new(config);
        let events = Events::new(config.log.events);
        let counters = Arc::new(Counters::default());
        Arc::new(Shared {
            pools: Pools::new(config.clone(), events, counters.clone(), shutdown.clone()),
            config,
            events,
            counters,
            cancels: Cancels::default(),
            shutdown,
        })
    }
}
