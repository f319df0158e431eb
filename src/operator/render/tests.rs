//! Unit tests of the pure render: budget arithmetic, validation edges, and the objects.

use super::*;
use crate::operator::crd::{
    AuthMethod, ClientAuthSpec, DeploymentTarget, PoolConfig, SidecarTarget,
};

fn spec(yaml: &str) -> PoolConfigSpec {
    // Through JSON, as the API server hands objects over (serde_yaml wants tags for enums).
    let value: serde_json::Value = serde_yaml::from_str(yaml).expect("test YAML parses");
    serde_json::from_value(value).expect("test spec parses")
}

fn sidecar_budget(budget: u32) -> PoolConfigSpec {
    spec(&format!(
        "maxServerConnections: {budget}\nserver: {{host: db}}\n\
         target: {{sidecar: {{configMapName: app-pool, podSelector: {{matchLabels: {{app: web}}}}}}}}\n"
    ))
}

fn deployed(extra: &str) -> PoolConfigSpec {
    spec(&format!(
        "poolSize: 10\nserver: {{host: db, passwordSecret: {{name: db-cred}}}}\n\
         clientAuth: {{passwordsSecret: users}}\ntarget: {{deployment: {{replicas: 3}}}}\n{extra}"
    ))
}

fn object(spec: PoolConfigSpec) -> PoolConfig {
    let mut pc = PoolConfig::new("orders", spec);
    pc.metadata.namespace = Some("shop".into());
    pc.metadata.uid = Some("0a1b".into());
    pc
}

#[test]
fn budget_is_floor_over_poolers_at_least_one() {
    let s = sidecar_budget(100);
    for (poolers, size) in [
        (0, 100),
        (1, 100),
        (3, 33),
        (7, 14),
        (100, 1),
        (101, 1),
        (1000, 1),
    ] {
        let got = sizing(&s, poolers).unwrap();
        assert_eq!(got.pool_size, size, "{poolers} poolers");
        assert!(got.pool_size >= 1);
        assert_eq!(got.over_budget, poolers > 100, "{poolers} poolers");
        // Whenever the budget allows one connection per pooler, the total stays within it.
        if !got.over_budget {
            assert!(u64::from(got.pool_size) * u64::from(got.poolers) <= 100);
        }
    }
}

#[test]
fn fixed_pool_size_ignores_poolers() {
    let s = deployed("");
    assert_eq!(sizing(&s, 50).unwrap().pool_size, 10);
    assert!(!sizing(&s, 50).unwrap().over_budget);
}

#[test]
fn exactly_one_sizing_field() {
    let mut s = deployed("");
    s.max_server_connections = Some(5);
    assert!(matches!(sizing(&s, 1), Err(RenderError::PoolSizeChoice)));
    s.pool_size = None;
    s.max_server_connections = None;
    assert!(matches!(render(&s, 1), Err(RenderError::PoolSizeChoice)));
    s.pool_size = Some(0);
    assert!(matches!(sizing(&s, 1), Err(RenderError::PoolSizeChoice)));
}

#[test]
fn sidecar_budget_needs_a_selector() {
    let mut s = sidecar_budget(10);
    if let Target::Sidecar(t) = &mut s.target {
        t.pod_selector = None;
    }
    assert!(matches!(
        render(&s, 1),
        Err(RenderError::BudgetWithoutSelector)
    ));
}

#[test]
fn sidecar_listens_on_loopback_with_trust_and_admin_on_all() {
    let r = render(&sidecar_budget(40), 4).unwrap();
    assert_eq!(r.config.pool.size, 10);
    assert!(r.config.listen.addr.is_loopback());
    assert!(r.config.admin.addr.is_unspecified());
    assert_eq!(r.config.auth.method, Some(config::AuthMethod::Trust));
    assert_eq!(r.config.drain.mode, config::DrainMode::WaitForClients);
    // The YAML is what the pooler itself loads, and it loads back to the same config.
    let back = Config::from_yaml(&r.yaml, "cm".as_ref()).unwrap();
    assert_eq!(back, r.config);
}

#[test]
fn deployment_trust_needs_explicit_consent() {
    let mut s = deployed("");
    s.client_auth = Some(ClientAuthSpec {
        method: Some(AuthMethod::Trust),
        passwords_secret: None,
        users_secret: None,
        allow_trust_on_network: false,
    });
    assert!(matches!(render(&s, 1), Err(RenderError::TrustOnNetwork)));
    s.client_auth.as_mut().unwrap().allow_trust_on_network = true;
    let r = render(&s, 1).unwrap();
    assert!(r.config.auth.allow_trust_on_network);
    assert!(r.config.listen.addr.is_unspecified());
}

#[test]
fn deployment_password_auth_needs_the_passwords_secret() {
    let mut s = deployed("");
    s.client_auth = None;
    assert!(matches!(
        render(&s, 1),
        Err(RenderError::PasswordsSecretMissing("scram-sha-256"))
    ));
    let r = render(&deployed(""), 1).unwrap();
    assert_eq!(r.config.auth.method, Some(config::AuthMethod::ScramSha256));
    assert_eq!(
        r.config.auth.passwords_dir.as_deref(),
        Some(CLIENT_PASSWORDS_DIR.as_ref())
    );
    assert_eq!(r.config.drain.mode, config::DrainMode::TransactionBoundary);
}

#[test]
fn secrets_are_files_never_values() {
    let r = render(&deployed(""), 1).unwrap();
    assert_eq!(
        r.config.server.password_file.as_deref(),
        Some(std::path::Path::new("/var/run/droid-pool/server/password"))
    );
    assert!(r.config.server.password.is_none());
    let password_lines: Vec<_> = r
        .yaml
        .lines()
        .filter(|l| l.trim_start().starts_with("password:"))
        .collect();
    assert!(password_lines.is_empty(), "{}", r.yaml);
    assert!(r
        .yaml
        .contains("password_file: /var/run/droid-pool/server/password"));
}

#[test]
fn durations_and_ranges_are_checked() {
    let bad = deployed("retry: {backoffBase: soon}\n");
    assert!(matches!(
        render(&bad, 1).unwrap_err(),
        RenderError::Duration {
            field: "spec.retry.backoffBase",
            ..
        }
    ));
    // Timeouts must shrink down the stack: the pooler's own validation speaks.
    let inverted = deployed("queryWaitTimeout: 1s\n");
    let err = render(&inverted, 1).unwrap_err().to_string();
    assert!(err.contains("connect_timeout"), "{err}");
    let cap = deployed("retry: {backoffBase: 2s, backoffCap: 1s}\n");
    assert!(render(&cap, 1)
        .unwrap_err()
        .to_string()
        .contains("backoff.cap"));
    let drain = deployed("drain: {timeout: 3s}\n");
    assert!(render(&drain, 1)
        .unwrap_err()
        .to_string()
        .contains("accept_window"));
    let ok = deployed(
        "mode: session\ntrackPrepared: true\nmaxClientConnections: 500\nqueryWaitTimeout: 1m\n\
         retry: {backoffBase: 100ms, backoffCap: 2s, budgetPercent: 10, budgetWindow: 30s}\n\
         breaker: {consecutiveFailures: 3, failurePercent: 25, cooldownBase: 1s, cooldownCap: 10s}\n\
         drain: {mode: wait-for-clients, timeout: 1m30s}\n",
    );
    let c = render(&ok, 1).unwrap().config;
    assert_eq!(c.pool.mode, config::PoolMode::Session);
    assert!(c.pool.track_prepared);
    assert_eq!(c.client.max_connections, 500);
    assert_eq!(c.pool.query_wait_timeout, Duration::from_secs(60));
    assert_eq!(c.backoff.base, Duration::from_millis(100));
    assert_eq!(c.retry_budget.percent, 10.0);
    assert_eq!(c.breaker.failure_ratio, 0.25);
    assert_eq!(c.drain.mode, config::DrainMode::WaitForClients);
    assert_eq!(c.drain.timeout, Duration::from_secs(90));
}

#[test]
fn hot_settings_change_the_hash_but_not_the_restart_checksum() {
    let a = render(&sidecar_budget(100), 4).unwrap();
    let b = render(&sidecar_budget(100), 5).unwrap();
    let mut mode = sidecar_budget(100);
    mode.mode = crate::operator::crd::Mode::Statement;
    mode.track_prepared = true;
    let c = render(&mode, 4).unwrap();
    assert_ne!(a.hash, b.hash);
    assert_ne!(a.hash, c.hash);
    assert_eq!(a.restart_checksum, b.restart_checksum);
    assert_eq!(a.restart_checksum, c.restart_checksum);
    // Moving the listener (sidecar → deployment) needs a restart.
    let d = render(&deployed(""), 1).unwrap();
    assert_ne!(a.restart_checksum, d.restart_checksum);
    // Stable across runs and releases: FNV-1a of known input.
    assert_eq!(fnv1a_hex(b""), "cbf29ce484222325");
    assert_eq!(fnv1a_hex(b"a"), "af63dc4c8601ec8c");
}

#[test]
fn config_map_is_owned_and_labelled() {
    let pc = object(sidecar_budget(10));
    let r = render(&pc.spec, 2).unwrap();
    let cm = config_map(&pc, "app-pool", &r).unwrap();
    let owner = &cm.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("PoolConfig", "0a1b")
    );
    assert_eq!(owner.controller, Some(true));
    assert_eq!(cm.data.as_ref().unwrap()[CONFIG_KEY], r.yaml);
    assert_eq!(
        cm.metadata.labels.unwrap()["app.kubernetes.io/instance"],
        "orders"
    );
    // Without a uid (never stored) there is no owner, so nothing is rendered.
    let mut unsaved = pc.clone();
    unsaved.metadata.uid = None;
    assert!(config_map(&unsaved, "x", &r).is_none());
}

fn target(pc: &PoolConfig) -> DeploymentTarget {
    match &pc.spec.target {
        Target::Deployment(t) => t.clone(),
        Target::Sidecar(SidecarTarget { .. }) => panic!("deployment expected"),
    }
}

#[test]
fn deployment_probes_grace_and_mounts() {
    let pc = object(deployed("drain: {timeout: 40s}\n"));
    let r = render(&pc.spec, 3).unwrap();
    let t = target(&pc);
    let d = deployment(&pc, &t, "orders-config", &r).unwrap();
    let spec = d.spec.unwrap();
    assert_eq!(spec.replicas, Some(3));
    let tmpl = spec.template;
    let ann = tmpl.metadata.unwrap().annotations.unwrap();
    assert_eq!(ann[RESTART_CHECKSUM_ANNOTATION], r.restart_checksum);
    assert_eq!(ann["prometheus.io/port"], "9127");
    let pod = tmpl.spec.unwrap();
    assert_eq!(pod.termination_grace_period_seconds, Some(45));
    let c = &pod.containers[0];
    assert_eq!(
        c.image.as_deref(),
        Some(crate::operator::crd::DEFAULT_IMAGE)
    );
    let path = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
        p.as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap()
            .path
            .clone()
            .unwrap()
    };
    assert_eq!(path(&c.startup_probe), "/startupz");
    assert_eq!(path(&c.liveness_probe), "/livez");
    assert_eq!(path(&c.readiness_probe), "/readyz");
    let mounts: Vec<_> = c
        .volume_mounts
        .as_ref()
        .unwrap()
        .iter()
        .map(|m| m.mount_path.as_str())
        .collect();
    assert_eq!(
        mounts,
        [
            CONFIG_DIR,
            ADMIN_DIR,
            SERVER_PASSWORD_DIR,
            CLIENT_PASSWORDS_DIR
        ]
    );
    // The ConfigMap is mounted whole: a subPath mount would never see an update.
    assert!(c
        .volume_mounts
        .as_ref()
        .unwrap()
        .iter()
        .all(|m| m.sub_path.is_none()));
}

#[test]
fn unset_replicas_are_left_to_the_autoscaler() {
    let mut s = deployed("");
    if let Target::Deployment(t) = &mut s.target {
        t.replicas = None;
    }
    let pc = object(s);
    let r = render(&pc.spec, 1).unwrap();
    let d = deployment(&pc, &target(&pc), "c", &r).unwrap();
    assert_eq!(d.spec.unwrap().replicas, None);
}

#[test]
fn service_and_pdb_select_the_poolers() {
    let pc = object(deployed(""));
    let t = target(&pc);
    let svc = service(&pc, &t).unwrap().spec.unwrap();
    assert_eq!(svc.type_.as_deref(), Some("ClusterIP"));
    assert_eq!(svc.ports.unwrap()[0].port, 6432);
    let pdb = pdb(&pc, &t).unwrap().spec.unwrap();
    assert_eq!(pdb.selector.unwrap().match_labels, svc.selector);
}

#[test]
fn only_settings_that_differ_from_the_defaults_are_written() {
    let r = render(&deployed(""), 3).unwrap();
    assert!(r.yaml.starts_with(&header()), "{}", r.yaml);
    assert!(r.yaml.contains(env!("CARGO_PKG_VERSION")));
    // Nothing the defaults already say: the pool mode is transaction by default.
    assert!(!r.yaml.contains("mode: transaction\n"), "{}", r.yaml);
    assert!(r.yaml.contains("size: 10"), "{}", r.yaml);
    let back = Config::from_yaml(&r.yaml, "cm".as_ref()).unwrap();
    assert_eq!(back, r.config);
}

/// Every key the 0.1.0 pooler's config loader accepts (frozen: poolers of that release refuse
/// any other, so an operator must not write one unless a PoolConfig asks for a newer setting).
pub(super) const POOLER_0_1_0_KEYS: &[&str] = &[
    "listen.addr",
    "listen.port",
    "server.host",
    "server.port",
    "server.user",
    "server.password",
    "server.password_file",
    "server.database",
    "server.allow_cleartext_password",
    "server.connect_timeout",
    "server.idle_timeout",
    "server.lifetime",
    "server.lifetime_jitter",
    "pool.mode",
    "pool.size",
    "pool.min_size",
    "pool.max_waiting_clients",
    "pool.query_wait_timeout",
    "pool.reset_query",
    "pool.server_round_robin",
    "pool.track_prepared",
    "pool.max_prepared_statements",
    "pool.max_client_prepared_statements",
    "pool.max_connecting",
    "client.max_connections",
    "client.max_pending_logins",
    "client.max_pending_logins_per_ip",
    "client.login_timeout",
    "client.idle_timeout",
    "client.max_message_size",
    "client.tcp_keepalive",
    "client.tcp_keepidle",
    "client.tcp_keepintvl",
    "client.tcp_keepcnt",
    "client.tcp_user_timeout",
    "client.buffer_size",
    "client.max_startup_packet",
    "client.max_startup_params",
    "client.warm_sessions",
    "auth.method",
    "auth.user_methods",
    "auth.allow_trust_on_network",
    "auth.users_file",
    "auth.passwords_dir",
    "auth.auth_user",
    "auth.auth_password",
    "auth.auth_password_file",
    "auth.auth_database",
    "auth.auth_pool_size",
    "auth.auth_cache_size",
    "auth.auth_query",
    "auth.auth_cache_ttl",
    "auth.auth_negative_cache_ttl",
    "tls.client.mode",
    "tls.client.cert_file",
    "tls.client.key_file",
    "tls.server.sslmode",
    "tls.server.ca_file",
    "tls.server.cert_file",
    "tls.server.key_file",
    "log.format",
    "log.events",
    "admin.addr",
    "admin.port",
    "admin.token",
    "admin.readiness_checks_backend",
    "admin.pgbouncer_metric_names",
    "admin.console_users",
    "drain.mode",
    "drain.accept_window",
    "drain.timeout",
    "backoff.base",
    "backoff.cap",
    "retry_budget.percent",
    "retry_budget.window",
    "retry_budget.min_per_second",
    "breaker.consecutive_failures",
    "breaker.failure_ratio",
    "breaker.ratio_window",
    "breaker.min_requests",
    "breaker.cooldown_base",
    "breaker.cooldown_cap",
];

/// The dotted paths of `v`'s leaves (a mapping under a frozen key counts as that key).
pub(super) fn key_paths(prefix: &str, v: &serde_yaml::Value, out: &mut Vec<String>) {
    match v {
        serde_yaml::Value::Mapping(m) if !POOLER_0_1_0_KEYS.contains(&prefix) => {
            for (k, v) in m {
                let k = k.as_str().expect("string keys");
                let path = if prefix.is_empty() {
                    k.to_owned()
                } else {
                    format!("{prefix}.{k}")
                };
                key_paths(&path, v, out);
            }
        }
        _ => out.push(prefix.to_owned()),
    }
}

#[test]
fn rendered_files_hold_only_keys_the_0_1_0_pooler_accepts() {
    // Every setting the PoolConfig offers today, on both targets.
    let everything = "mode: session\ntrackPrepared: true\nmaxClientConnections: 500\n\
         queryWaitTimeout: 15s\n\
         retry: {backoffBase: 100ms, backoffCap: 5s, budgetPercent: 30, budgetWindow: 20s}\n\
         breaker: {consecutiveFailures: 3, failurePercent: 40, cooldownBase: 1s, cooldownCap: 30s}\n\
         drain: {mode: wait-for-clients, timeout: 40s}\n";
    let specs = [
        deployed(everything),
        deployed(""),
        sidecar_budget(50),
        spec(&format!(
            "poolSize: 4\nserver: {{host: db, port: 5433, database: app, user: app, \
             passwordSecret: {{name: s, key: pw}}}}\n\
             clientAuth: {{method: md5, passwordsSecret: users}}\n\
             target: {{sidecar: {{configMapName: c}}}}\n{everything}"
        )),
    ];
    for s in specs {
        let r = render(&s, 2).unwrap();
        let value: serde_yaml::Value = serde_yaml::from_str(&r.yaml).unwrap();
        let mut paths = Vec::new();
        key_paths("", &value, &mut paths);
        assert!(!paths.is_empty());
        for p in &paths {
            assert!(
                POOLER_0_1_0_KEYS.contains(&p.as_str()),
                "{p} is not a 0.1.0 key:\n{}",
                r.yaml
            );
        }
        // And the loader (this crate is 0.1.0) takes the file as it is.
        let back = Config::from_yaml(&r.yaml, "cm".as_ref()).unwrap();
        back.validate().unwrap();
        assert_eq!(back, r.config);
    }
}

#[test]
fn pod_template_and_service_settings_reach_the_objects() {
    let plain = object(deployed(""));
    let r = render(&plain.spec, 1).unwrap();
    let d = deployment(&plain, &target(&plain), "c", &r).unwrap();
    let pod = d.spec.unwrap().template.spec.unwrap();
    // Without a template: spread over nodes, and the operator's own ServiceAccount.
    let spread = pod.topology_spread_constraints.unwrap();
    assert_eq!(spread.len(), 1);
    assert_eq!(spread[0].topology_key, "kubernetes.io/hostname");
    assert_eq!(spread[0].when_unsatisfiable, "ScheduleAnyway");
    assert_eq!(pod.service_account_name.as_deref(), Some("orders-pooler"));
    assert!(service_account(&plain).is_some());

    let pc = object(spec(
        "poolSize: 10\nserver: {host: db, passwordSecret: {name: db-cred}}\n\
         clientAuth: {passwordsSecret: users}\n\
         target: {deployment: {replicas: 2,\n\
           service: {type: LoadBalancer, annotations: {lb: internal},\n\
                     loadBalancerSourceRanges: [10.0.0.0/8], externalTrafficPolicy: Local},\n\
           podTemplate: {labels: {team: pay, app.kubernetes.io/instance: hijack},\n\
                         annotations: {a: b}, priorityClassName: high,\n\
                         serviceAccountName: pay-sa, nodeSelector: {disk: ssd},\n\
                         tolerations: [{key: k, operator: Exists}],\n\
                         topologySpreadConstraints: [{maxSkew: 2, topologyKey: zone,\n\
                           whenUnsatisfiable: DoNotSchedule}],\n\
                         imagePullSecrets: [{name: reg}]}}}\n",
    ));
    let r = render(&pc.spec, 2).unwrap();
    let t = target(&pc);
    let d = deployment(&pc, &t, "c", &r).unwrap();
    let tmpl = d.spec.unwrap().template;
    let meta = tmpl.metadata.unwrap();
    let labels = meta.labels.unwrap();
    assert_eq!(labels["team"], "pay");
    // The selector's labels are the operator's: a template cannot move pods out of it.
    assert_eq!(labels["app.kubernetes.io/instance"], "orders");
    let ann = meta.annotations.unwrap();
    assert_eq!(ann["a"], "b");
    assert!(ann.contains_key(RESTART_CHECKSUM_ANNOTATION));
    let pod = tmpl.spec.unwrap();
    assert_eq!(pod.priority_class_name.as_deref(), Some("high"));
    assert_eq!(pod.service_account_name.as_deref(), Some("pay-sa"));
    assert_eq!(pod.automount_service_account_token, Some(false));
    assert_eq!(pod.node_selector.unwrap()["disk"], "ssd");
    assert_eq!(pod.tolerations.unwrap()[0].key.as_deref(), Some("k"));
    assert_eq!(pod.topology_spread_constraints.unwrap()[0].max_skew, 2);
    assert_eq!(pod.image_pull_secrets.unwrap()[0].name, "reg");
    // The user's ServiceAccount: the operator makes none.
    assert!(service_account(&pc).is_none());
    let svc = service(&pc, &t).unwrap();
    assert_eq!(svc.metadata.annotations.unwrap()["lb"], "internal");
    let ss = svc.spec.unwrap();
    assert_eq!(ss.type_.as_deref(), Some("LoadBalancer"));
    assert_eq!(ss.external_traffic_policy.as_deref(), Some("Local"));
    assert_eq!(ss.load_balancer_source_ranges.unwrap(), ["10.0.0.0/8"]);

    let mut bad = deployed("");
    if let Target::Deployment(t) = &mut bad.target {
        t.service.external_traffic_policy = Some(crate::operator::crd::TrafficPolicy::Local);
    }
    assert!(matches!(
        render(&bad, 1),
        Err(RenderError::TrafficPolicyOnClusterIp)
    ));
}

/// `spec.pool.sessionState` and the per-user and per-database values reach the pooler's
/// configuration; a value the schema's pattern would refuse is refused here too.
#[test]
fn session_state_is_rendered_per_pool_user_and_database() {
    let spec = deployed(
        "pool: {sessionState: pin}\nusers: {batch: {sessionState: \"off\"}}\n\
         databases: {reports: {sessionState: track}}\n",
    );
    let c = render(&spec, 1).unwrap().config;
    assert_eq!(c.pool.session_state, config::SessionState::Pin);
    assert_eq!(
        c.users["batch"].session_state,
        Some(config::SessionState::Off)
    );
    assert_eq!(
        c.databases["reports"].session_state,
        Some(config::SessionState::Track)
    );
    assert_eq!(
        render(&deployed(""), 1).unwrap().config.pool.session_state,
        config::SessionState::Off
    );
    let bad = deployed("pool: {sessionState: track-everything}\n");
    assert!(matches!(
        render(&bad, 1).unwrap_err(),
        RenderError::SessionState {
            field: "spec.pool.sessionState",
            ..
        }
    ));
}
