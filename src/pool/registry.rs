//! The set of pools, keyed by (database, user), created on first use.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use super::{Pool, PoolSettings};
use crate::config::Config;
use crate::events::Events;
use crate::server::ServerTarget;
use crate::shared::Counters;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PoolKey {
    pub database: String,
    pub user: String,
}

/// All pools of one pooler instance.
pub struct Pools {
    config: Arc<Config>,
    events: Events,
    counters: Arc<Counters>,
    shutdown: CancellationToken,
    map: Mutex<HashMap<PoolKey, Pool>>,
}

impl Pools {
    pub fn new(
        config: Arc<Config>,
        events: Events,
        counters: Arc<Counters>,
        shutdown: CancellationToken,
    ) -> Self {
        Pools {
            config,
            events,
            counters,
            shutdown,
            map: Mutex::new(HashMap::new()),
        }
    }

    /// The pool for this key, made (and its warm minimum started) on first use.
    pub fn get(&self, key: &PoolKey) -> Pool {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = map.get(key) {
            return p.clone();
        }
        let cfg = &self.config;
        let target = ServerTarget {
            host: cfg.server.host.clone(),
            port: cfg.server.port,
            user: cfg.server.user.clone().unwrap_or_else(|| key.user.clone()),
            database: cfg
                .server
                .database
                .clone()
                .unwrap_or_else(|| key.database.clone()),
            password: cfg.server.password.clone(),
            connect_timeout: cfg.server.connect_timeout,
        };
        let pool = Pool::new(
            format!("{}/{}", key.database, key.user),
            target,
            PoolSettings::from_config(cfg),
            self.events,
            self.counters.clone(),
            self.shutdown.child_token(),
        );
        map.insert(key.clone(), pool.clone());
        pool
    }

    pub fn all(&self) -> Vec<Pool> {
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.values().cloned().collect()
    }
}
