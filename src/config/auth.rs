//! Client authentication settings: the method, where credentials come from, and auth_query.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Secret;

/// How clients prove who they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum AuthMethod {
    /// No password; allowed only on loopback unless `allow_trust_on_network`.
    #[default]
    Trust,
    /// MD5 challenge (a user stored with a SCRAM verifier is asked for SCRAM instead, as
    /// PostgreSQL does).
    Md5,
    /// SCRAM-SHA-256; the method to use on any network.
    #[serde(rename = "scram-sha-256")]
    ScramSha256,
}

impl AuthMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            AuthMethod::Trust => "trust",
            AuthMethod::Md5 => "md5",
            AuthMethod::ScramSha256 => "scram-sha-256",
        }
    }
}

/// The default lookup, as PgBouncer's since CVE-2025-2291: a password past its `VALID UNTIL`
/// is not returned (the login fails as on PostgreSQL), and every name is schema-qualified (the
/// lookup connection's `search_path` is pinned to `pg_catalog` too). Needs a superuser or a
/// grant on `pg_shadow`; `$1` is the user name, bound as a parameter.
pub const DEFAULT_AUTH_QUERY: &str = "SELECT usename, CASE WHEN valuntil IS NULL OR valuntil > \
                                      pg_catalog.now() THEN passwd END FROM pg_catalog.pg_shadow \
                                      WHERE usename OPERATOR(pg_catalog.=) $1";

/// The database auth_query lookups connect to unless `auth.auth_database` says otherwise:
/// fixed, so a client cannot pick which database the pooler logs in to on its behalf.
pub const DEFAULT_AUTH_DATABASE: &str = "postgres";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// Unset: `trust` on a loopback listen address (or with `allow_trust_on_network`),
    /// `scram-sha-256` on any other.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<AuthMethod>,
    /// Per-user methods that override `method` (e.g. `legacy_app: md5`, `monitor: trust`).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub user_methods: std::collections::BTreeMap<String, AuthMethod>,
    /// Permit `trust` on a non-loopback listen address.
    pub allow_trust_on_network: bool,
    /// PgBouncer `userlist.txt`: `"user" "SCRAM-SHA-256$...|md5...|plaintext"` per line.
    pub users_file: Option<PathBuf>,
    /// A directory of files named after users, each holding that user's plaintext password
    /// (a mounted Kubernetes Secret).
    pub passwords_dir: Option<PathBuf>,
    /// Looks up users not found in the files on the server, as `auth_user`; off when unset.
    pub auth_user: Option<String>,
    /// `auth_user`'s password (or `auth_password_file`); never printed.
    pub auth_password: Option<Secret>,
    pub auth_password_file: Option<PathBuf>,
    /// Database the lookups connect to (never the client's choice).
    pub auth_database: String,
    /// Server connections of the lookup pool: every lookup goes through it, with its login
    /// limits, retry budget and circuit breaker, so made-up names cannot open connections.
    pub auth_pool_size: usize,
    /// Looked-up users kept (least recently used ones go first); found and missing ones are
    /// kept apart, so made-up names cannot push real users out.
    pub auth_cache_size: usize,
    /// Returns (name, verifier) for the user bound as `$1`; sent with Parse/Bind, never
    /// spliced into the text.
    pub auth_query: String,
    /// How long a looked-up verifier is reused.
    #[serde(with = "humantime_serde")]
    pub auth_cache_ttl: Duration,
    /// How long "no such user" is reused. Equal to `auth_cache_ttl` by default: a shorter
    /// one lets a prober tell real names from made-up ones by which answer is cached.
    #[serde(with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub auth_negative_cache_ttl: Option<Duration>,
    /// The secret mock SCRAM salts of unknown users derive from (or `mock_secret_file`);
    /// unset, it derives from the configured credentials, so every replica with the same
    /// configuration, before and after a restart, gives a made-up name the same salt.
    pub mock_secret: Option<Secret>,
    pub mock_secret_file: Option<PathBuf>,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            method: None,
            user_methods: Default::default(),
            allow_trust_on_network: false,
            users_file: None,
            passwords_dir: None,
            auth_user: None,
            auth_password: None,
            auth_password_file: None,
            auth_database: DEFAULT_AUTH_DATABASE.into(),
            auth_pool_size: 2,
            auth_cache_size: 10_000,
            auth_query: DEFAULT_AUTH_QUERY.into(),
            auth_cache_ttl: Duration::from_secs(30),
            auth_negative_cache_ttl: None,
            mock_secret: None,
            mock_secret_file: None,
        }
    }
}

impl AuthConfig {
    /// The method in force for clients of a listener on `listen`.
    pub fn method_on(&self, listen: std::net::IpAddr) -> AuthMethod {
        self.method
            .unwrap_or(if listen.is_loopback() || self.allow_trust_on_network {
                AuthMethod::Trust
            } else {
                AuthMethod::ScramSha256
            })
    }

    /// The method in force for `user` on `listen`: the user's own, else the listener's.
    pub fn method_for(&self, user: &str, listen: std::net::IpAddr) -> AuthMethod {
        self.user_methods
            .get(user)
            .copied()
            .unwrap_or_else(|| self.method_on(listen))
    }

    pub fn validate(&self, listen: std::net::IpAddr) -> Result<(), String> {
        let method = self.method_on(listen);
        let has_source =
            self.users_file.is_some() || self.passwords_dir.is_some() || self.auth_user.is_some();
        if method != AuthMethod::Trust && !has_source {
            let why = if self.method.is_none() {
                format!(" (the default on the non-loopback address {listen})")
            } else {
                String::new()
            };
            return Err(format!(
                "auth.method {}{why} needs auth.users_file, auth.passwords_dir or auth.auth_user",
                method.as_str()
            ));
        }
        for (user, m) in &self.user_methods {
            if *m != AuthMethod::Trust && !has_source {
                return Err(format!(
                    "auth.user_methods.{user}: {} needs auth.users_file, auth.passwords_dir or \
                     auth.auth_user",
                    m.as_str()
                ));
            }
            if *m == AuthMethod::Trust && !listen.is_loopback() && !self.allow_trust_on_network {
                return Err(format!(
                    "auth.user_methods.{user}: trust on non-loopback address {listen} would let \
                     anyone on the network in as {user}; set auth.allow_trust_on_network: true"
                ));
            }
        }
        if self.auth_user.is_some() && !self.auth_query.contains("$1") {
            return Err("auth.auth_query must take the user name as the parameter $1".into());
        }
        if self.auth_pool_size == 0 || self.auth_cache_size == 0 {
            return Err("auth.auth_pool_size and auth.auth_cache_size must be at least 1".into());
        }
        if self.auth_database.is_empty() {
            return Err("auth.auth_database must name a database".into());
        }
        Ok(())
    }
}
