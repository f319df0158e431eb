//! What a production cluster needs of the operator, against the real API server (1.20): no
//! takeover of same-named objects, a `Ready` that waits for the rollout, terminating pods
//! counted in the budget, and the pooler pods' security settings. No controller-manager runs,
//! so the tests write the Deployment's status themselves, as its controller would.

use droid_pool::operator::crd::PoolConfig;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service, ServiceAccount};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::reconcile::{deployed, events, get, pod, wait_pool_size, with_secrets};
use crate::support::{self, condition, eventually};

/// A watch event for the PoolConfig without a spec change (a fresh reconciliation).
async fn poke(client: &Client, ns: &str, name: &str, n: u32) {
    let patch = json!({"metadata": {"annotations": {"test/poke": n.to_string()}}});
    Api::<PoolConfig>::namespaced(client.clone(), ns)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("annotate PoolConfig");
}

async fn user_service(client: &Client, ns: &str, name: &str) -> Service {
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"selector": {"app": "users-own-app"},
                 "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}
    }))
    .expect("service");
    Api::<Service>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &svc)
        .await
        .expect("create the user's Service")
}

#[tokio::test]
async fn a_name_conflict_applies_nothing_and_leaves_the_object_alone() {
    let client = support::client().await;
    let (ns, op) = with_secrets(&client, "conflict").await;
    let before = user_service(&client, &ns, "web").await;
    support::create(&client, &ns, deployed("web", json!({}))).await;
    let pc = eventually("NameConflict", || async {
        let pc = get(&client, &ns, "web").await;
        (condition(&pc, "Degraded") == Some(("True".into(), "NameConflict".into()))).then_some(pc)
    })
    .await;
    assert_eq!(
        condition(&pc, "Stalled"),
        Some(("True".into(), "NameConflict".into()))
    );
    assert_eq!(condition(&pc, "Ready").map(|c| c.0), Some("False".into()));
    let warn = eventually("NameConflict event", || async {
        events(&client, &ns, "NameConflict")
            .await
            .into_iter()
            .next()
    })
    .await;
    assert_eq!(warn.type_.as_deref(), Some("Warning"));
    assert!(warn.note.unwrap_or_default().contains("Service web"));
    // The user's Service is exactly as it was: no new field, owner or field manager.
    let after = Api::<Service>::namespaced(client.clone(), &ns)
        .get("web")
        .await
        .expect("Service");
    assert_eq!(after.spec, before.spec);
    assert_eq!(after.metadata.owner_references, None);
    assert_eq!(after.resource_version(), before.resource_version());
    // And nothing else was applied either (the ConfigMap comes first when names are free).
    assert!(Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .get_opt("web-config")
        .await
        .expect("get")
        .is_none());
    assert!(Api::<Deployment>::namespaced(client.clone(), &ns)
        .get_opt("web")
        .await
        .expect("get")
        .is_none());

    // The user's Service goes: the next reconciliation deploys.
    Api::<Service>::namespaced(client.clone(), &ns)
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete Service");
    poke(&client, &ns, "web", 1).await;
    eventually("deployed after the conflict went away", || async {
        let pc = get(&client, &ns, "web").await;
        let free = condition(&pc, "Degraded") == Some(("False".into(), "AsExpected".into()));
        let svc = Api::<Service>::namespaced(client.clone(), &ns)
            .get_opt("web")
            .await
            .ok()??;
        (free && svc.owner_references().len() == 1).then_some(())
    })
    .await;

    // A sidecar target whose configMapName is a user's ConfigMap: refused the same way.
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "app-settings"}, "data": {"mine": "yes"}
    }))
    .expect("cm");
    let cms = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    cms.create(&PostParams::default(), &cm)
        .await
        .expect("create");
    support::create(
        &client,
        &ns,
        json!({"apiVersion": "droidpool.io/v1alpha1", "kind": "PoolConfig",
               "metadata": {"name": "side"},
               "spec": {"poolSize": 3, "server": {"host": "db"},
                        "target": {"sidecar": {"configMapName": "app-settings"}}}}),
    )
    .await;
    eventually("sidecar NameConflict", || async {
        let pc = get(&client, &ns, "side").await;
        (condition(&pc, "Degraded") == Some(("True".into(), "NameConflict".into()))).then_some(())
    })
    .await;
    let kept = cms.get("app-settings").await.expect("cm");
    assert_eq!(kept.data, cm.data);
    assert_eq!(kept.metadata.owner_references, None);
    op.stop().await;
}

/// The Deployment's status as its controller would write it.
async fn deployment_status(client: &Client, ns: &str, name: &str, status: serde_json::Value) {
    Api::<Deployment>::namespaced(client.clone(), ns)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "status": status })),
        )
        .await
        .expect("patch Deployment status");
}

#[tokio::test]
async fn ready_waits_for_the_rollout_to_complete() {
    let client = support::client().await;
    let (ns, op) = with_secrets(&client, "rollout").await;
    let extra =
        json!({"target": {"deployment": {"image": "example/droid-pool:test", "replicas": 3}}});
    support::create(&client, &ns, deployed("orders", extra)).await;
    let deploys = Api::<Deployment>::namespaced(client.clone(), &ns);
    let d = eventually("Deployment", || async {
        deploys.get_opt("orders").await.ok()?
    })
    .await;
    let generation = d.metadata.generation.expect("generation");

    // Every pod ready, but only one of the new template: old pods still serve.
    deployment_status(
        &client,
        &ns,
        "orders",
        json!({"observedGeneration": generation, "replicas": 3, "updatedReplicas": 1,
               "readyReplicas": 3, "availableReplicas": 3}),
    )
    .await;
    let pc = eventually("RolloutInProgress", || async {
        let pc = get(&client, &ns, "orders").await;
        let msg = pc
            .status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")?;
        (msg.reason == "RolloutInProgress" && msg.message.contains("1/3 pooler pods updated"))
            .then_some(pc)
    })
    .await;
    assert_eq!(condition(&pc, "Ready").map(|c| c.0), Some("False".into()));
    assert_eq!(
        condition(&pc, "Reconciling"),
        Some(("True".into(), "RolloutInProgress".into()))
    );

    // All updated and available, but the controller has not seen the newest generation.
    deployment_status(
        &client,
        &ns,
        "orders",
        json!({"observedGeneration": generation - 1, "replicas": 3, "updatedReplicas": 3,
               "readyReplicas": 3, "availableReplicas": 3}),
    )
    .await;
    eventually("not seen yet", || async {
        let pc = get(&client, &ns, "orders").await;
        let c = pc
            .status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")?
            .clone();
        (c.status == "False" && c.message.contains("not seen")).then_some(())
    })
    .await;

    // The rollout completed: Ready, and no longer Reconciling.
    deployment_status(
        &client,
        &ns,
        "orders",
        json!({"observedGeneration": generation, "replicas": 3, "updatedReplicas": 3,
               "readyReplicas": 3, "availableReplicas": 3}),
    )
    .await;
    let pc = eventually("PoolersReady", || async {
        let pc = get(&client, &ns, "orders").await;
        (condition(&pc, "Ready") == Some(("True".into(), "PoolersReady".into()))).then_some(pc)
    })
    .await;
    assert_eq!(
        condition(&pc, "Reconciling"),
        Some(("False".into(), "Applied".into()))
    );
    assert_eq!(
        condition(&pc, "Stalled"),
        Some(("False".into(), "AsExpected".into()))
    );
    assert_eq!(
        pc.status.as_ref().and_then(|s| s.observed_generation),
        pc.metadata.generation
    );
    // The gauge is set after the status is written: a reader may see the status first.
    let ready = format!(
        "droid_pool_operator_poolconfig_condition{{namespace=\"{ns}\",poolconfig=\"orders\",type=\"Ready\"}} 1"
    );
    eventually("the Ready gauge at 1", || async {
        op.metrics.render().contains(&ready).then_some(())
    })
    .await;

    // The pooler pods: restricted Pod Security settings, their own ServiceAccount, no token.
    let d = deploys.get("orders").await.expect("Deployment");
    let pod = d.spec.expect("spec").template.spec.expect("pod spec");
    assert_eq!(pod.service_account_name.as_deref(), Some("orders-pooler"));
    assert_eq!(pod.automount_service_account_token, Some(false));
    let psc = pod.security_context.expect("pod security context");
    assert_eq!(psc.run_as_non_root, Some(true));
    assert_eq!(
        psc.seccomp_profile.map(|p| p.type_),
        Some("RuntimeDefault".into())
    );
    for c in &pod.containers {
        let sc = c
            .security_context
            .clone()
            .expect("container security context");
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(
            sc.capabilities.and_then(|c| c.drop),
            Some(vec!["ALL".to_string()])
        );
        let ready = c.readiness_probe.clone().expect("readiness probe");
        assert!(ready.failure_threshold.unwrap_or(3) >= 3);
    }
    let sa = Api::<ServiceAccount>::namespaced(client.clone(), &ns)
        .get("orders-pooler")
        .await
        .expect("the poolers' ServiceAccount");
    assert_eq!(sa.automount_service_account_token, Some(false));
    assert_eq!(sa.owner_references().len(), 1);
    op.stop().await;
}

/// A pod with a finalizer: deleted, it stays (terminating) until the finalizer is removed,
/// as a draining pooler's pod does until its grace period ends.
async fn held_pod(client: &Client, ns: &str, name: &str, labels: serde_json::Value) {
    pod(client, ns, name, labels, json!(["test.droidpool.io/hold"])).await;
}

async fn release(client: &Client, ns: &str, name: &str) {
    let patch = json!({"metadata": {"finalizers": null}});
    Api::<Pod>::namespaced(client.clone(), ns)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("remove finalizer");
}

#[tokio::test]
async fn terminating_pods_still_count_against_the_budget() {
    let client = support::client().await;
    let (ns, op) = with_secrets(&client, "terminating").await;
    support::create(
        &client,
        &ns,
        json!({"apiVersion": "droidpool.io/v1alpha1", "kind": "PoolConfig",
               "metadata": {"name": "w"},
               "spec": {"maxServerConnections": 12, "server": {"host": "db"},
                        "target": {"sidecar": {"configMapName": "w-pool",
                                               "podSelector": {"matchLabels": {"app": "w"}}}}}}),
    )
    .await;
    for name in ["w-1", "w-2", "w-3"] {
        held_pod(&client, &ns, name, json!({"app": "w"})).await;
    }
    wait_pool_size(&client, &ns, "w-pool", 4).await;
    // w-3 is deleted but still terminating, and a replacement starts: four poolers hold
    // connections at once, so each gets 12/4.
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    pods.delete("w-3", &DeleteParams::default())
        .await
        .expect("delete");
    held_pod(&client, &ns, "w-4", json!({"app": "w"})).await;
    wait_pool_size(&client, &ns, "w-pool", 3).await;
    // w-3 has exited: three remain.
    release(&client, &ns, "w-3").await;
    wait_pool_size(&client, &ns, "w-pool", 4).await;
    for name in ["w-1", "w-2", "w-4"] {
        release(&client, &ns, name).await;
    }

    // A deployment: pods carrying its selector labels count, terminating or not, when there
    // are more of them than replicas (a rollout's surge, or old pods draining).
    let extra =
        json!({"target": {"deployment": {"image": "example/droid-pool:test", "replicas": 2}}});
    support::create(&client, &ns, deployed("orders", extra)).await;
    wait_pool_size(&client, &ns, "orders-config", 6).await;
    let labels = json!({"app.kubernetes.io/name": "droid-pool",
                        "app.kubernetes.io/instance": "orders"});
    for name in ["orders-a", "orders-b", "orders-old"] {
        held_pod(&client, &ns, name, labels.clone()).await;
    }
    pods.delete("orders-old", &DeleteParams::default())
        .await
        .expect("delete");
    poke(&client, &ns, "orders", 1).await;
    wait_pool_size(&client, &ns, "orders-config", 4).await;
    for name in ["orders-a", "orders-b", "orders-old"] {
        release(&client, &ns, name).await;
    }
    op.stop().await;
}

/// Whether a pooler answers `GET /status` on `admin` with its loaded config: not merely
/// whatever else may have taken that port.
async fn answers_status(admin: u16) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ask = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", admin))
            .await
            .ok()?;
        s.write_all(b"GET /status HTTP/1.0\r\n\r\n").await.ok()?;
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).await.ok()?;
        Some(String::from_utf8_lossy(&answer).contains("\"config_hash\""))
    };
    let wait = std::time::Duration::from_secs(2);
    matches!(tokio::time::timeout(wait, ask).await, Ok(Some(true)))
}

/// A real pooler (the `droid-pool` binary) standing in for a pod's sidecar: it loads `file`
/// and serves its admin port, where the operator asks which config it has loaded.
pub(crate) struct Pooler {
    child: std::process::Child,
    pub(crate) admin: u16,
}

impl Pooler {
    /// Starts a pooler and waits until its admin port answers. Its ports come from
    /// `free_port`, which another test may take between the probe and the pooler's bind: a
    /// pooler that exits is started again on other ports, so that a lost race is not a
    /// pooler the operator never hears from.
    pub(crate) async fn start(file: &std::path::Path) -> Pooler {
        let mut last_err = String::new();
        for _ in 0..5 {
            let admin = support::free_port();
            let port = support::free_port();
            let log = tempfile::NamedTempFile::new().expect("log file");
            let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_droid-pool"))
                .args(["--config", file.to_str().expect("path")])
                .args([
                    "--port",
                    &port.to_string(),
                    "--admin-port",
                    &admin.to_string(),
                ])
                .stdout(std::process::Stdio::null())
                .stderr(log.reopen().expect("log"))
                .spawn()
                .expect("start droid-pool");
            let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
            while tokio::time::Instant::now() < deadline {
                if child.try_wait().expect("try_wait").is_some() {
                    break;
                }
                if answers_status(admin).await && child.try_wait().expect("try_wait").is_none() {
                    return Pooler { child, admin };
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            let _ = child.kill();
            let _ = child.wait();
            last_err = std::fs::read_to_string(log.path()).unwrap_or_default();
        }
        panic!("the pooler did not start in five tries; its last stderr:\n{last_err}");
    }

    fn reload(&self) {
        let pid = self.child.id().to_string();
        let ok = std::process::Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .expect("kill")
            .success();
        assert!(ok, "SIGHUP the pooler");
    }
}

impl Drop for Pooler {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A Running pod on 127.0.0.1 whose `pooler-admin` port is `admin`, as the kubelet would
/// report it.
pub(crate) async fn running_pod(client: &Client, ns: &str, name: &str, admin: u16) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "w", "droidpool.io/poolconfig": "w"}},
        "spec": {"automountServiceAccountToken": false,
                 "containers": [{"name": "app", "image": "example/app:1",
                                 "ports": [{"name": "pooler-admin", "containerPort": admin}]}]}
    }))
    .expect("pod");
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
    let status = json!({"status": {"phase": "Running", "podIP": "127.0.0.1",
                                   "podIPs": [{"ip": "127.0.0.1"}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("pod status");
}

#[tokio::test]
async fn ready_means_every_running_pooler_loaded_the_current_config() {
    let client = support::client().await;
    let (ns, op) = with_secrets(&client, "loaded").await;
    support::create(
        &client,
        &ns,
        json!({"apiVersion": "droidpool.io/v1alpha1", "kind": "PoolConfig",
               "metadata": {"name": "w"},
               "spec": {"poolSize": 3, "server": {"host": "127.0.0.1"},
                        "target": {"sidecar": {"configMapName": "w-pool",
                                               "podSelector": {"matchLabels": {"app": "w"}}}}}}),
    )
    .await;
    wait_pool_size(&client, &ns, "w-pool", 3).await;
    let current = Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .get("w-pool")
        .await
        .expect("cm")
        .data
        .expect("data")[droid_pool::operator::render::CONFIG_KEY]
        .clone();
    // Two sidecars: one has the current file, the other an older one (pool size 2).
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b) = (dir.path().join("a.yaml"), dir.path().join("b.yaml"));
    std::fs::write(&a, &current).expect("write");
    std::fs::write(&b, current.replace("size: 3", "size: 2")).expect("write");
    let (pa, pb) = (Pooler::start(&a).await, Pooler::start(&b).await);
    running_pod(&client, &ns, "w-1", pa.admin).await;
    running_pod(&client, &ns, "w-2", pb.admin).await;
    let pc = eventually("ConfigNotLoaded 1/2", || async {
        let pc = get(&client, &ns, "w").await;
        let c = pc
            .status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")?;
        (c.reason == "ConfigNotLoaded" && c.message.starts_with("1/2 ")).then_some(pc)
    })
    .await;
    assert_eq!(condition(&pc, "Ready").map(|c| c.0), Some("False".into()));
    assert_eq!(
        condition(&pc, "Reconciling"),
        Some(("True".into(), "ConfigNotLoaded".into()))
    );
    // The kubelet's update arrives: the second pooler reloads the current file.
    std::fs::write(&b, &current).expect("write");
    pb.reload();
    let pc = eventually("ConfigLoaded", || async {
        let pc = get(&client, &ns, "w").await;
        (condition(&pc, "Ready") == Some(("True".into(), "ConfigLoaded".into()))).then_some(pc)
    })
    .await;
    let msg = &pc.status.as_ref().expect("status").conditions[0].message;
    assert!(msg.starts_with("2/2 running poolers"), "{msg}");
    assert_eq!(
        condition(&pc, "Reconciling"),
        Some(("False".into(), "Applied".into()))
    );
    op.stop().await;
}

/// The scale subresource: `kubectl scale poolcfg` (or an HPA) sets the deployment target's
/// replicas; the status gives the count and the pods' selector.
#[tokio::test]
async fn the_scale_subresource_sets_the_deployment_replicas() {
    let client = support::client().await;
    let (ns, op) = with_secrets(&client, "scale").await;
    let extra =
        json!({"target": {"deployment": {"image": "example/droid-pool:test", "replicas": 2}}});
    support::create(&client, &ns, deployed("orders", extra)).await;
    wait_pool_size(&client, &ns, "orders-config", 6).await;
    let api = Api::<PoolConfig>::namespaced(client.clone(), &ns);
    api.patch_scale(
        "orders",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"replicas": 4}})),
    )
    .await
    .expect("scale");
    let deploys = Api::<Deployment>::namespaced(client.clone(), &ns);
    eventually("Deployment scaled to 4", || async {
        let d = deploys.get_opt("orders").await.ok()??;
        (d.spec?.replicas == Some(4)).then_some(())
    })
    .await;
    wait_pool_size(&client, &ns, "orders-config", 3).await;
    let scale = eventually("scale status", || async {
        let s = api.get_scale("orders").await.ok()?;
        (s.status.as_ref()?.replicas == 4).then_some(s)
    })
    .await;
    let selector = scale.status.and_then(|s| s.selector).expect("selector");
    assert!(
        selector.contains("app.kubernetes.io/instance=orders"),
        "{selector}"
    );
    op.stop().await;
}
