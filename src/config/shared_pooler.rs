//! Settings of a pooler many applications share: per-user overrides (`users:`) and the
//! peers that forward cancel requests to each other (`peer_id`, `peers:`), with their checks.

use serde::{Deserialize, Serialize};

use super::{Config, ConfigError, PoolMode, SessionState};

/// The largest peer id: 14 bits of a cancel key's process id carry it.
pub const MAX_PEER_ID: u16 = 16_383;

/// A pooler that reads `pool.max_db_connections` lists this among its `CAPABILITIES`.
pub const READS_MAX_DB_CONNECTIONS: &str = "pool.max_db_connections";
/// A pooler that reads `admin.token_file` lists this among its `CAPABILITIES`.
pub const READS_ADMIN_TOKEN_FILE: &str = "admin.token_file";
/// A pooler that reads `auth.mock_secret_file` lists this among its `CAPABILITIES`.
pub const READS_MOCK_SECRET_FILE: &str = "auth.mock_secret_file";

/// The settings this pooler reads that a 0.1.0 pooler refuses, which the operator needs to
/// know of before it writes them for a PoolConfig field 0.1.0 already had (a budget): `/status`
/// lists them under `capabilities`. A 0.1.0 pooler lists nothing, so a setting goes into a
/// shared file only once every running pooler names it here.
pub const CAPABILITIES: &[&str] = &[
    READS_MAX_DB_CONNECTIONS,
    READS_ADMIN_TOKEN_FILE,
    READS_MOCK_SECRET_FILE,
];

/// Overrides for one user's pools; unset fields take the `pool` value.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(default, deny_unknown_fields)]
pub struct UserConfig {
    /// Server connections per pool of this user (`pool.size`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool_size: Option<usize>,
    /// Pool mode of this user's pools (`pool.mode`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<PoolMode>,
    /// Server connections across all pools of this user (`pool.max_user_connections`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_user_connections: Option<usize>,
    /// Session state in this user's pools (`pool.session_state`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_state: Option<SessionState>,
    /// `pool.reset_query_always` in this user's pools.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reset_query_always: Option<bool>,
}

/// A pooler that cancel requests may be forwarded to.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PeerConfig {
    /// Its `peer_id`.
    pub id: u16,
    /// Its client listener, `host:port`.
    pub address: String,
    /// Its host name (a pod's name), by which it finds its own entry when `peer_id` is unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Config {
    /// Per-user overrides and the reserve pool.
    pub(super) fn validate_limits(&self) -> Result<(), ConfigError> {
        let p = &self.pool;
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if p.reserve_size > 0
            && !p.query_wait_timeout.is_zero()
            && p.reserve_timeout >= p.query_wait_timeout
        {
            return bad(format!(
                "pool.reserve_timeout ({:?}) must be shorter than pool.query_wait_timeout \
                 ({:?}): clients would time out before the reserve opens",
                p.reserve_timeout, p.query_wait_timeout
            ));
        }
        for (user, u) in &self.users {
            match u.pool_size {
                Some(0) => return bad(format!("users.{user}.pool_size must be at least 1")),
                Some(n) if n < p.min_size => {
                    return bad(format!(
                        "users.{user}.pool_size ({n}) is below pool.min_size ({})",
                        p.min_size
                    ))
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Peer ids in range and unique, addresses `host:port`.
    pub(super) fn validate_peers(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if self.peer_id > MAX_PEER_ID {
            return bad(format!(
                "peer_id must be between 1 and {MAX_PEER_ID} (0: none)"
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for peer in &self.peers {
            if peer.id == 0 || peer.id > MAX_PEER_ID {
                return bad(format!(
                    "peers: id {} is not between 1 and {MAX_PEER_ID}",
                    peer.id
                ));
            }
            if !seen.insert(peer.id) {
                return bad(format!("peers: id {} is listed twice", peer.id));
            }
            if peer
                .address
                .rsplit_once(':')
                .map_or(true, |(h, p)| h.is_empty() || p.parse::<u16>().is_err())
            {
                return bad(format!(
                    "peers: id {}: address {:?} must be host:port",
                    peer.id, peer.address
                ));
            }
        }
        Ok(())
    }
}
