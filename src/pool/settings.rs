//! What one pool uses, resolved from the configuration in one place: its size, mode and
//! waits ([`PoolSettings`]) and where its servers come from ([`RouteSpec`]). Precedence, as
//! PgBouncer's: the user's `users:` entry, then the `databases:` alias, then the `pool:` and
//! `server:` defaults.

use std::time::Duration;

use super::PoolKey;
use crate::config::policy::Policy;
use crate::config::{
    Config, HostAddr, LoadBalanceHosts, PoolMode, PoolRule, SessionState, TargetSessionAttrs,
};

/// Settings a pool reads; resolved when the pool is made and again at each reload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PoolSettings {
    pub size: usize,
    pub min_size: usize,
    pub max_waiting: usize,
    pub query_wait_timeout: Duration,
    pub round_robin: bool,
    pub idle_timeout: Duration,
    pub lifetime: Duration,
    pub lifetime_jitter: f64,
    /// The pooling mode of the pool's transactions (from the next transaction on).
    pub mode: PoolMode,
    /// What transaction pooling does with session state (`pool.session_state`).
    pub session_state: SessionState,
    /// `pool.reset_query_always`.
    pub reset_query_always: bool,
    /// How long a transaction waits while no host fits (0: refused at once); never longer
    /// than `query_wait_timeout`.
    pub hold_timeout: Duration,
    /// Extra servers once a client has waited `reserve_timeout`.
    pub reserve_size: usize,
    pub reserve_timeout: Duration,
    /// A server idle this long is checked before reuse; `None`: no check query.
    pub check_delay: Option<Duration>,
    /// What the pool's transactions run under, made from the settings above and the
    /// configuration ([`PoolSettings::with_policy`]); the pool publishes it to its clients.
    pub policy: Policy,
}

impl PoolSettings {
    /// The defaults of the `pool:` and `server:` sections, for a pool no alias names.
    pub fn from_config(cfg: &Config) -> Self {
        let wait = cfg.pool.query_wait_timeout;
        let hold = cfg.failover.hold_timeout;
        PoolSettings {
            size: cfg.pool.size,
            min_size: cfg.pool.min_size,
            max_waiting: cfg.pool.max_waiting_clients,
            query_wait_timeout: wait,
            round_robin: cfg.pool.server_round_robin,
            idle_timeout: cfg.server.idle_timeout,
            lifetime: cfg.server.lifetime,
            lifetime_jitter: cfg.server.lifetime_jitter,
            mode: cfg.pool.mode,
            session_state: cfg.pool.session_state,
            reset_query_always: cfg.pool.reset_query_always,
            hold_timeout: if wait.is_zero() { hold } else { hold.min(wait) },
            reserve_size: cfg.pool.reserve_size,
            reserve_timeout: cfg.pool.reserve_timeout,
            check_delay: (!cfg.server.check_query.is_empty()).then_some(cfg.server.check_delay),
            policy: Policy::of(
                cfg,
                PoolRule {
                    mode: cfg.pool.mode,
                    session_state: cfg.pool.session_state,
                    reset_always: cfg.pool.reset_query_always,
                },
            ),
        }
    }

    /// The settings with their policy made again from the mode, `pool.session_state` and
    /// `pool.reset_query_always` they hold now (an alias's or a user's).
    fn with_policy(mut self, cfg: &Config) -> Self {
        let rule = PoolRule {
            mode: self.mode,
            session_state: self.session_state,
            reset_always: self.reset_query_always,
        };
        self.policy = Policy::of(cfg, rule);
        self
    }

    /// The settings of the pool for `key`.
    pub fn for_pool(cfg: &Config, key: &PoolKey) -> Self {
        resolve(cfg, key).settings
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

/// Where a pool's servers come from.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteSpec {
    /// The database servers are logged in to.
    pub dbname: String,
    pub hosts: Vec<HostAddr>,
    pub tsa: TargetSessionAttrs,
    pub lb: LoadBalanceHosts,
}

/// Everything a pool takes from the configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    pub settings: PoolSettings,
    pub route: RouteSpec,
}

/// The one place a pool's settings are resolved: the user's entry, then the alias the
/// client's database name matches, if any, over the defaults.
pub fn resolve(cfg: &Config, key: &PoolKey) -> Resolved {
    let alias = cfg.databases.get(&key.database);
    let mut settings = PoolSettings::from_config(cfg);
    if let Some(a) = alias {
        settings.size = a.pool_size.unwrap_or(settings.size);
        settings.mode = a.mode.unwrap_or(settings.mode);
        settings.session_state = a.session_state.unwrap_or(settings.session_state);
        settings.reset_query_always = a.reset_query_always.unwrap_or(settings.reset_query_always);
    }
    if let Some(u) = cfg.users.get(&key.user) {
        settings.size = u.pool_size.unwrap_or(settings.size);
        settings.mode = u.mode.unwrap_or(settings.mode);
        settings.session_state = u.session_state.unwrap_or(settings.session_state);
        settings.reset_query_always = u.reset_query_always.unwrap_or(settings.reset_query_always);
    }
    let settings = settings.with_policy(cfg);
    let s = &cfg.server;
    let route = RouteSpec {
        dbname: alias
            .and_then(|a| a.dbname.clone())
            .or_else(|| s.database.clone())
            .unwrap_or_else(|| key.database.clone()),
        hosts: match alias.filter(|a| !a.hosts.is_empty()) {
            Some(a) => parse_hosts(&a.hosts),
            None => default_hosts(cfg),
        },
        tsa: alias
            .and_then(|a| a.target_session_attrs)
            .unwrap_or(s.target_session_attrs),
        lb: alias
            .and_then(|a| a.load_balance_hosts)
            .unwrap_or(s.load_balance_hosts),
    };
    Resolved { settings, route }
}

/// `server.hosts`, or `server.host`/`server.port` as a one-host list.
pub fn default_hosts(cfg: &Config) -> Vec<HostAddr> {
    if cfg.server.hosts.is_empty() {
        vec![HostAddr {
            host: cfg.server.host.clone(),
            port: cfg.server.port,
        }]
    } else {
        parse_hosts(&cfg.server.hosts)
    }
}

/// Config::validate has parsed every entry; one that does not parse is left out.
fn parse_hosts(list: &[String]) -> Vec<HostAddr> {
    list.iter()
        .filter_map(|h| HostAddr::parse(h).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(db: &str) -> PoolKey {
        PoolKey {
            database: db.into(),
            user: "u".into(),
        }
    }

    #[test]
    fn an_alias_overrides_the_defaults() {
        let cfg = Config::from_yaml(
            "server:\n  hosts: [\"a:1\", \"b:2\"]\n  target_session_attrs: read-write\n\
             pool:\n  size: 7\n  query_wait_timeout: 8s\nfailover:\n  hold_timeout: 9s\n\
             databases:\n  app_ro:\n    dbname: app\n    hosts: [\"b:2\"]\n    \
             target_session_attrs: prefer-standby\n    load_balance_hosts: random\n    \
             pool_size: 3\n    mode: session\n  app: {}\n",
            "x".as_ref(),
        )
        .unwrap();
        cfg.validate().unwrap();
        let ro = resolve(&cfg, &key("app_ro"));
        assert_eq!(ro.settings.size, 3);
        assert_eq!(ro.settings.mode, PoolMode::Session);
        assert_eq!(
            ro.settings.hold_timeout,
            Duration::from_secs(8),
            "capped by the wait"
        );
        assert_eq!(ro.route.dbname, "app");
        assert_eq!(ro.route.hosts, vec![HostAddr::parse("b:2").unwrap()]);
        assert_eq!(ro.route.tsa, TargetSessionAttrs::PreferStandby);
        assert_eq!(ro.route.lb, LoadBalanceHosts::Random);
        let app = resolve(&cfg, &key("app"));
        assert_eq!(
            app.route.dbname, "app",
            "an alias without dbname is the database"
        );
        assert_eq!(app.route.hosts.len(), 2);
        assert_eq!(app.route.tsa, TargetSessionAttrs::ReadWrite);
        assert_eq!(app.settings.size, 7);
        let mut with_user = cfg.clone();
        with_user.users.insert(
            "u".into(),
            crate::config::UserConfig {
                pool_size: Some(5),
                mode: Some(PoolMode::Statement),
                max_user_connections: None,
                session_state: Some(SessionState::Pin),
                reset_query_always: Some(true),
            },
        );
        let user_first = resolve(&with_user, &key("app_ro"));
        assert_eq!(
            user_first.settings.size, 5,
            "the user's size over the alias's"
        );
        assert_eq!(user_first.settings.mode, PoolMode::Statement);
        // The policy the pool publishes is made from what was resolved, not the defaults.
        let policy = user_first.settings.policy;
        assert_eq!(policy.mode, PoolMode::Statement);
        assert!(policy.reset_always);
        assert_eq!(
            policy.session_state,
            crate::config::policy::StateRule::Refuse
        );
        assert_eq!(ro.settings.policy.mode, PoolMode::Session);
        assert_eq!(app.settings.policy.mode, PoolMode::Transaction);
        let other = resolve(&cfg, &key("other"));
        assert_eq!(other.route.dbname, "other");
        assert_eq!(other.settings, PoolSettings::from_config(&cfg));
        assert_eq!(
            default_hosts(&Config::default()),
            vec![HostAddr::parse("127.0.0.1:5432").unwrap()]
        );
    }
}
