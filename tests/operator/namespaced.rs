//! The namespace-scoped install against the real API server: `deploy/operator/namespaced.yaml`
//! (rendered from the chart with `operator.scope: namespace`) holds no ClusterRole; the
//! operator, running as its ServiceAccount bound by nothing but that file's Roles, with the
//! file's `WATCH_NAMESPACE` and `--allowed-images`, reconciles a PoolConfig of its namespace
//! (its admin Secret included), leaves one elsewhere alone, and can read no Secret and list
//! no PoolConfig outside.

use std::time::Duration;

use droid_pool::operator::crd::PoolConfig;
use droid_pool::operator::leader::LeaseConfig;
use droid_pool::operator::policy::Allowlist;
use droid_pool::operator::run::{run, RunOptions};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, PostParams};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::reconcile::{deployed, get, secret};
use crate::support::{self, condition, eventually};

const FILE: &str = include_str!("../../deploy/operator/namespaced.yaml");
const SYSTEM: &str = "droid-pool-system";
const USER: &str = "system:serviceaccount:droid-pool-system:droid-pool-operator";

fn documents() -> Vec<Value> {
    serde_yaml::Deserializer::from_str(FILE)
        .map(|d| serde::Deserialize::deserialize(d).expect("YAML document"))
        .filter(|d: &Value| !d.is_null())
        .collect()
}

/// The operator container's environment variable `name` and argument `--flag=` value.
fn operator_setting(docs: &[Value], env: &str, flag: &str) -> (String, String) {
    let d = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("the operator's Deployment");
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    let envs = c["env"].as_array().expect("env");
    let value = envs
        .iter()
        .find(|e| e["name"] == env)
        .and_then(|e| e["value"].as_str())
        .unwrap_or_else(|| panic!("no {env}"));
    let prefix = format!("{flag}=");
    let args = c["args"].as_array().expect("args");
    let arg = args
        .iter()
        .filter_map(Value::as_str)
        .find_map(|a| a.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {flag}"));
    (value.to_owned(), arg.to_owned())
}

async fn forbidden<T: std::fmt::Debug>(what: &str, r: Result<T, kube::Error>) {
    assert!(
        matches!(&r, Err(kube::Error::Api(s)) if s.code == 403),
        "{what}: {r:?}"
    );
}

#[tokio::test]
async fn the_namespaced_install_reconciles_its_namespace_and_reads_nothing_elsewhere() {
    let admin = support::client().await;
    support::install_crd(&admin).await;
    let docs = documents();
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert!(
        !kinds.iter().any(|k| k.starts_with("Cluster")),
        "a namespace-scoped install holds nothing cluster-wide: {kinds:?}"
    );
    let (watch, images) = operator_setting(&docs, "WATCH_NAMESPACE", "--allowed-images");
    let watched: Vec<String> = watch.split(',').map(str::to_owned).collect();
    support::namespace(&admin, SYSTEM).await;
    for ns in &watched {
        support::namespace(&admin, ns).await;
    }
    let outside = support::namespace(&admin, "outside-scope").await;
    let mut bound = 0;
    for d in &docs {
        let ns = d["metadata"]["namespace"].as_str().expect("namespaced");
        match d["kind"].as_str() {
            Some("Role") => {
                let r: Role = serde_json::from_value(d.clone()).expect("Role");
                Api::<Role>::namespaced(admin.clone(), ns)
                    .create(&PostParams::default(), &r)
                    .await
                    .expect("create Role");
            }
            Some("RoleBinding") => {
                let b: RoleBinding = serde_json::from_value(d.clone()).expect("RoleBinding");
                Api::<RoleBinding>::namespaced(admin.clone(), ns)
                    .create(&PostParams::default(), &b)
                    .await
                    .expect("create RoleBinding");
                bound += 1;
            }
            _ => {}
        }
    }
    assert_eq!(
        bound,
        watched.len() + 1,
        "one per watched namespace + the Lease"
    );
    let demo = watched[0].clone();
    for ns in [&demo, &outside] {
        secret(&admin, ns, "db-cred", "password").await;
        secret(&admin, ns, "pooler-users", "app").await;
    }

    let client = support::client_as(USER).await;
    forbidden(
        "a Secret outside",
        Api::<Secret>::namespaced(client.clone(), &outside)
            .get("db-cred")
            .await,
    )
    .await;
    forbidden(
        "a Secret list in its own namespace (get only)",
        Api::<Secret>::namespaced(client.clone(), &demo)
            .list(&Default::default())
            .await,
    )
    .await;
    forbidden(
        "PoolConfigs of every namespace",
        Api::<PoolConfig>::all(client.clone())
            .list(&Default::default())
            .await,
    )
    .await;
    let images: Vec<String> = images.split(',').map(str::to_owned).collect();
    let opts = RunOptions {
        metrics_addr: "127.0.0.1:0".parse().expect("addr"),
        namespaces: watched.clone(),
        allow: Allowlist::new(&images, &[]).expect("allowlist"),
        lease: Some(LeaseConfig {
            retry_period: Duration::from_millis(200),
            ..LeaseConfig::new(SYSTEM.into(), "droid-pool-operator".into(), "op-ns".into())
        }),
        instance: Some("op-ns".into()),
    };
    let shutdown = CancellationToken::new();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(run(client.clone(), opts, shutdown.clone(), move |a| {
        let _ = tx.send(a);
    }));
    let metrics = rx.await.expect("metrics address");
    let image = json!({"target": {"deployment": {"image": images[0]}}});
    for ns in [&demo, &outside] {
        support::create(&admin, ns, deployed("orders", image.clone())).await;
    }
    let pc = eventually("reconciled in the watched namespace", || async {
        let pc = get(&admin, &demo, "orders").await;
        (condition(&pc, "ConfigRendered")? == ("True".into(), "Rendered".into())).then_some(pc)
    })
    .await;
    assert_eq!(
        condition(&pc, "Degraded"),
        Some(("False".into(), "AsExpected".into()))
    );
    assert!(Api::<Deployment>::namespaced(admin.clone(), &demo)
        .get_opt("orders")
        .await
        .expect("get")
        .is_some());
    assert!(Api::<Secret>::namespaced(admin.clone(), &demo)
        .get_opt("orders-admin")
        .await
        .expect("get")
        .is_some());
    // Nothing it needed was forbidden.
    let (_, text) = crate::process::http_get(metrics, "/metrics")
        .await
        .expect("metrics");
    assert!(
        !text.contains("reconcile_failures_total{reason=\"forbidden\"}"),
        "{text}"
    );
    // Another namespace's PoolConfig is none of its business: never looked at.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let elsewhere = get(&admin, &outside, "orders").await;
    assert!(elsewhere.status.is_none(), "{:?}", elsewhere.status);
    assert!(Api::<Secret>::namespaced(admin.clone(), &outside)
        .get_opt("orders-admin")
        .await
        .expect("get")
        .is_none());
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("stops")
        .expect("task")
        .expect("a clean stop: nothing was forbidden that it needed");
}
