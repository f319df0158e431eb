//! `spec.server.cloudNativePG` against the real API server: the operator renders the Cluster's
//! `NAME-rw` Service for read-write aliases and `NAME-ro` for read-only ones, and while the
//! Cluster's `status.targetPrimary` differs from its `status.currentPrimary` (a switchover) it
//! publishes the pools as held (`failover.hold_timeout` in the ConfigMap, condition
//! `Switchover` True) while `Ready` stays True.
//!
//! No CloudNativePG controller runs here: the test creates a `Cluster` and patches its status as
//! CloudNativePG would during a switchover. The CRD installed is the stand-in
//! `cnpg-cluster-crd-minimal.yaml` (same group, version, kind and status fields as
//! CloudNativePG v1.30's): the 1.20 test server rejects the real v1.30 CRD's schema defaults.

use droid_pool::operator::cnpg::cluster_resource;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::{self, condition, eventually, Running};

const CRD: &str = include_str!("cnpg-cluster-crd-minimal.yaml");

async fn install_cluster_crd(client: &kube::Client) {
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    let crd: CustomResourceDefinition = serde_yaml::from_str(CRD).expect("the stand-in CRD");
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("install the Cluster CRD: {e}"),
    }
    eventually("the Cluster CRD established", || async {
        let c = crds.get("clusters.postgresql.cnpg.io").await.ok()?;
        c.status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
            .then_some(())
    })
    .await;
}

/// Sets the Cluster's status as CloudNativePG would.
async fn set_status(api: &Api<DynamicObject>, current: &str, target: &str, phase: &str) {
    let status = json!({"status": {"currentPrimary": current, "targetPrimary": target,
                                   "phase": phase, "instances": 2}});
    api.patch_status("pg", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("patch the Cluster's status");
}

/// The rendered config as YAML, once `pred` holds for it.
async fn config_when(cms: &Api<ConfigMap>, what: &str, pred: impl Fn(&str) -> bool) -> String {
    eventually(what, || async {
        let cm = cms.get_opt("app-pool").await.ok()??;
        let yaml = cm.data?.get("droid-pool.yaml")?.clone();
        pred(&yaml).then_some(yaml)
    })
    .await
}

#[tokio::test]
async fn cloudnativepg_services_by_role_and_held_through_a_switchover() {
    let client = support::client().await;
    support::install_crd(&client).await;
    install_cluster_crd(&client).await;
    let ns = support::namespace(&client, "cnpg").await;
    let clusters = Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &cluster_resource());
    let cluster: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
        "metadata": {"name": "pg"}, "spec": {"instances": 2}
    }))
    .expect("Cluster");
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .expect("create the Cluster");
    set_status(&clusters, "pg-1", "pg-1", "Cluster in healthy state").await;
    let running = Running::start(&client, &ns).await;
    support::create(
        &client,
        &ns,
        json!({
            "apiVersion": "droidpool.io/v1alpha1", "kind": "PoolConfig",
            "metadata": {"name": "app"},
            "spec": {
                "poolSize": 5,
                "server": {"cloudNativePG": {"cluster": "pg"}},
                "failover": {"holdTimeout": "20s"},
                "databases": {
                    "app": {"targetSessionAttrs": "read-write"},
                    "app_ro": {"dbname": "app", "targetSessionAttrs": "read-only"},
                    "app_reads": {"dbname": "app", "targetSessionAttrs": "prefer-standby"}
                },
                "target": {"sidecar": {"configMapName": "app-pool"}}
            }
        }),
    )
    .await;
    let cms = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    let pcs = Api::<droid_pool::operator::crd::PoolConfig>::namespaced(client.clone(), &ns);
    let stable = config_when(&cms, "the rendered config", |y| y.contains("pg-rw")).await;
    let cfg =
        droid_pool::config::Config::from_yaml(&stable, "cm".as_ref()).expect("a pooler config");
    cfg.validate().expect("a valid pooler config");
    assert_eq!(cfg.server.host, "pg-rw");
    assert_eq!(cfg.databases["app"].hosts, ["pg-rw:5432"]);
    assert_eq!(cfg.databases["app_ro"].hosts, ["pg-ro:5432"]);
    assert_eq!(
        cfg.databases["app_reads"].hosts,
        ["pg-ro:5432", "pg-rw:5432"]
    );
    assert!(
        !stable.contains("hold_timeout"),
        "not held while stable:\n{stable}"
    );
    eventually("Switchover False, Ready True", || async {
        let pc = pcs.get("app").await.ok()?;
        let sw = condition(&pc, "Switchover")?;
        (sw == ("False".into(), "Stable".into()) && condition(&pc, "Ready")?.0 == "True")
            .then_some(())
    })
    .await;

    // CloudNativePG starts a switchover: targetPrimary moves first.
    set_status(&clusters, "pg-1", "pg-2", "Switchover in progress").await;
    let held = config_when(&cms, "the held config", |y| y.contains("hold_timeout: 20s")).await;
    let cfg = droid_pool::config::Config::from_yaml(&held, "cm".as_ref()).expect("a pooler config");
    assert_eq!(
        cfg.failover.hold_timeout,
        std::time::Duration::from_secs(20)
    );
    eventually("Switchover True while Ready stays True", || async {
        let pc = pcs.get("app").await.ok()?;
        let (status, reason) = condition(&pc, "Switchover")?;
        let ready = condition(&pc, "Ready")?;
        assert_eq!(ready.0, "True", "Ready during the switchover: {ready:?}");
        (status == "True" && reason == "SwitchoverInProgress").then_some(())
    })
    .await;

    // The new primary is in place: the hold goes.
    set_status(&clusters, "pg-2", "pg-2", "Cluster in healthy state").await;
    config_when(&cms, "the config without the hold", |y| {
        !y.contains("hold_timeout")
    })
    .await;
    eventually("Switchover False again", || async {
        let pc = pcs.get("app").await.ok()?;
        (condition(&pc, "Switchover")?.0 == "False").then_some(())
    })
    .await;
    running.stop().await;
}
