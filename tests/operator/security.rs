//! Least privilege against the real API server (1.20): a PoolConfig naming an image or a
//! ServiceAccount outside the operator's allowlist is refused with a condition saying why and
//! gets nothing applied; the admin Secret is made once, owned and mounted; Secrets are looked
//! up only in the PoolConfig's own namespace. (How its token is used: `admin_token`.)

use droid_pool::operator::crd::PoolConfig;
use droid_pool::operator::policy::Allowlist;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, ServiceAccount};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::reconcile::{deployed, events, get, secret, with_secrets};
use crate::support::{self, condition, eventually, Running};

fn refused(pc: &PoolConfig, reason: &str) -> bool {
    let want = |s: &str| Some((s.to_owned(), reason.to_owned()));
    condition(pc, "Ready") == want("False")
        && condition(pc, "ConfigRendered") == want("False")
        && condition(pc, "Stalled") == want("True")
}

/// Nothing of `name`'s would-be objects exists.
async fn nothing_applied(client: &Client, ns: &str, name: &str) {
    let absent = |found: bool, what: &str| assert!(!found, "{what} of {name} was applied");
    let cms = Api::<ConfigMap>::namespaced(client.clone(), ns);
    absent(
        cms.get_opt(&format!("{name}-config"))
            .await
            .expect("get")
            .is_some(),
        "ConfigMap",
    );
    let deploys = Api::<Deployment>::namespaced(client.clone(), ns);
    absent(
        deploys.get_opt(name).await.expect("get").is_some(),
        "Deployment",
    );
    let secrets = Api::<Secret>::namespaced(client.clone(), ns);
    absent(
        secrets
            .get_opt(&format!("{name}-admin"))
            .await
            .expect("get")
            .is_some(),
        "admin Secret",
    );
    let sas = Api::<ServiceAccount>::namespaced(client.clone(), ns);
    absent(
        sas.get_opt(&format!("{name}-pooler"))
            .await
            .expect("get")
            .is_some(),
        "ServiceAccount",
    );
}

#[tokio::test]
async fn an_image_or_service_account_outside_the_allowlist_is_refused() {
    let client = support::client().await;
    support::install_crd(&client).await;
    let ns = support::namespace(&client, "allowlist").await;
    secret(&client, &ns, "db-cred", "password").await;
    secret(&client, &ns, "pooler-users", "app").await;
    // The operator's defaults: its own repository, no borrowed ServiceAccount.
    let op = Running::start_with(&client, &ns, Allowlist::restrictive()).await;
    let image = json!({"target": {"deployment": {"image": "attacker.example/exfil:latest"}}});
    support::create(&client, &ns, deployed("exfil", image)).await;
    let sa = json!({"target": {"deployment": {
        "image": "ghcr.io/droid-pool/droid-pool:0.1.0",
        "podTemplate": {"serviceAccountName": "cloud-admin"}}}});
    support::create(&client, &ns, deployed("borrow", sa)).await;
    for (name, reason, names) in [
        ("exfil", "ImageNotAllowed", "attacker.example/exfil:latest"),
        ("borrow", "ServiceAccountNotAllowed", "cloud-admin"),
    ] {
        let pc = eventually(reason, || async {
            let pc = get(&client, &ns, name).await;
            refused(&pc, reason).then_some(pc)
        })
        .await;
        let msg = &pc.status.as_ref().expect("status").conditions[0].message;
        assert!(
            msg.contains(names) && msg.contains("nothing was applied"),
            "{msg}"
        );
        assert_eq!(condition(&pc, "Degraded").map(|c| c.0), Some("True".into()));
        let warn = eventually("Warning event", || async {
            events(&client, &ns, reason).await.into_iter().next()
        })
        .await;
        assert_eq!(warn.type_.as_deref(), Some("Warning"));
        nothing_applied(&client, &ns, name).await;
    }
    // Without the borrowed account the same PoolConfig renders: its own, tokenless one.
    let patch = json!({"spec": {"target": {"deployment": {"podTemplate": null}}}});
    Api::<PoolConfig>::namespaced(client.clone(), &ns)
        .patch("borrow", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch");
    let d = eventually("borrow deployed", || async {
        Api::<Deployment>::namespaced(client.clone(), &ns)
            .get_opt("borrow")
            .await
            .ok()?
    })
    .await;
    let pod = d.spec.expect("spec").template.spec.expect("pod");
    assert_eq!(pod.service_account_name.as_deref(), Some("borrow-pooler"));
    assert_eq!(pod.automount_service_account_token, Some(false));
    op.stop().await;
}

/// The reconciliations counted so far, as the controller's metrics say.
fn reconciliations(op: &Running) -> u64 {
    op.metrics
        .render()
        .lines()
        .filter(|l| l.starts_with("droid_pool_operator_reconciliations_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// A watch event for the PoolConfig without a spec change, and waits for the reconciliation.
async fn poke(client: &Client, op: &Running, ns: &str, name: &str, n: u32) {
    let before = reconciliations(op);
    let patch = json!({"metadata": {"annotations": {"test/poke": n.to_string()}}});
    Api::<PoolConfig>::namespaced(client.clone(), ns)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("annotate");
    eventually("a further reconciliation", || async {
        (reconciliations(op) > before).then_some(())
    })
    .await;
}

pub(crate) fn token_of(s: &Secret) -> String {
    let data = s.data.as_ref().expect("data");
    String::from_utf8(data["token"].0.clone()).expect("utf-8")
}

#[tokio::test]
async fn the_admin_secret_is_made_once_owned_and_mounted() {
    let client = support::client().await;
    let (ns, op) = with_secrets(&client, "adminsecret").await;
    let pc = support::create(&client, &ns, deployed("orders", json!({}))).await;
    let secrets = Api::<Secret>::namespaced(client.clone(), &ns);
    let first = eventually("admin Secret", || async {
        secrets.get_opt("orders-admin").await.ok()?
    })
    .await;
    let owner = &first.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("PoolConfig", Some(true))
    );
    assert_eq!(Some(owner.uid.clone()), pc.uid());
    let data = first.data.clone().expect("data");
    for key in ["token", "mock-secret"] {
        let v = String::from_utf8(data[key].0.clone()).expect("utf-8");
        assert!(
            v.len() == 64 && v.bytes().all(|c| c.is_ascii_hexdigit()),
            "{key}"
        );
    }
    assert_ne!(data["token"], data["mock-secret"]);
    let d = eventually("Deployment", || async {
        Api::<Deployment>::namespaced(client.clone(), &ns)
            .get_opt("orders")
            .await
            .ok()?
    })
    .await;
    let pod: Pod = Pod {
        spec: d.spec.expect("spec").template.spec,
        ..Pod::default()
    };
    assert!(droid_pool::operator::render::mounts_admin_secret(
        &pod,
        "orders-admin"
    ));
    // Reconciled again and again: the same Secret, never rewritten.
    for n in 0..3 {
        poke(&client, &op, &ns, "orders", n).await;
    }
    let again = secrets.get("orders-admin").await.expect("Secret");
    assert_eq!(again.resource_version(), first.resource_version());
    assert_eq!(token_of(&again), token_of(&first));
    // Rotation: the Secret deleted, the next reconciliation makes new values.
    secrets
        .delete("orders-admin", &DeleteParams::default())
        .await
        .expect("delete");
    poke(&client, &op, &ns, "orders", 9).await;
    let rotated = secrets.get("orders-admin").await.expect("remade");
    assert_ne!(token_of(&rotated), token_of(&first));
    // A Secret of that name that is someone else's is left alone: nothing is applied.
    secret(&client, &ns, "taken-admin", "token").await;
    support::create(&client, &ns, deployed("taken", json!({}))).await;
    let pc = eventually("NameConflict on the admin Secret", || async {
        let pc = get(&client, &ns, "taken").await;
        refused(&pc, "NameConflict").then_some(pc)
    })
    .await;
    let msg = &pc.status.as_ref().expect("status").conditions[0].message;
    assert!(msg.contains("Secret taken-admin"), "{msg}");
    let kept = secrets.get("taken-admin").await.expect("Secret");
    assert!(kept.owner_references().is_empty());
    assert!(Api::<Deployment>::namespaced(client.clone(), &ns)
        .get_opt("taken")
        .await
        .expect("get")
        .is_none());
    op.stop().await;
}

#[tokio::test]
async fn secrets_are_looked_up_only_in_the_poolconfigs_namespace() {
    let client = support::client().await;
    support::install_crd(&client).await;
    let own = support::namespace(&client, "own-ns").await;
    let other = support::namespace(&client, "other-ns").await;
    // The Secrets exist, but in another namespace.
    secret(&client, &other, "db-cred", "password").await;
    secret(&client, &other, "pooler-users", "app").await;
    let op = Running::start(&client, &own).await;
    support::create(&client, &own, deployed("orders", json!({}))).await;
    let pc = eventually("SecretNotFound", || async {
        let pc = get(&client, &own, "orders").await;
        refused(&pc, "SecretNotFound").then_some(pc)
    })
    .await;
    let msg = &pc.status.as_ref().expect("status").conditions[0].message;
    assert!(msg.contains("Secret own-ns/db-cred not found"), "{msg}");
    // A name that is a path into another namespace is not a name: the API server refuses it.
    let mut escape = deployed("escape", json!({}));
    escape["spec"]["server"]["passwordSecret"]["name"] = json!("../../other-ns/secrets/db-cred");
    let pc: PoolConfig = serde_json::from_value(escape).expect("json");
    let err = Api::<PoolConfig>::namespaced(client.clone(), &own)
        .create(&PostParams::default(), &pc)
        .await
        .expect_err("refused by the schema");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 422 && s.message.contains("passwordSecret.name")),
        "{err:?}"
    );
    op.stop().await;
}
