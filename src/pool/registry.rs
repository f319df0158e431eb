//! The set of pools, keyed by (database, user), created on first use.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use super::settings::{default_hosts, resolve, Resolved, RouteSpec};
use super::{Backend, Pool, PoolDeps, PoolSettings, Route};
use crate::config::{Config, ConfigCell, Secret};
use crate::events::Events;
use crate::metrics::{Metrics, PoolSnapshot, SnapshotSource};
use crate::server::ServerTarget;
use crate::shared::Counters;

/// Pool count above which unused pools are swept on the next new one.
const SWEEP_ABOVE: usize = 16;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PoolKey {
    pub database: String,
    pub user: String,
}

/// All pools of one pooler instance.
pub struct Pools {
    config: Arc<ConfigCell>,
    events: Events,
    counters: Arc<Counters>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    backend: Arc<Backend>,
    tls: Arc<crate::net::TlsCell>,
    map: Mutex<HashMap<PoolKey, Pool>>,
    /// Set when the pooler starts draining: every pool, also one made later, gives its
    /// servers back (see `Pool::checkin_at`).
    draining: Arc<AtomicBool>,
    /// The auth_query lookup pool (auth database, auth user): kept apart from the clients'
    /// pools, sized by `auth.auth_pool_size`.
    lookups: Mutex<HashMap<PoolKey, Pool>>,
}

impl Pools {
    pub fn new(
        config: Arc<ConfigCell>,
        events: Events,
        counters: Arc<Counters>,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
        tls: Arc<crate::net::TlsCell>,
    ) -> Self {
        Pools {
            tls,
            backend: Arc::new(Backend::from_config(&config.load())),
            config,
            events,
            counters,
            metrics,
            shutdown,
            map: Mutex::new(HashMap::new()),
            draining: Arc::new(AtomicBool::new(false)),
            lookups: Mutex::new(HashMap::new()),
        }
    }

    /// What a new pool shares with the others.
    fn deps(&self) -> PoolDeps {
        PoolDeps {
            events: self.events,
            counters: self.counters.clone(),
            metrics: self.metrics.clone(),
            shutdown: self.shutdown.child_token(),
            backend: self.backend.clone(),
            draining: self.draining.clone(),
        }
    }

    /// A server login for `user` on `database` with this `password`, as configured (the
    /// host and port are each route host's, filled in at login).
    fn target(
        &self,
        cfg: &Config,
        user: String,
        database: String,
        password: Option<Secret>,
    ) -> ServerTarget {
        ServerTarget {
            host: String::new(),
            port: 0,
            user,
            database,
            password,
            connect_timeout: cfg.server.connect_timeout,
            tls: self.tls.clone(),
            allow_cleartext: cfg.server.allow_cleartext_password,
        }
    }

    /// The drain began: servers are closed as soon as no client needs them (idle ones now),
    /// so a terminating pooler stops holding connections that count against the budget
    /// while its last clients finish.
    pub async fn begin_drain(&self) {
        self.draining.store(true, Ordering::Release);
        self.close_all().await;
    }

    /// The pool for this key, made (and its warm minimum started) on first use.
    pub fn get(&self, key: &PoolKey) -> Pool {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = map.get(key) {
            return p.clone();
        }
        // Clients name any database and user they like: forget pools nobody uses, so made-up
        // names cannot grow the pooler without bound.
        if map.len() >= SWEEP_ABOVE {
            map.retain(|_, p| {
                let keep = !p.is_unused();
                if !keep {
                    p.retire();
                }
                keep
            });
        }
        let cfg = self.config.load();
        let cfg = &*cfg;
        let Resolved { settings, route } = resolve(cfg, key);
        let target = self.target(
            cfg,
            cfg.server.user.clone().unwrap_or_else(|| key.user.clone()),
            route.dbname.clone(),
            cfg.server.password.clone(),
        );
        let route = Route::new(route, &self.backend.hosts);
        let pool = Pool::new(
            key,
            settings.mode.as_str(),
            target,
            route,
            settings,
            self.deps(),
        );
        map.insert(key.clone(), pool.clone());
        pool
    }

    /// Applies reloaded pool settings and hosts to every pool (each resolved as a new pool
    /// of its key would be); a lookup pool for an auth user or database no longer configured
    /// is retired.
    pub fn apply(&self, cfg: &Config) {
        let pools: Vec<(PoolKey, Pool)> = {
            let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
            map.iter().map(|(k, p)| (k.clone(), p.clone())).collect()
        };
        for (key, pool) in pools {
            let Resolved { settings, route } = resolve(cfg, &key);
            pool.update(settings);
            pool.set_route(route);
        }
        let current = lookup_key(cfg);
        let mut lookups = self.lookups.lock().unwrap_or_else(|p| p.into_inner());
        lookups.retain(|key, pool| {
            let keep = current.as_ref() == Some(key);
            if keep {
                pool.update(lookup_settings(cfg));
                pool.set_route(lookup_route(cfg));
            } else {
                pool.retire();
            }
            keep
        });
    }

    /// The pool auth_query lookups run on, made on first use; `None` without an auth user.
    pub fn lookup_pool(&self, cfg: &Config) -> Option<Pool> {
        let key = lookup_key(cfg)?;
        let mut lookups = self.lookups.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = lookups.get(&key) {
            return Some(p.clone());
        }
        let target = self.target(
            cfg,
            key.user.clone(),
            key.database.clone(),
            cfg.auth.auth_password.clone(),
        );
        let route = Route::new(lookup_route(cfg), &self.backend.hosts);
        let pool = Pool::new(
            &key,
            "lookup",
            target,
            route,
            lookup_settings(cfg),
            self.deps(),
        );
        lookups.insert(key, pool.clone());
        Some(pool)
    }

    /// Closes every idle server politely (Terminate), waiting for the goodbyes to be sent.
    pub async fn close_all(&self) {
        let lookups: Vec<Pool> = {
            let l = self.lookups.lock().unwrap_or_else(|p| p.into_inner());
            l.values().cloned().collect()
        };
        for pool in self.all().into_iter().chain(lookups) {
            pool.close_idle_now().await;
        }
    }

    /// The TLS settings server logins use.
    pub fn tls(&self) -> &Arc<crate::net::TlsCell> {
        &self.tls
    }

    pub fn all(&self) -> Vec<Pool> {
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.values().cloned().collect()
    }
}

impl SnapshotSource for Pools {
    fn snapshots(&self) -> Vec<PoolSnapshot> {
        self.all().iter().map(Pool::snapshot).collect()
    }
}

/// The lookup pool's key: the auth database and auth user, if auth_query is on.
fn lookup_key(cfg: &Config) -> Option<PoolKey> {
    Some(PoolKey {
        database: cfg.auth.auth_database.clone(),
        user: cfg.auth.auth_user.clone()?,
    })
}

/// A lookup pool's settings: `auth.auth_pool_size` servers, none kept open when idle.
fn lookup_settings(cfg: &Config) -> PoolSettings {
    PoolSettings {
        size: cfg.auth.auth_pool_size,
        min_size: 0,
        ..PoolSettings::from_config(cfg)
    }
}

/// A lookup pool's hosts: the `server:` ones, in the `server:` roles (a lookup reads).
fn lookup_route(cfg: &Config) -> RouteSpec {
    RouteSpec {
        dbname: cfg.auth.auth_database.clone(),
        hosts: default_hosts(cfg),
        tsa: cfg.server.target_session_attrs,
        lb: cfg.server.load_balance_hosts,
    }
}
