//! What a pool reads from the configuration, and where each pool's overrides are resolved
//! (the user's `users:` entry over the `pool:` defaults).

use std::time::Duration;

use super::PoolKey;
use crate::config::{Config, PoolMode};

/// Settings a pool reads; taken from the config when the pool is made.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PoolSettings {
    pub mode: PoolMode,
    pub size: usize,
    pub min_size: usize,
    pub max_waiting: usize,
    pub query_wait_timeout: Duration,
    pub round_robin: bool,
    pub idle_timeout: Duration,
    pub lifetime: Duration,
    pub lifetime_jitter: f64,
    /// Extra servers once a client has waited `reserve_timeout`.
    pub reserve_size: usize,
    pub reserve_timeout: Duration,
    /// A server idle this long is checked before reuse; `None`: no check query.
    pub check_delay: Option<Duration>,
}

impl PoolSettings {
    /// The settings every pool has unless something more specific says otherwise.
    pub fn from_config(cfg: &Config) -> Self {
        PoolSettings {
            mode: cfg.pool.mode,
            size: cfg.pool.size,
            min_size: cfg.pool.min_size,
            max_waiting: cfg.pool.max_waiting_clients,
            query_wait_timeout: cfg.pool.query_wait_timeout,
            round_robin: cfg.pool.server_round_robin,
            idle_timeout: cfg.server.idle_timeout,
            lifetime: cfg.server.lifetime,
            lifetime_jitter: cfg.server.lifetime_jitter,
            reserve_size: cfg.pool.reserve_size,
            reserve_timeout: cfg.pool.reserve_timeout,
            check_delay: (!cfg.server.check_query.is_empty()).then_some(cfg.server.check_delay),
        }
    }

    /// The settings of the pool `key`, the most specific first (PgBouncer's order): the
    /// user's (`users:`), then the defaults (`pool:`). The one place a pool's overrides are
    /// resolved.
    pub fn for_pool(cfg: &Config, key: &PoolKey) -> Self {
        let base = PoolSettings::from_config(cfg);
        match cfg.users.get(&key.user) {
            None => base,
            Some(u) => PoolSettings {
                mode: u.mode.unwrap_or(base.mode),
                size: u.pool_size.unwrap_or(base.size),
                ..base
            },
        }
    }

    /// The pool mode of `user`'s pools, without building the rest (read per transaction).
    #[inline]
    pub fn mode_for(cfg: &Config, user: &str) -> PoolMode {
        if cfg.users.is_empty() {
            return cfg.pool.mode;
        }
        cfg.users
            .get(user)
            .and_then(|u| u.mode)
            .unwrap_or(cfg.pool.mode)
    }

    /// The server connections all pools of `user` may hold together (`0`: no limit).
    pub fn max_user_connections(cfg: &Config, user: &str) -> usize {
        cfg.users
            .get(user)
            .and_then(|u| u.max_user_connections)
            .unwrap_or(cfg.pool.max_user_connections)
    }

    /// The server connections all pools of `database` may hold together (`0`: no limit).
    pub fn max_db_connections(cfg: &Config, _database: &str) -> usize {
        cfg.pool.max_db_connections
    }
}
