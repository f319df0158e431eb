//! Several hosts and which of them a pool may use: `server.hosts`, libpq's
//! `target_session_attrs` and `load_balance_hosts`, the `databases:` aliases (PgBouncer's
//! `[databases]`), and `failover.hold_timeout`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{PoolMode, SessionState};

/// Which servers a pool may use, with libpq's names and meanings (libpq, "Connection
/// Parameters", `target_session_attrs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "operator", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum TargetSessionAttrs {
    /// Any server.
    #[default]
    Any,
    /// A server that accepts read-write transactions by default: not a hot standby and
    /// `default_transaction_read_only` off.
    ReadWrite,
    /// The opposite of `read-write`: a standby, or a server read-only by default.
    ReadOnly,
    /// A server not in recovery (`in_hot_standby` off).
    Primary,
    /// A server in recovery (`in_hot_standby` on).
    Standby,
    /// A standby if one is reachable, else any server.
    PreferStandby,
}

impl TargetSessionAttrs {
    pub fn as_str(self) -> &'static str {
        match self {
            TargetSessionAttrs::Any => "any",
            TargetSessionAttrs::ReadWrite => "read-write",
            TargetSessionAttrs::ReadOnly => "read-only",
            TargetSessionAttrs::Primary => "primary",
            TargetSessionAttrs::Standby => "standby",
            TargetSessionAttrs::PreferStandby => "prefer-standby",
        }
    }

    /// Whether a server must accept writes (a 25006 from it then says it no longer fits).
    pub fn needs_writes(self) -> bool {
        matches!(
            self,
            TargetSessionAttrs::ReadWrite | TargetSessionAttrs::Primary
        )
    }
}

/// In which order a pool's hosts are tried (libpq 16's `load_balance_hosts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "operator", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum LoadBalanceHosts {
    /// In the order listed.
    #[default]
    Disable,
    /// In a random order drawn for each login.
    Random,
}

/// One `host:port` of `server.hosts` or a database's `hosts`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostAddr {
    pub host: String,
    pub port: u16,
}

impl HostAddr {
    /// Parses `host:port`, `host` (port 5432) or `[v6]:port`.
    pub fn parse(text: &str) -> Result<HostAddr, String> {
        let bad = || format!("{text:?} is not host:port");
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            let (h, after) = rest.split_once(']').ok_or_else(bad)?;
            match after {
                "" => (h, None),
                p => (h, Some(p.strip_prefix(':').ok_or_else(bad)?)),
            }
        } else {
            match text.rsplit_once(':') {
                Some((h, _)) if h.contains(':') => {
                    return Err(format!("{text:?}: write IPv6 as [addr]:port"))
                }
                Some((h, p)) => (h, Some(p)),
                None => (text, None),
            }
        };
        let port = match port {
            None => 5432,
            Some(p) => p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(bad)?,
        };
        if host.is_empty() || host.chars().any(|c| c.is_whitespace() || c == ',') {
            return Err(bad());
        }
        Ok(HostAddr {
            host: host.to_owned(),
            port,
        })
    }

    /// `host:port` (`[v6]:port`), the name a host goes by in metrics and events.
    pub fn name(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// A `databases:` entry: what a client's database name (the alias) maps to. Unset fields
/// take the `server:` and `pool:` settings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseConfig {
    /// The server database; default: `server.database`, else the alias itself.
    pub dbname: Option<String>,
    /// `host:port` list; default: the `server:` host(s).
    pub hosts: Vec<String>,
    pub target_session_attrs: Option<TargetSessionAttrs>,
    pub load_balance_hosts: Option<LoadBalanceHosts>,
    /// Server connections of each pool of this database; default `pool.size`.
    pub pool_size: Option<usize>,
    /// Default `pool.mode`.
    pub mode: Option<PoolMode>,
    /// Default `pool.session_state`.
    pub session_state: Option<SessionState>,
    /// Default `pool.reset_query_always`.
    pub reset_query_always: Option<bool>,
}

/// What the pooler does while no host fits.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(default, deny_unknown_fields)]
pub struct FailoverConfig {
    /// A transaction that needs a new server while no host fits (all refused, breakers open,
    /// or only standbys where a primary is needed) waits up to this long instead of getting
    /// 57P03 at once; never longer than `pool.query_wait_timeout` (0 = off).
    #[serde(with = "humantime_serde")]
    pub hold_timeout: Duration,
}

/// The checks of these settings, as `Config::validate` runs them.
pub(super) fn validate(cfg: &super::Config) -> Result<(), String> {
    let s = &cfg.server;
    if !s.hosts.is_empty() {
        let defaults = super::ServerConfig::default();
        if s.host != defaults.host || s.port != defaults.port {
            return Err(
                "server.hosts and server.host/server.port (or --server-host/--server-port) are \
                 alternatives: set one of them"
                    .into(),
            );
        }
        check_hosts("server.hosts", &s.hosts)?;
    }
    for (alias, db) in &cfg.databases {
        let at = format!("databases.{alias}");
        if alias.is_empty() || alias.len() > 63 {
            return Err(format!("{at}: an alias is 1 to 63 characters"));
        }
        if ["droidpool", "pgbouncer"].contains(&alias.as_str()) {
            return Err(format!("{at}: that name is the admin console's"));
        }
        check_hosts(&format!("{at}.hosts"), &db.hosts)?;
        match db.pool_size {
            Some(0) => return Err(format!("{at}.pool_size must be at least 1")),
            Some(n) if n < cfg.pool.min_size => {
                return Err(format!(
                    "{at}.pool_size ({n}) is below pool.min_size ({})",
                    cfg.pool.min_size
                ))
            }
            _ => {}
        }
        if db.dbname.as_deref() == Some("") {
            return Err(format!("{at}.dbname must not be empty"));
        }
    }
    Ok(())
}

fn check_hosts(at: &str, hosts: &[String]) -> Result<(), String> {
    let mut seen = std::collections::BTreeSet::new();
    for h in hosts {
        let addr = HostAddr::parse(h).map_err(|e| format!("{at}: {e}"))?;
        if !seen.insert(addr) {
            return Err(format!("{at}: {h} is listed twice"));
        }
    }
    Ok(())
}

/// Databases by alias.
pub type Databases = BTreeMap<String, DatabaseConfig>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn load(yaml: &str) -> Result<Config, String> {
        let cfg = Config::from_yaml(yaml, "x".as_ref()).map_err(|e| e.to_string())?;
        cfg.validate().map(|()| cfg).map_err(|e| e.to_string())
    }

    #[test]
    fn host_addresses_parse() {
        let a = HostAddr::parse("db-0:5433").unwrap();
        assert_eq!((a.host.as_str(), a.port), ("db-0", 5433));
        assert_eq!(HostAddr::parse("db-1").unwrap().port, 5432);
        let v6 = HostAddr::parse("[::1]:6000").unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("::1", 6000));
        assert_eq!(v6.name(), "[::1]:6000");
        for bad in [
            "", ":5432", "db:0", "db:x", "::1:5432", "[::1", "a b:1", "a,b:1",
        ] {
            assert!(HostAddr::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn hosts_and_host_port_are_alternatives() {
        let cfg = load("server:\n  hosts: [\"a:5432\", \"b:5433\"]\n  target_session_attrs: read-write\n  load_balance_hosts: random\n").unwrap();
        assert_eq!(
            cfg.server.target_session_attrs,
            TargetSessionAttrs::ReadWrite
        );
        assert_eq!(cfg.server.load_balance_hosts, LoadBalanceHosts::Random);
        let err = load("server:\n  hosts: [\"a:5432\"]\n  port: 5433\n").unwrap_err();
        assert!(err.contains("alternatives"), "{err}");
        let err = load("server:\n  hosts: [\"a:5432\", \"a:5432\"]\n").unwrap_err();
        assert!(err.contains("listed twice"), "{err}");
        let err = load("server:\n  target_session_attrs: writable\n").unwrap_err();
        assert!(err.contains("read-write"), "{err}");
    }

    #[test]
    fn databases_are_checked() {
        let cfg = load(
            "databases:\n  app_ro:\n    dbname: app\n    target_session_attrs: prefer-standby\n    pool_size: 5\n    mode: session\n",
        )
        .unwrap();
        let ro = &cfg.databases["app_ro"];
        assert_eq!(ro.pool_size, Some(5));
        assert_eq!(ro.mode, Some(PoolMode::Session));
        let err = load("databases:\n  a:\n    pool_size: 0\n").unwrap_err();
        assert!(err.contains("databases.a.pool_size"), "{err}");
        let err = load("pool:\n  min_size: 3\ndatabases:\n  a:\n    pool_size: 2\n").unwrap_err();
        assert!(err.contains("below pool.min_size"), "{err}");
        let err = load("databases:\n  a:\n    hosts: [\"x:y\"]\n").unwrap_err();
        assert!(err.contains("databases.a.hosts"), "{err}");
        let err = load("databases:\n  pgbouncer: {}\n").unwrap_err();
        assert!(err.contains("admin console"), "{err}");
        assert!(load("databases:\n  a:\n    sise: 1\n").is_err());
        let cfg = load("failover:\n  hold_timeout: 10s\n").unwrap();
        assert_eq!(cfg.failover.hold_timeout, Duration::from_secs(10));
    }
}
