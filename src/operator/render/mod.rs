//! Pure rendering: a `PoolConfig` spec and what was observed in the cluster (how many poolers
//! share the budget) become the pooler's own typed `Config`, its YAML and hashes, and the
//! Kubernetes objects that carry it. No I/O here, so every rule is unit-tested.

mod admin;
mod budget;
mod failover;
mod meta;
mod names;
mod objects;
mod shared;
#[cfg(test)]
mod tests;
mod volumes;

pub use admin::{
    admin_secret, admin_secret_name, mounts_admin_secret, ADMIN_DIR, MOCK_SECRET_KEY, TOKEN_KEY,
};
pub use budget::{sizing, Readers, Sizing};
pub use failover::{Facts, CNPG_HOLD};
pub use names::{check_names, is_dns_subdomain, DNS_SUBDOMAIN, SECRET_KEY};

pub use meta::{labels, selector_labels, selector_string};
pub use objects::{
    config_map, deployment, pdb, service, service_account, service_account_name, ADMIN_PORT,
    CLIENT_PASSWORDS_DIR, CLIENT_USERS_DIR, CONFIG_DIR, CONFIG_KEY, PG_PORT,
    RESTART_CHECKSUM_ANNOTATION, SERVER_PASSWORD_DIR,
};
pub use shared::{peer_id_of, peers, wants_peers, PeerPod};

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use thiserror::Error;

use super::crd::{self, PoolConfig, PoolConfigSpec, Target};
use crate::config::{self, Config};

/// Why a spec cannot be rendered; each message names the field to fix.
#[derive(Debug, Error)]
pub enum RenderError {
    #[error("set exactly one of spec.poolSize and spec.maxServerConnections")]
    PoolSizeChoice,
    #[error("{field}: {value:?} is not a duration such as 30s, 250ms or 1m30s")]
    Duration { field: &'static str, value: String },
    #[error("{field}: {value:?} is not a session state (off or pin)")]
    SessionState { field: &'static str, value: String },
    #[error(
        "spec.maxServerConnections with a sidecar target needs spec.target.sidecar.podSelector \
         to count the pods that share the budget"
    )]
    BudgetWithoutSelector,
    #[error(
        "spec.clientAuth.method trust on a deployment listens on the pod network: set \
         spec.clientAuth.allowTrustOnNetwork: true or use md5 / scram-sha-256"
    )]
    TrustOnNetwork,
    #[error(
        "spec.clientAuth.method {0} on a deployment needs spec.clientAuth.passwordsSecret or \
         spec.clientAuth.usersSecret"
    )]
    PasswordsSecretMissing(&'static str),
    /// The pooler's own validation refuses the rendered config.
    #[error("the rendered pooler config is invalid: {0}")]
    Config(#[from] config::ConfigError),
    /// The rendered config cannot be written as YAML.
    #[error("the rendered pooler config is invalid: {0}")]
    Yaml(#[from] serde_yaml::Error),
    /// A rendered object cannot be written as JSON.
    #[error("the rendered pooler config is invalid: {0}")]
    Json(#[from] serde_json::Error),
    /// A PoolConfig not stored yet (no namespace or uid) has no owned objects to show.
    #[error("the rendered pooler config is invalid: the PoolConfig needs a namespace and a uid")]
    Unstored,
    #[error(
        "spec.target.deployment.service.externalTrafficPolicy applies only to a NodePort or \
         LoadBalancer Service"
    )]
    TrafficPolicyOnClusterIp,
    #[error(
        "set exactly one of spec.server.host, spec.server.hosts and spec.server.cloudNativePG"
    )]
    ServerChoice,
    #[error(
        "{field}: {value:?} is not the name of an object in this namespace (lowercase letters, \
         digits, '-' and '.')"
    )]
    Name { field: &'static str, value: String },
    #[error("{field}: {value:?} is not a Secret key (letters, digits, '-', '_' and '.')")]
    Key { field: &'static str, value: String },
}

/// The rendered pooler configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    pub config: Config,
    /// What the ConfigMap holds under `CONFIG_KEY`.
    pub yaml: String,
    /// FNV-1a 64 of `yaml`, hex: the status' `configHash`.
    pub hash: String,
    /// Hash of the settings a pooler reads only at start (listen and admin addresses and
    /// ports): the pod template's annotation, so only they roll the pods.
    pub restart_checksum: String,
    pub sizing: Sizing,
}

/// Validates the spec and renders the pooler config for `poolers` poolers.
pub fn render(spec: &PoolConfigSpec, poolers: u32) -> Result<Rendered, RenderError> {
    render_observed(spec, poolers, Facts::default(), &[])
}

/// As [`render`], listing `pods` as the poolers' peers when the spec asks for cancel
/// forwarding (otherwise they are ignored: no `peers:` key is written).
pub fn render_with_peers(
    spec: &PoolConfigSpec,
    poolers: u32,
    pods: &[PeerPod],
) -> Result<Rendered, RenderError> {
    render_observed(spec, poolers, Facts::default(), pods)
}

/// As [`render`], with what else was observed (a CloudNativePG switchover).
pub fn render_with(
    spec: &PoolConfigSpec,
    poolers: u32,
    facts: Facts,
) -> Result<Rendered, RenderError> {
    render_observed(spec, poolers, facts, &[])
}

/// As [`render`], with everything observed: a CloudNativePG switchover and whether every
/// pooler reads `pool.max_db_connections` (`facts`), and the pods listed as peers when the
/// spec asks for cancel forwarding.
pub fn render_observed(
    spec: &PoolConfigSpec,
    poolers: u32,
    facts: Facts,
    pods: &[PeerPod],
) -> Result<Rendered, RenderError> {
    check_names(spec)?;
    if let Target::Deployment(t) = &spec.target {
        if t.service.external_traffic_policy.is_some()
            && t.service.type_ == crd::ServiceType::ClusterIP
        {
            return Err(RenderError::TrafficPolicyOnClusterIp);
        }
    }
    let mut sizing = sizing(spec, poolers)?;
    let mut config = pooler_config(spec, sizing.pool_size)?;
    budget::hold_share(&mut config, &mut sizing, facts.db_limit_readable);
    if wants_peers(spec) {
        config.peers = peers(pods);
    }
    failover::failover(&mut config, spec, facts)?;
    if facts.admin_files {
        admin::admin_files(&mut config);
    }
    config.validate()?;
    let yaml = minimal_yaml(&config)?;
    let restart_only = (
        &config.listen,
        config.admin.addr,
        config.admin.port,
        &config.server.password_file,
        &config.auth.passwords_dir,
    );
    let restart_yaml = serde_yaml::to_string(&restart_only)?;
    Ok(Rendered {
        hash: fnv1a_hex(yaml.as_bytes()),
        restart_checksum: fnv1a_hex(restart_yaml.as_bytes()),
        config,
        yaml,
        sizing,
    })
}

/// The ConfigMap's name: the sidecar target names it; a deployment's is `<name>-config`.
pub fn config_map_name(pc: &PoolConfig) -> String {
    match &pc.spec.target {
        Target::Sidecar(t) => t.config_map_name.clone(),
        Target::Deployment(_) => format!("{}-config", kube::ResourceExt::name_any(pc)),
    }
}

/// Every object the operator would write for `pc` with `poolers` poolers, as JSON: what
/// `droid-pool-operator render` prints (a preview, and the input of the packaging check that
/// holds the pooler pods to the `restricted` Pod Security profile). The PDB is `policy/v1`; the
/// admin Secret comes without its values, which are made at the first reconciliation.
pub fn preview(pc: &PoolConfig, poolers: u32) -> Result<Vec<serde_json::Value>, RenderError> {
    let r = render(&pc.spec, poolers)?;
    let json = |v: Result<serde_json::Value, serde_json::Error>| v.map_err(RenderError::from);
    let cm_name = config_map_name(pc);
    let mut secret = admin_secret(pc, "", "").ok_or(RenderError::Unstored)?;
    secret.data = None;
    let mut out = vec![
        json(serde_json::to_value(secret))?,
        json(serde_json::to_value(
            config_map(pc, &cm_name, &r).ok_or(RenderError::Unstored)?,
        ))?,
    ];
    if let Target::Deployment(t) = &pc.spec.target {
        if let Some(sa) = service_account(pc) {
            out.push(json(serde_json::to_value(sa))?);
        }
        out.push(json(serde_json::to_value(
            deployment(pc, t, &cm_name, &r).ok_or(RenderError::Unstored)?,
        ))?);
        out.push(json(serde_json::to_value(
            service(pc, t).ok_or(RenderError::Unstored)?,
        ))?);
        if t.pod_disruption_budget.enabled {
            out.push(json(serde_json::to_value(
                pdb(pc, t).ok_or(RenderError::Unstored)?,
            ))?);
        }
    }
    Ok(out)
}

/// The first line of every rendered file: which operator wrote it.
pub fn header() -> String {
    format!(
        "# Written by droid-pool-operator {}: only the settings that differ from the pooler's defaults.\n",
        env!("CARGO_PKG_VERSION")
    )
}

/// `config` as YAML holding only what differs from `Config::default()`. Poolers refuse unknown
/// keys, so writing every field would make the files of a newer operator (which knows more
/// settings) unreadable for poolers of an older release; this way a new setting appears only
/// where a PoolConfig uses it.
fn minimal_yaml(config: &Config) -> Result<String, RenderError> {
    let mut value = serde_yaml::to_value(config)?;
    let defaults = serde_yaml::to_value(Config::default())?;
    prune_defaults(&mut value, &defaults);
    let body = match &value {
        serde_yaml::Value::Mapping(m) if m.is_empty() => String::new(),
        v => serde_yaml::to_string(v)?,
    };
    Ok(header() + &body)
}

/// Removes from `value` every mapping entry equal to the one in `defaults`, recursively;
/// mappings left empty go too.
fn prune_defaults(value: &mut serde_yaml::Value, defaults: &serde_yaml::Value) {
    let (serde_yaml::Value::Mapping(map), serde_yaml::Value::Mapping(def)) = (value, defaults)
    else {
        return;
    };
    map.retain(|k, v| match def.get(k) {
        Some(d) if d == v => false,
        Some(d) => {
            prune_defaults(v, d);
            !matches!(v, serde_yaml::Value::Mapping(m) if m.is_empty())
        }
        None => true,
    });
}

pub use crate::config::fnv1a_hex;

fn duration(field: &'static str, value: &Option<String>) -> Result<Option<Duration>, RenderError> {
    value
        .as_deref()
        .map(|v| {
            humantime::parse_duration(v).map_err(|_| RenderError::Duration {
                field,
                value: v.to_owned(),
            })
        })
        .transpose()
}

/// A `sessionState` value (`off`, `pin`, `track`; the schema's pattern checks it on servers that
/// enforce it, this on any).
pub(super) fn session_state(
    field: &'static str,
    value: &Option<String>,
) -> Result<Option<config::SessionState>, RenderError> {
    value
        .as_deref()
        .map(|v| {
            config::SessionState::parse(v).ok_or_else(|| RenderError::SessionState {
                field,
                value: v.to_owned(),
            })
        })
        .transpose()
}

/// The pooler's typed config for this spec: the defaults, overridden by what the spec sets.
pub fn pooler_config(spec: &PoolConfigSpec, pool_size: u32) -> Result<Config, RenderError> {
    let deployed = matches!(spec.target, Target::Deployment(_));
    if let (Target::Sidecar(s), Some(_)) = (&spec.target, spec.max_server_connections) {
        if s.pod_selector.is_none() {
            return Err(RenderError::BudgetWithoutSelector);
        }
    }
    let mut c = Config::default();
    // Sidecars serve their own pod over loopback; deployed poolers serve the pod network.
    // The admin port always listens on all addresses: the kubelet probes it from outside.
    c.listen.addr = if deployed {
        IpAddr::from([0, 0, 0, 0])
    } else {
        IpAddr::from([127, 0, 0, 1])
    };
    c.admin.addr = IpAddr::from([0, 0, 0, 0]);
    c.log.format = config::LogFormat::Json;
    // No per-transaction event lines in a cluster: at 10,000 transactions/s they would be
    // 20,000 container log lines a second; the same facts are in the metrics.
    c.log.events = config::EventLevel::Lifecycle;
    c.pool.size = pool_size as usize;
    c.pool.mode = failover::pool_mode(spec.mode);
    c.pool.track_prepared = spec.track_prepared;
    let pool_state = spec.pool.as_ref().and_then(|p| p.session_state.clone());
    if let Some(state) = session_state("spec.pool.sessionState", &pool_state)? {
        c.pool.session_state = state;
    }
    if let Some(always) = spec.pool.as_ref().and_then(|p| p.reset_query_always) {
        c.pool.reset_query_always = always;
    }
    if let Some(n) = spec.max_client_connections {
        c.client.max_connections = n as usize;
    }
    if let Some(d) = duration("spec.queryWaitTimeout", &spec.query_wait_timeout)? {
        c.pool.query_wait_timeout = d;
    }
    server(&mut c, &spec.server)?;
    client_auth(&mut c, spec.client_auth.as_ref(), deployed)?;
    resilience(&mut c, spec)?;
    shared::limits(&mut c, spec)?;
    let drain = spec.drain.clone().unwrap_or_default();
    c.drain.mode = match (drain.mode, deployed) {
        (Some(crd::DrainMode::WaitForClients), _) | (None, false) => {
            config::DrainMode::WaitForClients
        }
        (Some(crd::DrainMode::TransactionBoundary), _) | (None, true) => {
            config::DrainMode::TransactionBoundary
        }
    };
    if let Some(d) = duration("spec.drain.timeout", &drain.timeout)? {
        c.drain.timeout = d;
    }
    Ok(c)
}

fn server(c: &mut Config, s: &crd::ServerSpec) -> Result<(), RenderError> {
    failover::server(c, s)?;
    c.server.database = s.database.clone();
    c.server.user = s.user.clone();
    // The Secret is mounted as a file; the password never enters the ConfigMap.
    c.server.password_file = s
        .password_secret
        .as_ref()
        .map(|r| PathBuf::from(SERVER_PASSWORD_DIR).join(&r.key));
    Ok(())
}

fn client_auth(
    c: &mut Config,
    auth: Option<&crd::ClientAuthSpec>,
    deployed: bool,
) -> Result<(), RenderError> {
    let default_method = if deployed {
        crd::AuthMethod::ScramSha256
    } else {
        crd::AuthMethod::Trust
    };
    let method = auth.and_then(|a| a.method).unwrap_or(default_method);
    let allow_trust = auth.is_some_and(|a| a.allow_trust_on_network);
    let has_passwords = auth.is_some_and(|a| a.passwords_secret.is_some());
    let users = auth.and_then(|a| a.users_secret.as_ref());
    c.auth.allow_trust_on_network = allow_trust;
    c.auth.method = Some(match method {
        crd::AuthMethod::Trust => config::AuthMethod::Trust,
        crd::AuthMethod::Md5 => config::AuthMethod::Md5,
        crd::AuthMethod::ScramSha256 => config::AuthMethod::ScramSha256,
    });
    match method {
        crd::AuthMethod::Trust if deployed && !allow_trust => Err(RenderError::TrustOnNetwork),
        crd::AuthMethod::Trust => Ok(()),
        crd::AuthMethod::Md5 | crd::AuthMethod::ScramSha256 => {
            if deployed && !has_passwords && users.is_none() {
                let name = if method == crd::AuthMethod::Md5 {
                    "md5"
                } else {
                    "scram-sha-256"
                };
                return Err(RenderError::PasswordsSecretMissing(name));
            }
            // Sidecars mount the Secrets at the same paths themselves.
            if has_passwords || users.is_none() {
                c.auth.passwords_dir = Some(PathBuf::from(CLIENT_PASSWORDS_DIR));
            }
            if let Some(u) = users {
                c.auth.users_file = Some(PathBuf::from(CLIENT_USERS_DIR).join(&u.key));
            }
            Ok(())
        }
    }
}

fn resilience(c: &mut Config, spec: &PoolConfigSpec) -> Result<(), RenderError> {
    let retry = spec.retry.clone().unwrap_or_default();
    if let Some(d) = duration("spec.retry.backoffBase", &retry.backoff_base)? {
        c.backoff.base = d;
    }
    if let Some(d) = duration("spec.retry.backoffCap", &retry.backoff_cap)? {
        c.backoff.cap = d;
    }
    if let Some(p) = retry.budget_percent {
        c.retry_budget.percent = f64::from(p);
    }
    if let Some(d) = duration("spec.retry.budgetWindow", &retry.budget_window)? {
        c.retry_budget.window = d;
    }
    let breaker = spec.breaker.clone().unwrap_or_default();
    if let Some(n) = breaker.consecutive_failures {
        c.breaker.consecutive_failures = n;
    }
    if let Some(p) = breaker.failure_percent {
        c.breaker.failure_ratio = f64::from(p) / 100.0;
    }
    if let Some(d) = duration("spec.breaker.cooldownBase", &breaker.cooldown_base)? {
        c.breaker.cooldown_base = d;
    }
    if let Some(d) = duration("spec.breaker.cooldownCap", &breaker.cooldown_cap)? {
        c.breaker.cooldown_cap = d;
    }
    Ok(())
}
