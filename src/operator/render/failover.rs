//! Rendering the failover settings: `server.hosts` and `targetSessionAttrs`, the `databases`
//! aliases, `failover.holdTimeout`, and a CloudNativePG Cluster's Services by role (`NAME-rw`
//! for writes, `NAME-ro` for reads) with the hold in force only while it switches over.

use std::time::Duration;

use super::{duration, RenderError};
use crate::config::{self, Config, DatabaseConfig, TargetSessionAttrs};
use crate::operator::crd::{self, PoolConfigSpec, ServerSpec};

/// The hold through a CloudNativePG switchover when `failover.holdTimeout` is unset.
pub const CNPG_HOLD: Duration = Duration::from_secs(30);

/// What the operator observed that the rendered config depends on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Facts {
    /// The CloudNativePG Cluster is switching over (`status.targetPrimary` differs from
    /// `status.currentPrimary`).
    pub switchover: bool,
    /// Every running pooler reads `pool.max_db_connections` (see [`super::Readers`]), so a
    /// budget's share may be written as that limit too.
    pub db_limit_readable: bool,
    /// Every pooler pod mounts the admin Secret and every running pooler reads
    /// `admin.token_file` and `auth.mock_secret_file`, so the config may point at them.
    pub admin_files: bool,
}

/// The server's host(s), their roles and the hold.
pub fn server(c: &mut Config, s: &ServerSpec) -> Result<(), RenderError> {
    match (&s.host, s.hosts.is_empty(), &s.cloud_native_pg) {
        (Some(host), true, None) => {
            c.server.host = host.clone();
            c.server.port = s.port;
        }
        (None, false, None) => c.server.hosts = s.hosts.clone(),
        (None, true, Some(cnpg)) => {
            c.server.host = format!("{}-rw", cnpg.cluster);
            c.server.port = s.port;
        }
        _ => return Err(RenderError::ServerChoice),
    }
    if let Some(t) = s.target_session_attrs {
        c.server.target_session_attrs = t;
    }
    if let Some(l) = s.load_balance_hosts {
        c.server.load_balance_hosts = l;
    }
    Ok(())
}

/// The aliases and the hold.
pub fn failover(c: &mut Config, spec: &PoolConfigSpec, facts: Facts) -> Result<(), RenderError> {
    let hold = duration(
        "spec.failover.holdTimeout",
        &spec.failover.as_ref().and_then(|f| f.hold_timeout.clone()),
    )?;
    let cnpg = spec.server.cloud_native_pg.as_ref();
    c.failover.hold_timeout = match (cnpg, hold) {
        (None, Some(h)) => h,
        (Some(_), h) if facts.switchover => h.unwrap_or(CNPG_HOLD),
        _ => Duration::ZERO,
    };
    for (alias, d) in &spec.databases {
        let tsa = d.target_session_attrs.or(spec.server.target_session_attrs);
        let hosts = match cnpg {
            Some(r) if d.hosts.is_empty() => cnpg_hosts(&r.cluster, spec.server.port, tsa),
            _ => d.hosts.clone(),
        };
        let db = DatabaseConfig {
            dbname: d.dbname.clone(),
            hosts,
            target_session_attrs: d.target_session_attrs,
            load_balance_hosts: d.load_balance_hosts,
            pool_size: d.pool_size.map(|n| n as usize),
            mode: d.mode.map(pool_mode),
            session_state: super::session_state("spec.databases.*.sessionState", &d.session_state)?,
            reset_query_always: d.reset_query_always,
        };
        c.databases.insert(alias.clone(), db);
    }
    Ok(())
}

/// A Cluster's Services for a role: `-ro` (replicas) for reads, `-rw` (the primary) for
/// writes and any, both for prefer-standby (a replica first, the primary when none answers).
fn cnpg_hosts(cluster: &str, port: u16, tsa: Option<TargetSessionAttrs>) -> Vec<String> {
    let rw = format!("{cluster}-rw:{port}");
    let ro = format!("{cluster}-ro:{port}");
    match tsa {
        Some(TargetSessionAttrs::ReadOnly | TargetSessionAttrs::Standby) => vec![ro],
        Some(TargetSessionAttrs::PreferStandby) => vec![ro, rw],
        _ => vec![rw],
    }
}

pub fn pool_mode(m: crd::Mode) -> config::PoolMode {
    match m {
        crd::Mode::Session => config::PoolMode::Session,
        crd::Mode::Transaction => config::PoolMode::Transaction,
        crd::Mode::Statement => config::PoolMode::Statement,
    }
}

#[cfg(test)]
mod tests {
    use super::super::{render, render_with};
    use super::*;

    fn spec(yaml: &str) -> PoolConfigSpec {
        let value: serde_json::Value = serde_yaml::from_str(yaml).expect("test YAML parses");
        serde_json::from_value(value).expect("test spec parses")
    }

    const SIDECAR: &str = "poolSize: 5\ntarget: {sidecar: {configMapName: c}}\n";

    fn keys(yaml: &str) -> Vec<String> {
        let v: serde_yaml::Value = serde_yaml::from_str(yaml).unwrap();
        let serde_yaml::Value::Mapping(m) = v else {
            return vec![];
        };
        m.keys().map(|k| k.as_str().unwrap().to_owned()).collect()
    }

    #[test]
    fn hosts_roles_aliases_and_the_hold_are_rendered_when_used() {
        let s = spec(&format!(
            "{SIDECAR}server: {{hosts: [\"db-0:5432\", \"db-1:5432\"], \
             targetSessionAttrs: read-write, loadBalanceHosts: random}}\n\
             failover: {{holdTimeout: 10s}}\n\
             databases: {{app_ro: {{dbname: app, targetSessionAttrs: prefer-standby, \
             poolSize: 3, mode: session}}}}\n"
        ));
        let r = render(&s, 1).unwrap();
        let c = &r.config;
        assert_eq!(c.server.hosts, ["db-0:5432", "db-1:5432"]);
        assert_eq!(c.server.target_session_attrs, TargetSessionAttrs::ReadWrite);
        assert_eq!(
            c.server.load_balance_hosts,
            config::LoadBalanceHosts::Random
        );
        assert_eq!(c.failover.hold_timeout, Duration::from_secs(10));
        let ro = &c.databases["app_ro"];
        assert_eq!(ro.dbname.as_deref(), Some("app"));
        assert!(ro.hosts.is_empty(), "the server's hosts");
        assert_eq!(ro.pool_size, Some(3));
        assert_eq!(ro.mode, Some(config::PoolMode::Session));
        let back = Config::from_yaml(&r.yaml, "cm".as_ref()).unwrap();
        back.validate().unwrap();
        assert_eq!(&back, c);
        // Without them, none of their keys is written (older poolers refuse unknown keys).
        let plain = render(&spec(&format!("{SIDECAR}server: {{host: db}}\n")), 1).unwrap();
        let top = keys(
            plain
                .yaml
                .lines()
                .skip(1)
                .collect::<Vec<_>>()
                .join("\n")
                .as_str(),
        );
        assert!(
            !top.iter().any(|k| k == "databases" || k == "failover"),
            "{top:?}"
        );
        assert!(!plain.yaml.contains("hosts") && !plain.yaml.contains("target_session"));
    }

    #[test]
    fn one_server_form_and_valid_hosts() {
        for server in [
            "{}",
            "{host: db, hosts: [\"a:1\"]}",
            "{host: db, cloudNativePG: {cluster: pg}}",
        ] {
            let s = spec(&format!("{SIDECAR}server: {server}\n"));
            assert!(
                matches!(render(&s, 1), Err(RenderError::ServerChoice)),
                "{server}"
            );
        }
        let s = spec(&format!("{SIDECAR}server: {{hosts: [\"db:x\"]}}\n"));
        let err = render(&s, 1).unwrap_err().to_string();
        assert!(err.contains("server.hosts"), "{err}");
        let s = spec(&format!(
            "{SIDECAR}server: {{host: db}}\nfailover: {{holdTimeout: soon}}\n"
        ));
        let err = render(&s, 1).unwrap_err().to_string();
        assert!(err.contains("spec.failover.holdTimeout"), "{err}");
    }

    #[test]
    fn a_cloudnativepg_cluster_is_its_services_by_role_and_held_while_it_switches() {
        let s = spec(&format!(
            "{SIDECAR}server: {{cloudNativePG: {{cluster: pg}}}}\n\
             databases: {{app: {{targetSessionAttrs: read-write}}, \
             app_ro: {{dbname: app, targetSessionAttrs: read-only}}, \
             app_any_ro: {{dbname: app, targetSessionAttrs: prefer-standby}}, \
             pinned: {{hosts: [\"other:5432\"]}}}}\n"
        ));
        let stable = render(&s, 1).unwrap().config;
        assert_eq!(
            (stable.server.host.as_str(), stable.server.port),
            ("pg-rw", 5432)
        );
        let hosts = |a: &str| stable.databases[a].hosts.clone();
        assert_eq!(hosts("app"), ["pg-rw:5432"]);
        assert_eq!(hosts("app_ro"), ["pg-ro:5432"]);
        assert_eq!(hosts("app_any_ro"), ["pg-ro:5432", "pg-rw:5432"]);
        assert_eq!(hosts("pinned"), ["other:5432"]);
        assert_eq!(
            stable.failover.hold_timeout,
            Duration::ZERO,
            "held only while switching"
        );
        let switching = Facts {
            switchover: true,
            ..Facts::default()
        };
        let held = render_with(&s, 1, switching).unwrap();
        assert_eq!(held.config.failover.hold_timeout, CNPG_HOLD);
        assert!(held.yaml.contains("hold_timeout: 30s"), "{}", held.yaml);
        let mut own = s.clone();
        own.failover = Some(crd::FailoverSpec {
            hold_timeout: Some("12s".into()),
        });
        let held = render_with(&own, 1, switching).unwrap().config;
        assert_eq!(held.failover.hold_timeout, Duration::from_secs(12));
        assert_eq!(
            render(&own, 1).unwrap().config.failover.hold_timeout,
            Duration::ZERO
        );
    }
}
