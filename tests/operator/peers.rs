//! Cancel forwarding rendered by the controller against the real API server: the pooler pods
//! of a deployment with `cancelForwarding` are listed as `peers:` (id from the pod's name,
//! its IP, its name) in the ConfigMap the poolers reload, following pods as they get an
//! address and go; a PoolConfig without it gets no `peers:` key. No kubelet runs: the test
//! creates the pods and writes their status (the address) itself.

use droid_pool::config::PeerConfig;
use droid_pool::operator::render::{peer_id_of, selector_labels, CONFIG_KEY};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;

use crate::reconcile::{deployed, loaded_config, with_secrets};
use crate::support::{self, eventually};

/// The peers in ConfigMap `cm`, as the pooler parses them.
async fn peers_in(client: &Client, ns: &str, cm: &str) -> Option<Vec<PeerConfig>> {
    Some(loaded_config(client, ns, cm).await?.0.peers)
}

/// A pooler pod of PoolConfig `pc` (the Deployment's labels), with `ip` written to its status
/// as the kubelet would.
async fn pooler_pod(client: &Client, ns: &str, pc: &str, name: &str, ip: &str) {
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let labels = support_labels(pc);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"automountServiceAccountToken": false,
                 "containers": [{"name": "droid-pool", "image": "example/droid-pool:test"}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
    pods.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"podIP": ip, "podIPs": [{"ip": ip}]}})),
    )
    .await
    .expect("write the pod's address");
}

/// The labels the operator's Deployment gives its pods.
fn support_labels(pc: &str) -> serde_json::Value {
    let mut stub = droid_pool::operator::crd::PoolConfig::new(
        pc,
        serde_json::from_value(json!({"poolSize": 1, "server": {"host": "db"},
                                      "target": {"deployment": {}}}))
        .expect("spec"),
    );
    stub.metadata.namespace = Some("x".into());
    let mut labels = serde_json::to_value(selector_labels(&stub)).expect("labels");
    labels["app.kubernetes.io/managed-by"] = json!("droid-pool-operator");
    labels
}

fn peer(name: &str, ip: &str) -> PeerConfig {
    PeerConfig {
        id: peer_id_of(name),
        address: format!("{ip}:6432"),
        name: Some(name.into()),
    }
}

#[tokio::test]
async fn deployment_pods_are_rendered_as_peers() {
    let client = support::client().await;
    let (ns, op) = with_secrets(&client, "peers").await;
    let forwarding = json!({"target": {"deployment": {"image": "example/droid-pool:test",
                                                      "replicas": 2, "cancelForwarding": true}}});
    support::create(&client, &ns, deployed("orders", forwarding)).await;
    support::create(&client, &ns, deployed("plain", json!({}))).await;
    pooler_pod(&client, &ns, "orders", "orders-6f7c-aaaaa", "10.0.0.11").await;
    pooler_pod(&client, &ns, "orders", "orders-6f7c-bbbbb", "10.0.0.12").await;
    pooler_pod(&client, &ns, "plain", "plain-5d4e-ccccc", "10.0.0.13").await;

    let mut want = vec![
        peer("orders-6f7c-aaaaa", "10.0.0.11"),
        peer("orders-6f7c-bbbbb", "10.0.0.12"),
    ];
    want.sort_by_key(|p| p.id);
    eventually("both pods listed as peers", || async {
        let got = peers_in(&client, &ns, "orders-config").await?;
        (got == want).then_some(())
    })
    .await;

    // A pod going away leaves the list; the other keeps its id.
    Api::<Pod>::namespaced(client.clone(), &ns)
        .delete(
            "orders-6f7c-aaaaa",
            &DeleteParams::default().grace_period(0),
        )
        .await
        .expect("delete pod");
    let left = vec![peer("orders-6f7c-bbbbb", "10.0.0.12")];
    eventually("the deleted pod left the peers", || async {
        let got = peers_in(&client, &ns, "orders-config").await?;
        (got == left).then_some(())
    })
    .await;

    // Without cancelForwarding nothing is listed (and no `peers:` key is written).
    let plain = eventually("the plain ConfigMap", || async {
        Api::<ConfigMap>::namespaced(client.clone(), &ns)
            .get_opt("plain-config")
            .await
            .ok()?
    })
    .await;
    let text = &plain.data.expect("data")[CONFIG_KEY];
    assert!(!text.contains("peers"), "{text}");
    op.stop().await;
}
