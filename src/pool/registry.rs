//! The set of pools, keyed by (database, user), created on first use.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::settings::{default_hosts, resolve, Resolved, RouteSpec};
use super::{Backend, Limit, LimitKind, Pool, PoolDeps, PoolSettings, Route};
use crate::config::{Config, ConfigCell};
use crate::counters::Counters;
use crate::events::Events;
use crate::lifecycle::Lifecycle;
use crate::metrics::{Metrics, PoolSnapshot, SnapshotSource};
use crate::server::{LearnedSecrets, SecretCell, ServerSecret, ServerTarget, TargetSecret};

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
    /// The pooler's drain and stop, which every pool follows, and its ticks.
    lifecycle: Arc<Lifecycle>,
    backend: Arc<Backend>,
    tls: Arc<crate::net::TlsCell>,
    map: Mutex<HashMap<PoolKey, Pool>>,
    /// The auth_query lookup pool (auth database, auth user): kept apart from the clients'
    /// pools, sized by `auth.auth_pool_size`.
    lookups: Mutex<HashMap<PoolKey, Pool>>,
    /// Server credentials learnt from client logins (SCRAM passthrough), by user.
    learned: Arc<LearnedSecrets>,
    /// `server.password` and `auth.auth_password` as configured now: shared by every pool,
    /// so a reload's rotated password reaches pools made before it.
    server_password: Arc<SecretCell>,
    auth_password: Arc<SecretCell>,
    /// The limits pools share, by database and by user: kept while a pool counts against
    /// them (whether or not a limit is set, so setting one by reload counts what is open).
    limits: Mutex<SharedLimits>,
}

#[derive(Default)]
struct SharedLimits {
    databases: HashMap<String, Arc<Limit>>,
    users: HashMap<String, Arc<Limit>>,
}

impl SharedLimits {
    /// The limits of a new pool `key`, made on first use.
    fn for_pool(&mut self, cfg: &Config, key: &PoolKey) -> Vec<Arc<Limit>> {
        let db = self
            .databases
            .entry(key.database.clone())
            .or_insert_with(|| {
                let max = PoolSettings::max_db_connections(cfg, &key.database);
                Arc::new(Limit::new(LimitKind::Database, max))
            });
        let db = db.clone();
        let user = self.users.entry(key.user.clone()).or_insert_with(|| {
            let max = PoolSettings::max_user_connections(cfg, &key.user);
            Arc::new(Limit::new(LimitKind::User, max))
        });
        vec![db, user.clone()]
    }

    /// Applies reloaded limits.
    fn apply(&self, cfg: &Config) {
        for (name, l) in &self.databases {
            l.cap
                .resize_limit(PoolSettings::max_db_connections(cfg, name));
        }
        for (name, l) in &self.users {
            l.cap
                .resize_limit(PoolSettings::max_user_connections(cfg, name));
        }
    }

    /// Forgets limits no pool counts against any more.
    fn sweep(&mut self) {
        self.databases.retain(|_, l| Arc::strong_count(l) > 1);
        self.users.retain(|_, l| Arc::strong_count(l) > 1);
    }
}

impl Pools {
    pub fn new(
        config: Arc<ConfigCell>,
        events: Events,
        counters: Arc<Counters>,
        metrics: Arc<Metrics>,
        tls: Arc<crate::net::TlsCell>,
        lifecycle: Arc<Lifecycle>,
    ) -> Self {
        let cfg = config.load();
        Pools {
            lifecycle,
            tls,
            backend: Arc::new(Backend::from_config(&cfg)),
            server_password: SecretCell::new(cfg.server.password.clone()),
            auth_password: SecretCell::new(cfg.auth.auth_password.clone()),
            config,
            events,
            counters,
            metrics,
            map: Mutex::new(HashMap::new()),
            lookups: Mutex::new(HashMap::new()),
            learned: Arc::default(),
            limits: Mutex::default(),
        }
    }

    /// What a new pool shares with the others (and the limits it counts against).
    fn deps(&self, limits: Vec<Arc<Limit>>) -> PoolDeps {
        PoolDeps {
            limits,
            events: self.events,
            counters: self.counters.clone(),
            metrics: self.metrics.clone(),
            backend: self.backend.clone(),
            lifecycle: self.lifecycle.clone(),
        }
    }

    /// A server login for `user` on `database` proving itself with `secret` (the host and
    /// port are each route host's, filled in at login).
    fn target(
        &self,
        cfg: &Config,
        user: String,
        database: String,
        secret: TargetSecret,
    ) -> ServerTarget {
        ServerTarget {
            host: String::new(),
            port: 0,
            user,
            database,
            secret,
            connect_timeout: cfg.server.connect_timeout,
            tls: self.tls.clone(),
            allow_cleartext: cfg.server.allow_cleartext_password,
        }
    }

    /// The drain began: servers are closed as soon as no client needs them (idle ones now;
    /// the others as their clients leave, every pool seeing the lifecycle's drain), so a
    /// terminating pooler stops holding connections that count against the budget while its
    /// last clients finish.
    pub async fn begin_drain(&self) {
        debug_assert!(self.lifecycle.is_draining());
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
            self.lock_limits().sweep();
        }
        let cfg = self.config.load();
        let cfg = &*cfg;
        let secret = if passthrough(cfg) {
            TargetSecret::Learned(self.learned.clone())
        } else {
            TargetSecret::Configured(self.server_password.clone())
        };
        let Resolved { settings, route } = resolve(cfg, key);
        let target = self.target(
            cfg,
            cfg.server.user.clone().unwrap_or_else(|| key.user.clone()),
            route.dbname.clone(),
            secret,
        );
        let route = Route::new(route, &self.backend.hosts);
        let limits = self.lock_limits().for_pool(cfg, key);
        let pool = Pool::new(key, false, target, route, settings, self.deps(limits));
        map.insert(key.clone(), pool.clone());
        pool
    }

    /// Applies reloaded pool settings and hosts to every pool (each resolved as a new pool
    /// of its key would be); a lookup pool for an auth user or database no longer configured
    /// is retired.
    pub fn apply(&self, cfg: &Config) {
        self.server_password.set(cfg.server.password.clone());
        self.auth_password.set(cfg.auth.auth_password.clone());
        self.lock_limits().apply(cfg);
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
            TargetSecret::Configured(self.auth_password.clone()),
        );
        let route = Route::new(lookup_route(cfg), &self.backend.hosts);
        let pool = Pool::new(
            &key,
            true,
            target,
            route,
            lookup_settings(cfg),
            self.deps(Vec::new()),
        );
        lookups.insert(key, pool.clone());
        Some(pool)
    }

    /// The pooler has stopped (its lifecycle's stop ended every pool's maintenance: waiters
    /// are answered, servers checked in from now on are closed): every idle server is closed
    /// politely.
    pub async fn shut_down(&self) {
        debug_assert!(self.lifecycle.drain.pool_token().is_cancelled());
        self.close_all().await;
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

    /// Keeps what `user` proved at login for its server logins, when they log in as the
    /// client's user with no configured password (SCRAM passthrough); otherwise keeps nothing.
    pub fn learn(&self, cfg: &Config, user: &str, secret: ServerSecret) {
        if passthrough(cfg) {
            self.learned.learn(user, secret);
        }
    }

    /// The credentials learnt from client logins (to forget those a change made stale).
    pub fn learned(&self) -> &LearnedSecrets {
        &self.learned
    }

    /// Logs how many lines the pools' rate limits held back (see [`crate::logs::LogLimit`]).
    pub fn flush_log_limits(&self) {
        self.backend.refused_logins.flush();
    }

    fn lock_limits(&self) -> std::sync::MutexGuard<'_, SharedLimits> {
        self.limits.lock().unwrap_or_else(|p| p.into_inner())
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

/// Server logins are as the client's user with no configured password: each user's own
/// credential, learnt from its logins, is used.
fn passthrough(cfg: &Config) -> bool {
    cfg.server.user.is_none() && cfg.server.password.is_none()
}

/// The lookup pool's key: the auth database and auth user, if auth_query is on.
fn lookup_key(cfg: &Config) -> Option<PoolKey> {
    Some(PoolKey {
        database: cfg.auth.auth_database.clone(),
        user: cfg.auth.auth_user.clone()?,
    })
}

/// A lookup pool's settings: `auth.auth_pool_size` servers, none kept open when idle, no
/// reserve.
fn lookup_settings(cfg: &Config) -> PoolSettings {
    PoolSettings {
        size: cfg.auth.auth_pool_size,
        min_size: 0,
        reserve_size: 0,
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
