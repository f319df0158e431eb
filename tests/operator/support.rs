//! A real kube-apiserver (Kubernetes 1.20, with etcd) for the operator tests, started once per
//! test process with the shared scripts: `build.sh` (cached after the first build) and
//! `start.sh RUN_DIR PORT ETCD_PORT` on free loopback ports. If it cannot be built or started
//! the tests FAIL with the script's output; nothing is skipped.
//!
//! There is no scheduler, controller-manager or kubelet: Deployments are stored but never get
//! pods or status, and pods the tests create stay Pending forever. The tests assert only what
//! the operator itself writes.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use droid_pool::operator::controller;
use droid_pool::operator::crd::PoolConfig;
use droid_pool::operator::metrics::Metrics;
use droid_pool::operator::policy::{default_images, Allowlist};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use std::os::unix::process::CommandExt;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The kubeconfig of this process's API server (started on first use).
pub fn kubeconfig() -> &'static Path {
    static KUBECONFIG: OnceLock<PathBuf> = OnceLock::new();
    KUBECONFIG.get_or_init(|| start().unwrap_or_else(|e| panic!("kube-apiserver: {e}")))
}

fn tools() -> PathBuf {
    // As scripts/lib/shared.sh: the variables, else ../shared beside the repository, else
    // /work/shared (the CI machine's, when the repository is cloned elsewhere).
    if let Some(t) = std::env::var_os("DROID_POOL_KAPI_TOOLS") {
        return PathBuf::from(t);
    }
    let shared = std::env::var_os("DROID_POOL_SHARED")
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            [
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared"),
                PathBuf::from("/work/shared"),
            ]
            .into_iter()
            .find(|p| p.join("tools").is_dir())
        })
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared"));
    shared.join("tools/kube-apiserver")
}

pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local_addr").port()
}

fn start() -> Result<PathBuf, String> {
    let started = std::time::Instant::now();
    let tools = tools();
    let build = Command::new("bash")
        .arg(tools.join("build.sh"))
        .output()
        .map_err(|e| format!("cannot run {}/build.sh: {e}", tools.display()))?;
    if !build.status.success() {
        return Err(format!(
            "build.sh failed ({}):\n{}{}",
            build.status,
            String::from_utf8_lossy(&build.stdout),
            String::from_utf8_lossy(&build.stderr)
        ));
    }
    let run_dir = std::env::temp_dir().join(format!("droid-pool-kapi-{}", std::process::id()));
    spawn_watchdog(&tools, &run_dir)?;
    let mut last = String::new();
    // A free port can be taken between our probe and the server's bind: try a few.
    for _ in 0..3 {
        let (api, etcd) = (free_port(), free_port());
        let out = Command::new("bash")
            .arg(tools.join("start.sh"))
            .arg(&run_dir)
            .arg(api.to_string())
            .arg(etcd.to_string())
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run start.sh: {e}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if out.status.success() {
            if let Some(path) = stdout.lines().last() {
                eprintln!(
                    "kube-apiserver 1.20 on 127.0.0.1:{api} (etcd {etcd}) after {:?}",
                    started.elapsed()
                );
                return Ok(PathBuf::from(path.trim()));
            }
        }
        last = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
        let _ = Command::new("bash")
            .arg(tools.join("stop.sh"))
            .arg(&run_dir)
            .status();
    }
    Err(format!("start.sh failed three times; last output:\n{last}"))
}

/// Stops etcd and the API server once this test process has exited (statics never drop).
fn spawn_watchdog(tools: &Path, run_dir: &Path) -> Result<(), String> {
    let script = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 1; done; bash '{stop}' '{dir}'; rm -rf '{dir}'",
        pid = std::process::id(),
        stop = tools.join("stop.sh").display(),
        dir = run_dir.display(),
    );
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map(drop)
        .map_err(|e| format!("spawn watchdog: {e}"))
}

/// A client of the test API server (admin), for the calling test's runtime.
pub async fn client() -> Client {
    Client::try_from(config().await).expect("client")
}

/// A client that acts as `user` (admin impersonating it), so RBAC applies as to that user.
pub async fn client_as(user: &str) -> Client {
    let mut cfg = config().await;
    cfg.auth_info.impersonate = Some(user.into());
    Client::try_from(cfg).expect("client")
}

async fn config() -> Config {
    let kc = Kubeconfig::read_from(kubeconfig()).expect("read kubeconfig");
    Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig")
}

/// Installs the CRD exactly as `droid-pool-operator crd` prints it and waits until served.
pub async fn install_crd(client: &Client) {
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    let crd = droid_pool::operator::crd().expect("CRD");
    // POST, as Helm installs `crds/`: a 1.20 server drops the CEL `x-kubernetes-validations`
    // key it does not know (server-side apply of this CRD is refused there for that key).
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {} // another test installed it
        Err(e) => panic!("install CRD: {e}"),
    }
    eventually("CRD established", || async {
        let c = crds.get("poolconfigs.droidpool.io").await.ok()?;
        let conds = c.status?.conditions?;
        conds
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
            .then_some(())
    })
    .await;
}

/// A fresh namespace with a `default` ServiceAccount (normally the controller-manager's job,
/// and the pod admission plugin wants it).
pub async fn namespace(client: &Client, name: &str) -> String {
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).expect("namespace");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
    let sa: ServiceAccount =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "default"}})).expect("sa");
    Api::<ServiceAccount>::namespaced(client.clone(), name)
        .create(&PostParams::default(), &sa)
        .await
        .expect("create service account");
    name.to_owned()
}

/// A controller running in this test's runtime, watching one namespace, until dropped.
pub struct Running {
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
    /// The controller's metrics (reconciliations and failures).
    pub metrics: Arc<Metrics>,
}

/// The operator's default allowlist plus the stand-in image the tests deploy.
pub fn allow() -> Allowlist {
    let mut images = default_images();
    images.push("example/droid-pool:*".into());
    Allowlist::new(&images, &[]).expect("allowlist")
}

impl Running {
    pub async fn start(client: &Client, ns: &str) -> Running {
        Running::start_with(client, ns, allow()).await
    }

    /// As [`Running::start`], with these allowlists.
    pub async fn start_with(client: &Client, ns: &str, allow: Allowlist) -> Running {
        // The controller runs on the test's thread: its log lands in that test's captured
        // output, printed when the test fails.
        let filter = tracing_subscriber::EnvFilter::new(
            "droid_pool=info,kube=warn,kube_client::client::tls=error",
        );
        let _ = tracing_subscriber::fmt()
            .with_test_writer()
            .with_ansi(false)
            .with_env_filter(filter)
            .try_init();
        let metrics = Arc::new(Metrics::new().expect("metrics"));
        let ctx = controller::context(client.clone(), metrics.clone(), Some("test".into()), allow)
            .await
            .expect("context");
        let stop = CancellationToken::new();
        let ns = ns.to_owned();
        let token = stop.clone();
        let task = tokio::spawn(async move {
            controller::run(ctx, Some(&ns), token).await;
        });
        Running {
            stop,
            task: Some(task),
            metrics,
        }
    }

    /// Graceful shutdown; fails the test if the controller does not stop within 10 s.
    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .expect("controller stops within 10 s")
                .expect("controller task");
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Polls `probe` every 100 ms until it returns `Some`, for at most 60 s (generous: CI machines are shared).
pub async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after 60 s waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates a PoolConfig from JSON.
pub async fn create(client: &Client, ns: &str, obj: serde_json::Value) -> PoolConfig {
    let pc: PoolConfig = serde_json::from_value(obj).expect("PoolConfig JSON");
    Api::<PoolConfig>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pc)
        .await
        .expect("create PoolConfig")
}

/// The condition `type_` of a PoolConfig as (status, reason), once it has one.
pub fn condition(pc: &PoolConfig, type_: &str) -> Option<(String, String)> {
    pc.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()))
}
