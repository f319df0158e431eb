//! The parts of the `PoolConfig` spec for a pooler many applications share: limits across
//! pools (PgBouncer's names), per-user overrides, and the users file of SCRAM verifiers that
//! lets each role log in to PostgreSQL as itself without any plaintext password.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Mode, DNS_SUBDOMAIN, DURATION_PATTERN, SECRET_KEY, SESSION_STATE_PATTERN};

/// Limits across the pools of each pooler.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LimitsSpec {
    /// Server connections of all pools of one database, per pooler (`pool.max_db_connections`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000))]
    pub max_db_connections: Option<u32>,
    /// Server connections of all pools of one user, per pooler (`pool.max_user_connections`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000))]
    pub max_user_connections: Option<u32>,
    /// Client connections of one user, per pooler (`client.max_user_connections`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000000))]
    pub max_client_connections_per_user: Option<u32>,
    /// Extra server connections a pool opens once a client has waited `reservePoolTimeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub reserve_pool_size: Option<u32>,
    /// How long a client waits before the reserve opens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    pub reserve_pool_timeout: Option<String>,
}

/// Where each pooler's share of `maxServerConnections` is held.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum BudgetScope {
    /// Across all pools of each database of a pooler (`pool.max_db_connections`): clients
    /// logging in as several users, or to several databases, share the pooler's share.
    Database,
    /// Per (database, user) pool only (`pool.size`): a pooler's connections are its share
    /// times the pools its clients open. A pooler that cannot read `pool.max_db_connections`
    /// (an older image) runs, or none has said yet that it can.
    Pool,
}

/// One user's overrides.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UserSpec {
    /// Server connections per pool of this user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub pool_size: Option<u32>,
    /// Pool mode of this user's pools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    /// Server connections of all pools of this user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000))]
    pub max_user_connections: Option<u32>,
    /// Session state in this user's pools (`off` or `pin`); default `spec.pool.sessionState`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = SESSION_STATE_PATTERN))]
    pub session_state: Option<String>,
    /// `pool.reset_query_always` in this user's pools; default `spec.pool.resetQueryAlways`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_query_always: Option<bool>,
}

/// A Secret key holding a PgBouncer users file (`"user" "SCRAM-SHA-256$..."` per line),
/// mounted as a file, never read by the operator.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsersSecretRef {
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN))]
    pub name: String,
    #[serde(default = "default_users_key")]
    #[schemars(length(min = 1, max = 253), regex(pattern = SECRET_KEY))]
    pub key: String,
}

fn default_users_key() -> String {
    "userlist.txt".into()
}
