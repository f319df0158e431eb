//! The `PoolConfig` custom resource (`droidpool.io/v1alpha1`): spec, status and the schema
//! the API server validates.
//!
//! The schema says as much as a structural schema can, so that even a server without CEL
//! (Kubernetes < 1.25) rejects a bad object: enums, ranges, patterns and `oneOf` branches of
//! `required` lists. What no schema can say is checked again by `render::validate`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, LocalObjectReference, ResourceRequirements, Toleration, TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

mod shared;
pub use shared::{BudgetScope, LimitsSpec, UserSpec, UsersSecretRef};

/// The image of operator-deployed poolers when the spec names none.
pub const DEFAULT_IMAGE: &str = "ghcr.io/droid-pool/droid-pool:0.1.0";

/// A duration in the pooler's notation: digits and a unit, repeated (`250ms`, `30s`, `1m30s`).
pub(crate) const DURATION_PATTERN: &str = r"^([0-9]+(ms|s|m|h))+$";
/// `pool.session_state`'s values. A string with a pattern rather than an enum: YAML 1.1 (the
/// API server's) reads a bare `off` in an enum list as false; in a resource, quote it or omit
/// it (the default).
pub(crate) const SESSION_STATE_PATTERN: &str = r"^(off|pin|track)$";
/// The name of another object of the namespace (RFC 1123 subdomain, Kubernetes' own rule):
/// never a path, so a name cannot reach into another namespace.
pub const DNS_SUBDOMAIN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// A Secret data key (also the file name it is mounted as).
pub const SECRET_KEY: &str = r"^[-._a-zA-Z0-9]+$";

/// Settings of droid-pool poolers, rendered into the pooler's own config file.
///
/// Exactly one of `poolSize` and `maxServerConnections` is set.
// Each `printcolumn(...)` repeats `type_ = ...`; clippy takes the repeats for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "droidpool.io",
    version = "v1alpha1",
    kind = "PoolConfig",
    namespaced,
    shortname = "poolcfg",
    status = "PoolConfigStatus",
    // `kubectl scale` and an HPA on the PoolConfig set the deployment target's replicas (a
    // sidecar target's scale is refused by the schema: two targets).
    scale(
        spec_replicas_path = ".spec.target.deployment.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(name = "Mode", type_ = "string", json_path = ".spec.mode"),
    printcolumn(
        name = "Pool Size",
        type_ = "integer",
        json_path = ".status.appliedPoolSize"
    ),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".status.replicas"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend(
    "oneOf" = [{"required": ["poolSize"]}, {"required": ["maxServerConnections"]}],
    // Enforced from Kubernetes 1.25 (CEL); older servers drop the key, and the operator checks
    // the same rules when it renders (condition ConfigRendered=False, reason InvalidSpec).
    "x-kubernetes-validations" = [
        {
            "rule": "!has(self.maxServerConnections) || !has(self.target.sidecar) || has(self.target.sidecar.podSelector)",
            "message": "maxServerConnections with a sidecar target needs target.sidecar.podSelector to count the pods"
        },
        {
            "rule": "!has(self.target.deployment) || !has(self.clientAuth) || !has(self.clientAuth.method) || self.clientAuth.method != 'trust' || self.clientAuth.allowTrustOnNetwork",
            "message": "clientAuth.method trust on a deployment needs clientAuth.allowTrustOnNetwork: true"
        }
    ]
))]
pub struct PoolConfigSpec {
    /// Server connections per (database, user) pool in each pooler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub pool_size: Option<u32>,
    /// A budget of server connections for the whole database: each pooler gets
    /// floor(budget / poolers), at least 1, recomputed as poolers come and go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000))]
    pub max_server_connections: Option<u32>,
    /// How long a client keeps a server connection.
    #[serde(default)]
    pub mode: Mode,
    /// Track named prepared statements across server connections (transaction mode).
    #[serde(default)]
    pub track_prepared: bool,
    /// Transaction pooling's handling of session state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<PoolSpec>,
    /// Client connections each pooler accepts at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000000))]
    pub max_client_connections: Option<u32>,
    /// Longest wait of a client for a server connection ("0s": forever).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    pub query_wait_timeout: Option<String>,
    /// The PostgreSQL server the poolers connect to.
    pub server: ServerSpec,
    /// How clients authenticate to the pooler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_auth: Option<ClientAuthSpec>,
    /// Retries of failed server logins: backoff and budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetrySpec>,
    /// The circuit breaker around the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker: Option<BreakerSpec>,
    /// What a pooler does with its clients on SIGTERM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<DrainSpec>,
    /// Limits across the pools of each pooler: per database, per user, the reserve pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<LimitsSpec>,
    /// Overrides for named users (PgBouncer's `[users]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub users: Option<BTreeMap<String, UserSpec>>,
    /// Aliases clients connect to (PgBouncer's `[databases]`): each a server database, its
    /// hosts and which of them fit, and optional pool size and mode.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 100))]
    pub databases: BTreeMap<String, DatabaseSpec>,
    /// What the poolers do while no server host fits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<FailoverSpec>,
    /// Where the settings go: sidecars that mount a ConfigMap, or poolers this operator deploys.
    pub target: Target,
}

/// Transaction pooling's handling of what clients leave on their server connection.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolSpec {
    /// `off` (default: forwarded as it is) or `pin` (a client that creates session state, a
    /// SET, a temp table, an advisory lock..., keeps its server connection until it removes
    /// that state or leaves; in statement mode such statements are refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = SESSION_STATE_PATTERN))]
    pub session_state: Option<String>,
    /// Clean every server connection (`DISCARD ALL`) before another client runs there, the
    /// client's own settings brought back (`pool.reset_query_always`): for session state
    /// that code no statement names makes (a trigger, a rule, a view). Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_query_always: Option<bool>,
}

/// How long a client keeps a server connection.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Session,
    #[default]
    Transaction,
    Statement,
}

/// The PostgreSQL server and the credentials of server logins. Exactly one of `host`,
/// `hosts` and `cloudNativePG` is set.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend(
    "oneOf" = [{"required": ["host"]}, {"required": ["hosts"]}, {"required": ["cloudNativePG"]}]
))]
pub struct ServerSpec {
    /// Host name or address of PostgreSQL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub host: Option<String>,
    /// Port of `host`, and of the CloudNativePG Services.
    #[serde(default = "default_pg_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: u16,
    /// Several `host:port`, tried in order until one fits `targetSessionAttrs`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 16), inner(length(min = 1, max = 261)))]
    pub hosts: Vec<String>,
    /// Which servers fit (libpq's meanings); default `any`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_session_attrs: Option<crate::config::TargetSessionAttrs>,
    /// The order hosts are tried in; default `disable` (as listed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balance_hosts: Option<crate::config::LoadBalanceHosts>,
    /// A CloudNativePG `Cluster` in this namespace: its `NAME-rw` Service for read-write
    /// aliases and the default pools, `NAME-ro` for read-only ones; its pools are held through
    /// a switchover (`failover.holdTimeout`, 30s by default).
    #[serde(
        default,
        rename = "cloudNativePG",
        skip_serializing_if = "Option::is_none"
    )]
    pub cloud_native_pg: Option<CloudNativePgRef>,
    /// Database to connect to; by default the client's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub database: Option<String>,
    /// Login user for server connections; by default the client's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub user: Option<String>,
    /// The Secret holding the server password (mounted as a file, never copied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_secret: Option<SecretKeyRef>,
}

fn default_pg_port() -> u16 {
    5432
}

/// A CloudNativePG `Cluster` (`postgresql.cnpg.io/v1`) in the PoolConfig's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct CloudNativePgRef {
    /// The Cluster's name (its Services are `NAME-rw`, `NAME-ro`, `NAME-r`).
    #[schemars(length(min = 1, max = 50), regex(pattern = DNS_SUBDOMAIN))]
    pub cluster: String,
}

/// A `databases:` alias; what it leaves out comes from `server` and the pool settings.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DatabaseSpec {
    /// The server database; default `server.database`, else the alias.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub dbname: Option<String>,
    /// `host:port` list; default the server's (with `cloudNativePG`: its Services by role).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(min = 1, max = 261)))]
    pub hosts: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_session_attrs: Option<crate::config::TargetSessionAttrs>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balance_hosts: Option<crate::config::LoadBalanceHosts>,
    /// Server connections of each of its pools in each pooler (not split by the budget).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub pool_size: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    /// Session state in this database's pools (`off` or `pin`); default
    /// `spec.pool.sessionState`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = SESSION_STATE_PATTERN))]
    pub session_state: Option<String>,
    /// `pool.reset_query_always` in this database's pools; default
    /// `spec.pool.resetQueryAlways`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_query_always: Option<bool>,
}

/// What the poolers do while no server host fits.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailoverSpec {
    /// How long a transaction waits for a host that fits instead of an error at once (never
    /// past `queryWaitTimeout`). With `server.cloudNativePG` it is in force only while the
    /// Cluster switches over (30s when unset); otherwise always.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    pub hold_timeout: Option<String>,
}

/// One key of a Secret in the PoolConfig's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN))]
    pub name: String,
    #[serde(default = "default_password_key")]
    #[schemars(length(min = 1, max = 253), regex(pattern = SECRET_KEY))]
    pub key: String,
}

fn default_password_key() -> String {
    "password".into()
}

/// Client authentication. Poolers deployed by the operator listen on the pod network, where
/// `trust` needs `allowTrustOnNetwork`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientAuthSpec {
    /// By default `trust` for sidecars (loopback) and `scram-sha-256` for deployments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<AuthMethod>,
    /// A Secret whose keys are user names and values their passwords, mounted as a directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN))]
    pub passwords_secret: Option<String>,
    /// A Secret key holding a users file of SCRAM verifiers (copied from `pg_authid`): each
    /// user then logs in to PostgreSQL as itself with what its own login proved (SCRAM
    /// passthrough), and needs no `server.passwordSecret` and no plaintext password anywhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub users_secret: Option<UsersSecretRef>,
    /// Permit `trust` on the pod network.
    #[serde(default)]
    pub allow_trust_on_network: bool,
}

/// How clients prove who they are.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum AuthMethod {
    Trust,
    Md5,
    #[serde(rename = "scram-sha-256")]
    ScramSha256,
}

/// Backoff and budget of retried server logins.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct RetrySpec {
    /// Ceiling of the first retry's delay; doubles per further retry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    pub backoff_base: Option<String>,
    /// Largest retry delay (at most 1h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    pub backoff_cap: Option<String>,
    /// Retries allowed per 100 first attempts within the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1000))]
    pub budget_percent: Option<u32>,
    /// How long an attempt counts against the budget (1s to 1h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    pub budget_window: Option<String>,
}

/// The circuit breaker around the server.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct BreakerSpec {
    /// Failures in a row that open the breaker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub consecutive_failures: Option<u32>,
    /// Percentage of failed attempts in the ratio window that opens the breaker (1 to 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub failure_percent: Option<u32>,
    /// First cooldown ceiling; doubles per consecutive opening.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    pub cooldown_base: Option<String>,
    /// Largest cooldown ceiling (at most 1h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    pub cooldown_cap: Option<String>,
}

/// What SIGTERM does to clients.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct DrainSpec {
    /// By default `wait-for-clients` for sidecars and `transaction-boundary` for deployments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<DrainMode>,
    /// The drain's deadline; deployed pods get terminationGracePeriodSeconds = timeout + 5s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    pub timeout: Option<String>,
}

/// What SIGTERM does to clients.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum DrainMode {
    WaitForClients,
    TransactionBoundary,
}

/// Exactly one target kind.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Target {
    /// Poolers run as sidecars of application pods that mount the rendered ConfigMap.
    Sidecar(SidecarTarget),
    /// Poolers deployed by the operator: a Deployment, a Service and a PodDisruptionBudget.
    Deployment(DeploymentTarget),
}

/// Sidecar poolers: the operator writes the ConfigMap; the application's pod template mounts it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SidecarTarget {
    /// Name of the ConfigMap to write (key `droid-pool.yaml`).
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN))]
    pub config_map_name: String,
    /// The pods that run a sidecar, counted to split `maxServerConnections`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<LabelSelector>,
}

/// Poolers deployed by the operator.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentTarget {
    /// Pooler pods. Unset: the operator leaves the count to an autoscaler or `kubectl scale`
    /// (1 at creation) and follows whatever it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1000))]
    pub replicas: Option<i32>,
    /// The droid-pool image; refused unless the operator's `--allowed-images` allows it (by
    /// default its own repository only).
    #[serde(default = "default_image")]
    #[schemars(length(min = 1))]
    pub image: String,
    /// CPU and memory of the pooler container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// The Service in front of the poolers.
    #[serde(default)]
    pub service: ServiceSpec,
    /// The PodDisruptionBudget of the poolers.
    #[serde(default)]
    pub pod_disruption_budget: PdbSpec,
    /// Scheduling and metadata of the pooler pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<Box<PodTemplate>>,
    /// List the pooler pods in each pooler's config as peers, so a CancelRequest reaching any
    /// pod behind the Service is forwarded to the pod that issued the key. Each pod's peer id
    /// is 1 + FNV-1a(pod name) mod 16383 (the next free id when two pods collide, the older
    /// pod keeping its own); a pooler finds its entry by its host name, the pod's name.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancel_forwarding: bool,
}

/// What a production cluster sets on the pooler pods. Labels and annotations are added to the
/// operator's own (which win on a clash: the selector and the restart checksum).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodTemplate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Unset: spread over nodes (`kubernetes.io/hostname`, maxSkew 1, ScheduleAnyway), so
    /// one node's loss takes at most its share of the poolers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_spread_constraints: Option<Vec<TopologySpreadConstraint>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN))]
    pub priority_class_name: Option<String>,
    /// Run the poolers as this ServiceAccount (the operator then creates none; no token is
    /// mounted either way). Refused unless the operator's `--allowed-service-accounts`
    /// lists it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN))]
    pub service_account_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_secrets: Option<Vec<LocalObjectReference>>,
}

fn default_image() -> String {
    DEFAULT_IMAGE.into()
}

/// The Service in front of deployed poolers.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSpec {
    #[serde(default, rename = "type")]
    pub type_: ServiceType,
    /// The Service's port (the poolers listen on 6432).
    #[serde(default = "default_service_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: u16,
    /// Added to the Service's annotations (a cloud load balancer's settings, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// LoadBalancer: the client CIDRs allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer_source_ranges: Option<Vec<String>>,
    /// NodePort and LoadBalancer: `Local` keeps the client's address and skips a hop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_traffic_policy: Option<TrafficPolicy>,
}

impl Default for ServiceSpec {
    fn default() -> Self {
        ServiceSpec {
            type_: ServiceType::default(),
            port: default_service_port(),
            annotations: None,
            load_balancer_source_ranges: None,
            external_traffic_policy: None,
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum TrafficPolicy {
    Cluster,
    Local,
}

fn default_service_port() -> u16 {
    6432
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum ServiceType {
    #[default]
    ClusterIP,
    NodePort,
    LoadBalancer,
}

/// The PodDisruptionBudget of deployed poolers.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PdbSpec {
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Poolers a voluntary disruption may take down at once.
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_unavailable: i32,
}

impl Default for PdbSpec {
    fn default() -> Self {
        PdbSpec {
            enabled: true,
            max_unavailable: 1,
        }
    }
}

fn yes() -> bool {
    true
}

fn one() -> i32 {
    1
}

/// What the operator last did with a PoolConfig.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolConfigStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Hash of the rendered pooler config (FNV-1a 64, hex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_hash: Option<String>,
    /// The per-pooler pool size in the rendered config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_pool_size: Option<u32>,
    /// Poolers the budget was split over (deployment replicas or selected sidecar pods).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<u32>,
    /// `maxServerConnections` as applied: the budget `appliedPoolSize` is the share of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<u32>,
    /// With a budget: whether each pooler holds its share per database or only per pool (the
    /// `ConfigRendered` message says why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_scope: Option<BudgetScope>,
    /// The pooler pods' label selector (for the scale subresource and an HPA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// The Secret whose key `token` the poolers' control routes take (`Authorization:
    /// Bearer`), once the rendered config points at it; unset while it does not (the
    /// `ConfigRendered` message says why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_token_secret: Option<String>,
    /// `Ready`, `ConfigRendered` and `Degraded`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}
