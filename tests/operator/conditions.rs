//! Conditions for what needs a human, against the real API server: a missing Secret (and its
//! recovery without a spec change) and a budget smaller than the pod count. No kubelet runs:
//! the pods created here stay Pending forever and count as sidecar poolers.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use serde_json::json;

use crate::reconcile::{deployed, events, get, pending_pod, pool_size, secret};
use crate::support::{self, condition, eventually, Running};

#[tokio::test]
async fn missing_secret_is_a_condition_then_recovers() {
    let client = support::client().await;
    support::install_crd(&client).await;
    let ns = support::namespace(&client, "nosecret").await;
    let op = Running::start(&client, &ns).await;
    support::create(&client, &ns, deployed("orders", json!({}))).await;
    let stored = eventually("SecretNotFound", || async {
        let pc = get(&client, &ns, "orders").await;
        (condition(&pc, "ConfigRendered") == Some(("False".into(), "SecretNotFound".into())))
            .then_some(pc)
    })
    .await;
    assert_eq!(
        condition(&stored, "Degraded"),
        Some(("True".into(), "SecretNotFound".into()))
    );
    let warn = eventually("Warning event", || async {
        events(&client, &ns, "SecretNotFound")
            .await
            .into_iter()
            .next()
    })
    .await;
    assert_eq!(warn.type_.as_deref(), Some("Warning"));
    assert!(warn.note.unwrap_or_default().contains("db-cred"));
    // Nothing is deployed that could not start.
    let deploys = Api::<Deployment>::namespaced(client.clone(), &ns);
    assert!(deploys.get_opt("orders").await.expect("get").is_none());

    secret(&client, &ns, "db-cred", "password").await;
    secret(&client, &ns, "pooler-users", "app").await;
    eventually("recovered without a spec change", || async {
        let pc = get(&client, &ns, "orders").await;
        (condition(&pc, "ConfigRendered") == Some(("True".into(), "Rendered".into()))).then_some(())
    })
    .await;
    assert!(deploys.get_opt("orders").await.expect("get").is_some());
    // The Secret's value appears in no status, event or ConfigMap.
    let pc = serde_json::to_string(&get(&client, &ns, "orders").await).expect("json");
    let cm = serde_json::to_string(
        &Api::<ConfigMap>::namespaced(client.clone(), &ns)
            .get("orders-config")
            .await
            .expect("cm"),
    )
    .expect("json");
    let ev = serde_json::to_string(&events(&client, &ns, "ConfigUpdated").await).expect("json");
    for text in [pc, cm, ev] {
        assert!(!text.contains("not-logged"));
    }
    op.stop().await;
}

#[tokio::test]
async fn a_budget_smaller_than_the_pods_is_degraded_not_zero() {
    let client = support::client().await;
    support::install_crd(&client).await;
    let ns = support::namespace(&client, "overbudget").await;
    for name in ["w-1", "w-2", "w-3"] {
        pending_pod(&client, &ns, name, "w").await;
    }
    let op = Running::start(&client, &ns).await;
    support::create(
        &client,
        &ns,
        json!({
            "apiVersion": "droidpool.io/v1alpha1", "kind": "PoolConfig",
            "metadata": {"name": "w"},
            "spec": {"maxServerConnections": 2, "server": {"host": "db"},
                     "target": {"sidecar": {"configMapName": "w-pool",
                                            "podSelector": {"matchLabels": {"app": "w"}}}}}
        }),
    )
    .await;
    let pc = eventually("BudgetExceeded", || async {
        let pc = get(&client, &ns, "w").await;
        (condition(&pc, "Degraded") == Some(("True".into(), "BudgetExceeded".into()))).then_some(pc)
    })
    .await;
    // Each pooler still gets one connection: 3 in total, above the budget of 2, and said so.
    assert_eq!(
        pc.status.as_ref().and_then(|s| s.applied_pool_size),
        Some(1)
    );
    assert_eq!(pc.status.as_ref().and_then(|s| s.replicas), Some(3));
    assert_eq!(
        pool_size(&client, &ns, "w-pool").await.map(|(s, _)| s),
        Some(1)
    );
    assert_eq!(
        condition(&pc, "Ready"),
        Some(("True".into(), "ConfigPublished".into()))
    );
    let warn = eventually("BudgetExceeded event", || async {
        events(&client, &ns, "BudgetExceeded")
            .await
            .into_iter()
            .next()
    })
    .await;
    assert_eq!(warn.type_.as_deref(), Some("Warning"));
    op.stop().await;
}
