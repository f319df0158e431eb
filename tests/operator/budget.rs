//! The budget held per database, against the real API server (1.20): the operator writes a
//! budget's share as `pool.max_db_connections` too only while every running pooler says in
//! `/status` that it reads that setting. The poolers are real `droid-pool` processes behind
//! pods patched to Running, as in the config-loaded test; the "0.1.0 pooler" is a stand-in
//! (a few lines of HTTP below) answering `/status` as that release does: without
//! `capabilities`.

use droid_pool::operator::crd::{BudgetScope, PoolConfig};
use droid_pool::operator::render::CONFIG_KEY;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::production::{running_pod, Pooler};
use crate::reconcile::{get, loaded_config, with_secrets};
use crate::support;

/// A 0.1.0 pooler's admin port as far as the operator can tell: `/status` answers 200 with
/// that release's fields, no `capabilities` and no `config_hash`. Serves until aborted.
async fn old_pooler() -> (u16, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let task = tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await;
            let body = r#"{"version":"0.1.0","config_generation":1,"started":true,"ready":true,"paused":false,"clients_open":0,"pools":[]}"#;
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = s.write_all(answer.as_bytes()).await;
        }
    });
    (port, task)
}

/// Waits until the ConfigMap holds `size` and `db_limit`, and the status says `scope` and
/// why: `ConfigRendered`'s message holds `why`.
async fn held(
    client: &Client,
    ns: &str,
    (size, db_limit): (usize, usize),
    scope: BudgetScope,
    why: &str,
) {
    // What was last seen goes into the failure: a timeout alone says nothing of why.
    let last = std::sync::Mutex::new(String::from("nothing read yet"));
    let want = format!("pool.size {size}, max_db_connections {db_limit}, {scope:?}, {why:?}");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let seen = async {
            let (cfg, _) = loaded_config(client, ns, "w-pool").await?;
            let pc = get(client, ns, "w").await;
            let status = pc.status.as_ref()?;
            let c = status
                .conditions
                .iter()
                .find(|c| c.type_ == "ConfigRendered")?;
            *last.lock().expect("last") = format!(
                "pool.size {}, max_db_connections {}, {:?}, {:?}",
                cfg.pool.size, cfg.pool.max_db_connections, status.budget_scope, c.message
            );
            (cfg.pool.size == size
                && cfg.pool.max_db_connections == db_limit
                && status.budget_scope == Some(scope)
                && c.message.starts_with(&format!("pool size {size} "))
                && c.message.contains(why))
            .then_some(())
        };
        if seen.await.is_some() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after 60 s waiting for: {want}; last seen: {}",
            last.lock().expect("last")
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// A sidecar pod whose pooler, a native sidecar (an init container), keeps failing to start:
/// the pod stays Pending, as an older pooler refusing its file would leave it.
async fn crash_looping_pod(client: &Client, ns: &str, name: &str) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "w", "droidpool.io/poolconfig": "w"}},
        "spec": {"automountServiceAccountToken": false,
                 "initContainers": [{"name": "pooler", "image": "example/droid-pool:0.1.0",
                                     "ports": [{"name": "pooler-admin", "containerPort": 9127}]}],
                 "containers": [{"name": "app", "image": "example/app:1"}]}
    }))
    .expect("pod");
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
    let status = json!({"status": {"phase": "Pending", "initContainerStatuses": [
        {"name": "pooler", "ready": false, "restartCount": 3, "image": "example/droid-pool:0.1.0",
         "imageID": "", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("pod status");
}

#[tokio::test]
async fn the_share_is_held_per_database_only_while_every_pooler_reads_it() {
    let client = support::client().await;
    let (ns, op) = with_secrets(&client, "dblimit").await;
    let _: PoolConfig = support::create(
        &client,
        &ns,
        json!({"apiVersion": "droidpool.io/v1alpha1", "kind": "PoolConfig",
               "metadata": {"name": "w"},
               "spec": {"maxServerConnections": 8, "server": {"host": "127.0.0.1"},
                        "target": {"sidecar": {"configMapName": "w-pool",
                                               "podSelector": {"matchLabels": {"app": "w"}}}}}}),
    )
    .await;
    // No pooler runs yet: nothing has said it reads the setting, so it is not written.
    let not_yet = "no running pooler has said yet that it reads pool.max_db_connections";
    held(&client, &ns, (8, 0), BudgetScope::Pool, not_yet).await;

    // A pooler of this release runs: the share becomes the per-database limit too.
    let file = tempfile::NamedTempFile::new().expect("tempfile");
    let cm = Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .get("w-pool")
        .await
        .expect("cm");
    std::fs::write(file.path(), &cm.data.expect("data")[CONFIG_KEY]).expect("write");
    let current = Pooler::start(file.path()).await;
    running_pod(&client, &ns, "w-1", current.admin).await;
    let per_db = "held per database (pool.max_db_connections)";
    held(&client, &ns, (8, 8), BudgetScope::Database, per_db).await;

    // A 0.1.0 pooler joins: it would refuse the file, so the setting goes.
    let (old_port, old) = old_pooler().await;
    running_pod(&client, &ns, "w-2", old_port).await;
    let older = "1 of 2 running poolers do not read pool.max_db_connections";
    held(&client, &ns, (4, 0), BudgetScope::Pool, older).await;

    // It goes away: the setting comes back.
    Api::<Pod>::namespaced(client.clone(), &ns)
        .delete("w-2", &DeleteParams::default())
        .await
        .expect("delete");
    old.abort();
    held(&client, &ns, (8, 8), BudgetScope::Database, per_db).await;

    // A pod whose pooler cannot start (it does not answer at all) takes it out as well.
    crash_looping_pod(&client, &ns, "w-3").await;
    let failing = "1 pooler pod(s) keep failing to start";
    held(&client, &ns, (4, 0), BudgetScope::Pool, failing).await;
    op.stop().await;
}
