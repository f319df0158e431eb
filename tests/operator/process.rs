//! The operator process as `droid-pool-operator run` runs it (minus the signal handler, whose
//! only job is to cancel the same token): Lease leader election between two replicas, probes
//! and metrics, graceful shutdown that releases the Lease so the standby takes over at once.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use droid_pool::operator::leader::{self, Elector, LeaseConfig};
use droid_pool::operator::run::{run, RunOptions};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube::Client;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::support::{self, condition, eventually};

/// A GET over a fresh connection: (status code, body).
pub(crate) async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.ok()?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned();
    Some((code, body))
}

fn lease(ns: &str, id: &str, duration: Duration) -> LeaseConfig {
    LeaseConfig {
        lease_duration: duration,
        retry_period: Duration::from_millis(200),
        ..LeaseConfig::new(ns.into(), "droid-pool-operator".into(), id.into())
    }
}

async fn holder(client: &Client, ns: &str) -> Option<String> {
    let l = Api::<Lease>::namespaced(client.clone(), ns)
        .get("droid-pool-operator")
        .await
        .ok()?;
    l.spec?.holder_identity
}

#[tokio::test]
async fn lease_has_one_holder_and_expires_only_after_standstill() {
    let client = support::client().await;
    let ns = support::namespace(&client, "lease").await;
    let a = Elector::new(client.clone(), lease(&ns, "a", Duration::from_secs(2)));
    let b = Elector::new(client.clone(), lease(&ns, "b", Duration::from_secs(2)));
    assert!(a.try_acquire_or_renew().await.expect("a takes"));
    assert!(!b.try_acquire_or_renew().await.expect("b asks"));
    assert!(a.try_acquire_or_renew().await.expect("a renews"));
    assert!(!b.try_acquire_or_renew().await.expect("b asks again"));
    assert_eq!(holder(&client, &ns).await.as_deref(), Some("a"));

    // A release hands over at once.
    a.release().await.expect("release");
    assert!(b.try_acquire_or_renew().await.expect("b takes"));
    assert_eq!(holder(&client, &ns).await.as_deref(), Some("b"));

    // b stops renewing: a waits until b's record has stood still for the lease duration.
    let started = Instant::now();
    assert!(leader::acquire(&a, &CancellationToken::new()).await);
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let l = Api::<Lease>::namespaced(client.clone(), &ns)
        .get("droid-pool-operator")
        .await
        .expect("lease");
    assert_eq!(l.spec.expect("spec").lease_transitions, Some(2));
    // b notices on its next renewal that it lost.
    assert!(!leader::hold(&b, &CancellationToken::new()).await);
}

struct Replica {
    addr: SocketAddr,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), droid_pool::operator::run::RunError>>,
}

async fn replica(client: &Client, ns: &str, id: &str) -> Replica {
    let opts = RunOptions {
        metrics_addr: "127.0.0.1:0".parse().expect("addr"),
        namespaces: vec![ns.into()],
        allow: support::allow(),
        lease: Some(lease(ns, id, Duration::from_secs(15))),
        instance: Some(id.into()),
    };
    let shutdown = CancellationToken::new();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(run(client.clone(), opts, shutdown.clone(), move |a| {
        let _ = tx.send(a);
    }));
    let addr = rx.await.expect("metrics address");
    Replica {
        addr,
        shutdown,
        task,
    }
}

async fn leads(r: &Replica) -> bool {
    http_get(r.addr, "/metrics")
        .await
        .is_some_and(|(_, body)| body.lines().any(|l| l == "droid_pool_operator_leader 1"))
}

#[tokio::test]
async fn two_replicas_one_leader_and_graceful_handover() {
    let client = support::client().await;
    support::install_crd(&client).await;
    let ns = support::namespace(&client, "replicas").await;
    let one = replica(&client, &ns, "op-1").await;
    eventually("op-1 leads", || async { leads(&one).await.then_some(()) }).await;
    let two = replica(&client, &ns, "op-2").await;
    eventually("op-2 ready as a standby", || async {
        (http_get(two.addr, "/readyz").await?.0 == 200).then_some(())
    })
    .await;
    assert_eq!(http_get(two.addr, "/livez").await.expect("livez").0, 200);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        !leads(&two).await,
        "a standby must not lead while op-1 renews"
    );
    assert_eq!(holder(&client, &ns).await.as_deref(), Some("op-1"));

    // The leader reconciles.
    support::create(
        &client,
        &ns,
        json!({
            "apiVersion": "droidpool.io/v1alpha1", "kind": "PoolConfig",
            "metadata": {"name": "p"},
            "spec": {"poolSize": 2, "server": {"host": "db"},
                     "target": {"sidecar": {"configMapName": "p-pool"}}}
        }),
    )
    .await;
    let api = Api::<droid_pool::operator::crd::PoolConfig>::namespaced(client.clone(), &ns);
    eventually("reconciled by the leader", || async {
        let pc = api.get("p").await.ok()?;
        (condition(&pc, "Ready")?.0 == "True").then_some(())
    })
    .await;

    // SIGTERM's path: the leader stops gracefully and releases the Lease; op-2 takes over
    // well before the 15 s lease would have expired.
    one.shutdown.cancel();
    let stopped = tokio::time::timeout(Duration::from_secs(10), one.task)
        .await
        .expect("op-1 stops within 10 s")
        .expect("task");
    stopped.expect("clean shutdown");
    let handover = Instant::now();
    eventually("op-2 leads", || async { leads(&two).await.then_some(()) }).await;
    assert!(handover.elapsed() < Duration::from_secs(10));
    assert_eq!(holder(&client, &ns).await.as_deref(), Some("op-2"));
    two.shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), two.task)
        .await
        .expect("op-2 stops")
        .expect("task")
        .expect("clean shutdown");
    assert_eq!(holder(&client, &ns).await, None, "released on shutdown");
}

/// The binary itself: `crd` prints the committed CRD; `run` leads, serves probes, and on a
/// real SIGTERM stops cleanly (exit 0) and releases the Lease.
#[tokio::test]
async fn the_binary_prints_the_crd_and_stops_cleanly_on_sigterm() {
    let bin = env!("CARGO_BIN_EXE_droid-pool-operator");
    let crd = std::process::Command::new(bin)
        .arg("crd")
        .output()
        .expect("run crd");
    assert!(crd.status.success());
    assert_eq!(
        String::from_utf8(crd.stdout).expect("utf-8"),
        include_str!("../../deploy/crds/poolconfig.yaml")
    );

    let client = support::client().await;
    support::install_crd(&client).await;
    let ns = support::namespace(&client, "binary").await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let mut child = tokio::process::Command::new(bin)
        .arg("run")
        .args(["--metrics-addr", &addr.to_string()])
        .env("KUBECONFIG", support::kubeconfig())
        .env("POD_NAMESPACE", &ns)
        .env("POD_NAME", "bin-op")
        .env("WATCH_NAMESPACE", &ns)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn operator");
    eventually("the binary leads", || async {
        (holder(&client, &ns).await.as_deref() == Some("bin-op")).then_some(())
    })
    .await;
    eventually("the binary is ready", || async {
        (http_get(addr, "/readyz").await?.0 == 200).then_some(())
    })
    .await;
    let pid = child.id().expect("pid").to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("exits within 10 s of SIGTERM")
        .expect("wait");
    assert!(status.success(), "exit status {status}");
    assert_eq!(
        holder(&client, &ns).await,
        None,
        "Lease released on SIGTERM"
    );
}
