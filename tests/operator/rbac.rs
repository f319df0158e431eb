//! The published RBAC rules (`deploy/operator/clusterrole.yaml`) are enough: the controller
//! and its leader election run as a user bound to exactly that role (the test admin
//! impersonates it) and do their whole job against the real API server.

use droid_pool::operator::controller;
use droid_pool::operator::crd::PoolConfig;
use droid_pool::operator::leader::{Elector, LeaseConfig};
use droid_pool::operator::metrics::Metrics;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, PostParams};
use serde_json::json;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use crate::support::{self, condition, eventually};

const USER: &str = "system:serviceaccount:rbac:droid-pool-operator";

#[tokio::test]
async fn the_published_cluster_role_is_enough() {
    let admin = support::client().await;
    support::install_crd(&admin).await;
    let ns = support::namespace(&admin, "rbac").await;
    let text = include_str!("../../deploy/operator/clusterrole.yaml");
    let mut role: ClusterRole = serde_yaml::from_str(text).expect("ClusterRole YAML");
    role.metadata.name = Some("droid-pool-operator-rbac-test".into());
    Api::<ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &role)
        .await
        .expect("create ClusterRole");
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "droid-pool-operator-rbac-test"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "droid-pool-operator-rbac-test"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}]
    }))
    .expect("binding");
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("create ClusterRoleBinding");
    for (name, key) in [("db-cred", "password"), ("users", "app")] {
        let s: Secret = serde_json::from_value(json!({
            "metadata": {"name": name}, "stringData": {key: "x"}
        }))
        .expect("secret");
        Api::<Secret>::namespaced(admin.clone(), &ns)
            .create(&PostParams::default(), &s)
            .await
            .expect("secret");
    }

    let client = support::client_as(USER).await;
    // Sanity: the impersonated user really is limited (it may not list Secrets).
    let denied = Api::<Secret>::namespaced(client.clone(), &ns)
        .list(&Default::default())
        .await;
    assert!(
        matches!(denied, Err(kube::Error::Api(ref s)) if s.code == 403),
        "{denied:?}"
    );

    let elector = Elector::new(
        client.clone(),
        LeaseConfig::new(ns.clone(), "droid-pool-operator".into(), "op".into()),
    );
    assert!(elector
        .try_acquire_or_renew()
        .await
        .expect("take the Lease"));
    assert!(elector
        .try_acquire_or_renew()
        .await
        .expect("renew the Lease"));
    elector.release().await.expect("release the Lease");

    let metrics = Arc::new(Metrics::new().expect("metrics"));
    let ctx = controller::context(client.clone(), metrics, Some("op".into()), support::allow())
        .await
        .expect("context");
    let stop = CancellationToken::new();
    let stop2 = stop.clone();
    // All namespaces, as the operator runs by default.
    let task = tokio::spawn(async move { controller::run(ctx, None, stop2).await });
    support::create(
        &admin,
        &ns,
        json!({
            "apiVersion": "droidpool.io/v1alpha1", "kind": "PoolConfig",
            "metadata": {"name": "orders"},
            "spec": {"poolSize": 3, "server": {"host": "db", "passwordSecret": {"name": "db-cred"}},
                     "clientAuth": {"passwordsSecret": "users"},
                     "target": {"deployment": {"replicas": 2,
                                               "podDisruptionBudget": {"enabled": false}}}}
        }),
    )
    .await;
    let api = Api::<PoolConfig>::namespaced(admin.clone(), &ns);
    let pc = eventually("reconciled as the operator's user", || async {
        let pc = api.get("orders").await.ok()?;
        (condition(&pc, "ConfigRendered")?.1 == "Rendered").then_some(pc)
    })
    .await;
    assert_eq!(
        condition(&pc, "Degraded"),
        Some(("False".into(), "AsExpected".into()))
    );
    assert!(Api::<Deployment>::namespaced(admin.clone(), &ns)
        .get("orders")
        .await
        .is_ok());
    assert!(Api::<Service>::namespaced(admin.clone(), &ns)
        .get("orders")
        .await
        .is_ok());
    assert!(Api::<ConfigMap>::namespaced(admin.clone(), &ns)
        .get("orders-config")
        .await
        .is_ok());
    // Turning the PDB on exercises create; off again exercises delete.
    for enabled in [true, false] {
        let patch = json!({"spec": {"target": {"deployment": {"replicas": 2,
            "podDisruptionBudget": {"enabled": enabled}}}}});
        api.patch(
            "orders",
            &Default::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .expect("toggle PDB");
        let gen = api.get("orders").await.expect("get").metadata.generation;
        eventually("PDB toggle reconciled without failure", || async {
            let pc = api.get("orders").await.ok()?;
            let st = pc.status.as_ref()?;
            (st.observed_generation == gen
                && condition(&pc, "Degraded") == Some(("False".into(), "AsExpected".into())))
            .then_some(())
        })
        .await;
    }
    // A switch to sidecars deletes the deployed poolers (the delete verbs).
    let patch = json!({"spec": {"target": {"deployment": null,
                                           "sidecar": {"configMapName": "orders-sidecar"}}}});
    api.patch(
        "orders",
        &Default::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .expect("switch target");
    let deployments = Api::<Deployment>::namespaced(admin.clone(), &ns);
    let services = Api::<Service>::namespaced(admin.clone(), &ns);
    eventually(
        "deployed poolers removed as the operator's user",
        || async {
            let gone = deployments.get_opt("orders").await.ok()?.is_none()
                && services.get_opt("orders").await.ok()?.is_none();
            gone.then_some(())
        },
    )
    .await;
    stop.cancel();
    task.await.expect("controller stops");
}
