//! The controller, in process, against the real API server: the objects, status, Events and
//! budget recomputation it produces. No kubelet runs, so no pod ever starts: pods the tests
//! create stay Pending (they still count as sidecar poolers), and Deployments never report
//! status, so a deployment's `Ready` stays False with reason `RolloutInProgress`.

use droid_pool::config::Config;
use droid_pool::operator::crd::PoolConfig;
use droid_pool::operator::render::{fnv1a_hex, CONFIG_KEY, RESTART_CHECKSUM_ANNOTATION};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::support::{self, condition, eventually, Running};

/// The config in the ConfigMap `name`, parsed and validated as the pooler itself does.
pub(crate) async fn loaded_config(
    client: &Client,
    ns: &str,
    name: &str,
) -> Option<(Config, ConfigMap)> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .ok()??;
    let text = cm.data.as_ref()?.get(CONFIG_KEY)?.clone();
    let cfg = Config::from_yaml(&text, "configmap".as_ref()).expect("the pooler loads it");
    cfg.validate().expect("the pooler accepts it");
    Some((cfg, cm))
}

/// The pool size in the ConfigMap `name`, parsed as the pooler itself parses it.
pub(crate) async fn pool_size(client: &Client, ns: &str, name: &str) -> Option<(usize, ConfigMap)> {
    let (cfg, cm) = loaded_config(client, ns, name).await?;
    Some((cfg.pool.size, cm))
}

pub(crate) async fn get(client: &Client, ns: &str, name: &str) -> PoolConfig {
    Api::<PoolConfig>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .expect("get PoolConfig")
}

pub(crate) async fn pending_pod(client: &Client, ns: &str, name: &str, app: &str) {
    pod(client, ns, name, json!({"app": app}), json!([])).await;
}

/// A pod that stays Pending (no kubelet); with finalizers, a delete leaves it terminating.
pub(crate) async fn pod(
    client: &Client,
    ns: &str,
    name: &str,
    labels: serde_json::Value,
    finalizers: serde_json::Value,
) {
    // The label the operator's pod watch selects (the chart's sidecarPodLabels sets it).
    let mut labels = labels;
    labels[droid_pool::operator::controller::POD_LABEL] = json!("test");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels, "finalizers": finalizers},
        "spec": {"automountServiceAccountToken": false,
                 "containers": [{"name": "app", "image": "example/app:1"}]}
    }))
    .expect("pod");
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
}

pub(crate) async fn events(client: &Client, ns: &str, reason: &str) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

#[tokio::test]
async fn sidecar_configmap_follows_pool_size_and_pod_count() {
    let client = support::client().await;
    support::install_crd(&client).await;
    let ns = support::namespace(&client, "sidecar").await;
    let op = Running::start(&client, &ns).await;
    let pc = support::create(
        &client,
        &ns,
        json!({
            "apiVersion": "droidpool.io/v1alpha1", "kind": "PoolConfig",
            "metadata": {"name": "web"},
            "spec": {"maxServerConnections": 10, "mode": "transaction",
                     "server": {"host": "db.example"},
                     "target": {"sidecar": {"configMapName": "web-pool",
                                            "podSelector": {"matchLabels": {"app": "web"}}}}}
        }),
    )
    .await;

    // No pod yet: the budget is split over one pooler.
    let (size, cm) = eventually("ConfigMap with pool size 10", || async {
        pool_size(&client, &ns, "web-pool")
            .await
            .filter(|(s, _)| *s == 10)
    })
    .await;
    assert_eq!(size, 10);
    let owner = &cm.metadata.owner_references.as_ref().expect("owned")[0];
    assert_eq!(
        (owner.kind.as_str(), Some(owner.uid.as_str())),
        ("PoolConfig", pc.uid().as_deref())
    );
    let managers: Vec<_> = cm
        .managed_fields()
        .iter()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert_eq!(managers, ["droid-pool-operator"]);
    let stored = eventually("status Ready", || async {
        let pc = get(&client, &ns, "web").await;
        (condition(&pc, "Ready") == Some(("True".into(), "ConfigPublished".into()))).then_some(pc)
    })
    .await;
    let status = stored.status.clone().expect("status");
    let data = &cm.data.as_ref().expect("data")[CONFIG_KEY];
    assert_eq!(
        status.config_hash.as_deref(),
        Some(fnv1a_hex(data.as_bytes()).as_str())
    );
    assert_eq!(status.applied_pool_size, Some(10));
    assert_eq!(status.observed_generation, stored.metadata.generation);
    assert_eq!(
        condition(&stored, "ConfigRendered"),
        Some(("True".into(), "Rendered".into()))
    );
    assert_eq!(
        condition(&stored, "Degraded"),
        Some(("False".into(), "AsExpected".into()))
    );

    // Three selected pods (Pending forever: no kubelet) and one that is not selected.
    for name in ["web-1", "web-2", "web-3"] {
        pending_pod(&client, &ns, name, "web").await;
    }
    pending_pod(&client, &ns, "api-1", "api").await;
    eventually("pool size floor(10/3) = 3", || async {
        pool_size(&client, &ns, "web-pool")
            .await
            .filter(|(s, _)| *s == 3)
    })
    .await;
    Api::<Pod>::namespaced(client.clone(), &ns)
        .delete("web-3", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete pod");
    eventually("pool size floor(10/2) = 5", || async {
        pool_size(&client, &ns, "web-pool")
            .await
            .filter(|(s, _)| *s == 5)
    })
    .await;

    // A fixed poolSize replaces the budget: the same ConfigMap gets the new size.
    let patch = json!({"spec": {"maxServerConnections": null, "poolSize": 7}});
    Api::<PoolConfig>::namespaced(client.clone(), &ns)
        .patch("web", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch spec");
    eventually("pool size 7", || async {
        pool_size(&client, &ns, "web-pool")
            .await
            .filter(|(s, _)| *s == 7)
    })
    .await;
    // The recorder folds repeats of one reason into an Event series: count occurrences.
    let updates = eventually("4 ConfigUpdated occurrences (10, 3, 5, 7)", || async {
        let e = events(&client, &ns, "ConfigUpdated").await;
        let seen: i32 = e
            .iter()
            .map(|e| e.series.as_ref().map_or(1, |s| s.count))
            .sum();
        (seen >= 4).then_some(e)
    })
    .await;
    assert!(updates.iter().all(|e| e.type_.as_deref() == Some("Normal")));
    assert!(updates
        .iter()
        .all(|e| e.reporting_controller.as_deref() == Some("droid-pool-operator")));
    let text = op.metrics.render();
    assert!(
        text.contains("droid_pool_operator_reconciliations_total{result=\"ok\"}"),
        "{text}"
    );
    op.stop().await;
}

pub(crate) fn deployed(name: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut spec = json!({
        "maxServerConnections": 12,
        "server": {"host": "db.example", "passwordSecret": {"name": "db-cred"}},
        "clientAuth": {"method": "scram-sha-256", "passwordsSecret": "pooler-users"},
        "drain": {"timeout": "40s"},
        "target": {"deployment": {"image": "example/droid-pool:test"}}
    });
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    json!({"apiVersion": "droidpool.io/v1alpha1", "kind": "PoolConfig",
           "metadata": {"name": name}, "spec": spec})
}

pub(crate) async fn secret(client: &Client, ns: &str, name: &str, key: &str) {
    let s: Secret = serde_json::from_value(json!({
        "metadata": {"name": name}, "stringData": {key: "not-logged"}
    }))
    .expect("secret");
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &s)
        .await
        .expect("create secret");
}

/// A fresh namespace holding the Secrets `deployed` names, and a controller watching it.
pub(crate) async fn with_secrets(client: &Client, name: &str) -> (String, Running) {
    support::install_crd(client).await;
    let ns = support::namespace(client, name).await;
    secret(client, &ns, "db-cred", "password").await;
    secret(client, &ns, "pooler-users", "app").await;
    let op = Running::start(client, &ns).await;
    (ns, op)
}

/// Waits until the ConfigMap `cm` holds pool size `want`.
pub(crate) async fn wait_pool_size(client: &Client, ns: &str, cm: &str, want: usize) {
    eventually(&format!("{cm}: pool size {want}"), || async {
        pool_size(client, ns, cm).await.filter(|(s, _)| *s == want)
    })
    .await;
}

#[tokio::test]
async fn deployment_target_and_replica_changes() {
    let client = support::client().await;
    let (ns, op) = with_secrets(&client, "deployed").await;
    let pc = support::create(&client, &ns, deployed("orders", json!({}))).await;

    let deploys = Api::<Deployment>::namespaced(client.clone(), &ns);
    let d = eventually("Deployment", || async {
        deploys.get_opt("orders").await.ok()?
    })
    .await;
    let owner = &d.metadata.owner_references.as_ref().expect("owned")[0];
    assert_eq!(Some(owner.uid.clone()), pc.uid());
    let spec = d.spec.clone().expect("spec");
    let pod = spec.template.spec.clone().expect("pod spec");
    assert_eq!(pod.termination_grace_period_seconds, Some(45));
    assert_eq!(
        pod.containers[0].image.as_deref(),
        Some("example/droid-pool:test")
    );
    let checksum = spec
        .template
        .metadata
        .clone()
        .expect("meta")
        .annotations
        .expect("annotations")[RESTART_CHECKSUM_ANNOTATION]
        .clone();
    // Applied after the Deployment, in the same reconciliation: it may not be there yet.
    let services = Api::<Service>::namespaced(client.clone(), &ns);
    let svc = eventually("Service", || async {
        services.get_opt("orders").await.ok()?
    })
    .await;
    assert_eq!(svc.spec.expect("spec").ports.expect("ports")[0].port, 6432);
    // Kubernetes 1.20 serves PodDisruptionBudget only as policy/v1beta1: discovery chose it.
    let gvk = GroupVersionKind::gvk("policy", "v1beta1", "PodDisruptionBudget");
    let pdbs =
        Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &ApiResource::from_gvk(&gvk));
    let pdb = eventually("PDB", || async { pdbs.get_opt("orders").await.ok()? }).await;
    assert_eq!(pdb.data["spec"]["maxUnavailable"], 1);
    assert_eq!(
        pdb.metadata.owner_references.expect("owned")[0].name,
        "orders"
    );

    // Replicas unset: the Deployment was created with 1, so the budget is 12 per pod.
    eventually("pool size 12", || async {
        pool_size(&client, &ns, "orders-config")
            .await
            .filter(|(s, _)| *s == 12)
    })
    .await;
    // The status is written after the ConfigMap. No kubelet or controller-manager runs, so the
    // rollout never completes: Ready settles at False, RolloutInProgress. (A transient API error
    // on a first attempt shows as ApplyFailed until the retry; it must not stay.)
    eventually("Ready False RolloutInProgress", || async {
        let c = condition(&get(&client, &ns, "orders").await, "Ready")?;
        (c == ("False".to_string(), "RolloutInProgress".to_string())).then_some(())
    })
    .await;

    // An autoscaler (another field manager) scales to 4: the ConfigMap follows, the pods'
    // template does not change (no restart), and the operator does not scale back.
    deploys
        .patch(
            "orders",
            &PatchParams::apply("hpa-stand-in").force(),
            &Patch::Apply(json!({"apiVersion": "apps/v1", "kind": "Deployment",
                                    "spec": {"replicas": 4}})),
        )
        .await
        .expect("scale");
    eventually("pool size floor(12/4) = 3", || async {
        pool_size(&client, &ns, "orders-config")
            .await
            .filter(|(s, _)| *s == 3)
    })
    .await;
    let d = deploys.get("orders").await.expect("Deployment");
    assert_eq!(d.spec.as_ref().and_then(|s| s.replicas), Some(4));
    let tmpl = d
        .spec
        .expect("spec")
        .template
        .metadata
        .expect("meta")
        .annotations
        .expect("ann");
    assert_eq!(tmpl[RESTART_CHECKSUM_ANNOTATION], checksum);
    let stored = eventually("status replicas 4", || async {
        let pc = get(&client, &ns, "orders").await;
        (pc.status.as_ref()?.replicas == Some(4)).then_some(pc)
    })
    .await;
    assert_eq!(stored.status.expect("status").applied_pool_size, Some(3));

    // Switching to sidecars removes the deployed poolers: left running they would hold
    // connections outside the budget.
    let patch = json!({"spec": {"target": {"deployment": null, "sidecar": {
        "configMapName": "orders-sidecar", "podSelector": {"matchLabels": {"app": "orders"}}}}}});
    Api::<PoolConfig>::namespaced(client.clone(), &ns)
        .patch("orders", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("switch target");
    eventually("Deployment, Service and PDB removed", || async {
        let gone = deploys.get_opt("orders").await.ok()?.is_none()
            && Api::<Service>::namespaced(client.clone(), &ns)
                .get_opt("orders")
                .await
                .ok()?
                .is_none()
            && pdbs.get_opt("orders").await.ok()?.is_none();
        gone.then_some(())
    })
    .await;
    eventually("sidecar ConfigMap", || async {
        pool_size(&client, &ns, "orders-sidecar").await
    })
    .await;
    op.stop().await;
}
