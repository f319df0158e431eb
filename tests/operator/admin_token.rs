//! The admin token against the real API server (1.20): the operator sends it with its
//! `GET /status` only to pooler pods that mount the admin Secret, and points the rendered
//! config at the Secret's files only once every selected pod mounts them. The poolers are
//! stand-ins on loopback answering `/status` as this release does, behind pods patched to
//! Running (no kubelet runs).

use std::sync::{Arc, Mutex};

use droid_pool::operator::render::{ADMIN_DIR, CONFIG_KEY};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::reconcile::{get, with_secrets};
use crate::security::token_of;
use crate::support::{self, eventually};

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
