//! Least privilege against the real API server (1.20): a PoolConfig naming an image or a
//! ServiceAccount outside the operator's allowlist is refused with a condition saying why and
//! gets nothing applied; the admin Secret is made once, owned and mounted; the operator sends
//! its token only to pooler pods that mount it; Secrets are looked up only in the
//! PoolConfig's own namespace.

use std::sync::{Arc, Mutex};

use droid_pool::operator::crd::PoolConfig;
use droid_pool::operator::policy::Allowlist;
use droid_pool::operator::render::{ADMIN_DIR, CONFIG_KEY};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, ServiceAccount};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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

fn token_of(s: &Secret) -> String {
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

/// A stand-in pooler admin port: answers `/status` as this release does (capabilities
/// included) and records each request's head.
async fn stand_in() -> (u16, Arc<Mutex<Vec<String>>>, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let heads = Arc::new(Mutex::new(Vec::new()));
    let seen = heads.clone();
    let task = tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let mut buf = vec![0u8; 8192];
            let n = s.read(&mut buf).await.unwrap_or(0);
            seen.lock()
                .expect("lock")
                .push(String::from_utf8_lossy(&buf[..n]).into_owned());
            let body = json!({"config_hash": "elsewhere",
                              "capabilities": droid_pool::config::CAPABILITIES})
            .to_string();
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = s.write_all(answer.as_bytes()).await;
        }
    });
    (port, heads, task)
}

/// A Running pod on 127.0.0.1 whose `pooler-admin` port is `admin`; with `mounted`, the
/// pooler container has Secret `w-admin` at the admin directory, as the chart's sidecar
/// helper mounts it.
async fn sidecar_pod(client: &Client, ns: &str, name: &str, admin: u16, mounted: bool) {
    let (volumes, mounts) = if mounted {
        (
            json!([{"name": "admin", "secret": {"secretName": "w-admin"}}]),
            json!([{"name": "admin", "mountPath": ADMIN_DIR, "readOnly": true}]),
        )
    } else {
        (json!([]), json!([]))
    };
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "w", "droidpool.io/poolconfig": "w"}},
        "spec": {"automountServiceAccountToken": false, "volumes": volumes,
                 "containers": [{"name": "pooler", "image": "example/droid-pool:test",
                                 "ports": [{"name": "pooler-admin", "containerPort": admin}],
                                 "volumeMounts": mounts}]}
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
async fn the_token_goes_to_poolers_that_mount_it_and_then_into_the_config() {
    let client = support::client().await;
    let (ns, op) = with_secrets(&client, "bearer").await;
    let (with, with_heads, a) = stand_in().await;
    let (without, without_heads, b) = stand_in().await;
    sidecar_pod(&client, &ns, "w-1", with, true).await;
    sidecar_pod(&client, &ns, "w-2", without, false).await;
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
    let token = eventually("admin Secret", || async {
        let s = Api::<Secret>::namespaced(client.clone(), &ns)
            .get_opt("w-admin")
            .await
            .ok()??;
        Some(token_of(&s))
    })
    .await;
    let bearer = format!("Authorization: Bearer {token}\r\n");
    eventually("the mounting pooler asked with the token", || async {
        let heads = with_heads.lock().expect("lock").clone();
        heads.iter().any(|h| h.contains(&bearer)).then_some(())
    })
    .await;
    eventually("the other pooler asked too", || async {
        (!without_heads.lock().expect("lock").is_empty()).then_some(())
    })
    .await;
    let others = without_heads.lock().expect("lock").clone();
    assert!(
        others.iter().all(|h| !h.contains("Authorization")),
        "{others:?}"
    );
    // One pod would not find the files: the config does not point at them, and says why.
    let pc = eventually("ConfigRendered says which pod lacks the mount", || async {
        let pc = get(&client, &ns, "w").await;
        let c = pc.status.as_ref()?.conditions.iter();
        let says = c.filter(|c| c.type_ == "ConfigRendered").any(|c| {
            c.message
                .contains("1 pooler pod(s) do not mount Secret w-admin")
        });
        says.then_some(pc)
    })
    .await;
    assert_eq!(
        pc.status
            .as_ref()
            .and_then(|s| s.admin_token_secret.clone()),
        None
    );
    let text = |cm: ConfigMap| {
        cm.data
            .and_then(|d| d.get(CONFIG_KEY).cloned())
            .unwrap_or_default()
    };
    let cms = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    assert!(!text(cms.get("w-pool").await.expect("cm")).contains("token_file"));
    // That pod goes: every pooler mounts the Secret and reads the settings.
    Api::<Pod>::namespaced(client.clone(), &ns)
        .delete("w-2", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete pod");
    let pc = eventually("adminTokenSecret", || async {
        let pc = get(&client, &ns, "w").await;
        (pc.status.as_ref()?.admin_token_secret.as_deref() == Some("w-admin")).then_some(pc)
    })
    .await;
    let yaml = text(cms.get("w-pool").await.expect("cm"));
    assert!(
        yaml.contains("token_file: /var/run/droid-pool/admin/token"),
        "{yaml}"
    );
    assert!(
        yaml.contains("mock_secret_file: /var/run/droid-pool/admin/mock-secret"),
        "{yaml}"
    );
    let msg = &pc.status.as_ref().expect("status").conditions;
    assert!(
        msg.iter()
            .any(|c| c.message.contains("admin token in Secret w-admin")),
        "{msg:?}"
    );
    // The token itself is nowhere but in the Secret.
    let all = serde_json::to_string(&pc).expect("json") + &yaml;
    assert!(!all.contains(&token));
    a.abort();
    b.abort();
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
