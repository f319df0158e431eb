//! The controller's wiring: which watches trigger a reconciliation (PoolConfigs, the
//! ConfigMaps and Deployments they own, and the pods their sidecar selectors count), over
//! every namespace or only listed ones (each watched through namespaced APIs, so Roles in
//! those namespaces are all the RBAC it needs), and the graceful shutdown that lets
//! reconciliations in flight finish.

use std::sync::Arc;
use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::core::{Selector, SelectorExt};
use kube::runtime::controller::Controller;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};

use tokio_util::sync::CancellationToken;

use super::context::Context;
use super::crd::{PoolConfig, Target};
use super::metrics::Metrics;
use super::observe;
use super::policy::Allowlist;
use super::reconcile::{error_policy, reconcile};

/// The controller's name in Events (`reportingController`) and logs.
pub const CONTROLLER_NAME: &str = "droid-pool-operator";
/// The label selector of the objects the operator renders (see `render::labels`).
const OWNED_SELECTOR: &str = "app.kubernetes.io/managed-by=droid-pool-operator";
/// The pods the operator watches: sidecar pods carrying this label (the chart's
/// `droid-pool.sidecarPodLabels` sets it). Only their metadata is watched, so a cluster's
/// other pods cost the operator nothing; a pod without the label is still counted, at the
/// next reconciliation (the resync, or any change of its PoolConfig).
pub const POD_LABEL: &str = "droidpool.io/poolconfig";
/// Events that come within this long of each other trigger one reconciliation.
const DEBOUNCE: Duration = Duration::from_secs(1);

/// Builds the reconcile context: discovers the PodDisruptionBudget API once.
pub async fn context(
    client: Client,
    metrics: Arc<Metrics>,
    instance: Option<String>,
    allow: Allowlist,
) -> Result<Arc<Context>, kube::Error> {
    let pdb = observe::pdb_resource(&client).await?;
    tracing::info!(api_version = %pdb.api_version, "PodDisruptionBudget API");
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: CONTROLLER_NAME.into(),
            instance,
        },
    );
    Ok(Arc::new(Context::new(
        client, recorder, metrics, pdb, allow,
    )))
}

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// How long in-flight reconciliations may run after shutdown before they are dropped.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

/// Runs the controller over `namespaces` (every namespace when empty): one controller per
/// listed namespace, side by side, sharing the context. Until `shutdown`, as [`run`].
pub async fn run_scoped(ctx: Arc<Context>, namespaces: &[String], shutdown: CancellationToken) {
    if namespaces.is_empty() {
        return run(ctx, None, shutdown).await;
    }
    let each = namespaces
        .iter()
        .map(|ns| run(ctx.clone(), Some(ns.as_str()), shutdown.clone()));
    futures_util::future::join_all(each).await;
}

/// Runs the controller over `namespace` (all when `None`) until `shutdown` is cancelled; then
/// it stops taking new work and waits (up to `SHUTDOWN_GRACE`) for reconciliations in flight.
pub async fn run(ctx: Arc<Context>, namespace: Option<&str>, shutdown: CancellationToken) {
    let client = ctx.client.clone();
    let wc = watcher::Config::default();
    let owned = watcher::Config::default().labels(OWNED_SELECTOR);
    let controller = Controller::new(api::<PoolConfig>(&client, namespace), wc)
        .with_config(kube::runtime::controller::Config::default().debounce(DEBOUNCE));
    let store = controller.store();
    let mapper_store = store.clone();
    let peer_store = store.clone();
    let controller = watch_clusters(controller, &client, namespace, store.clone()).await;
    let work = controller
        .owns(api::<ConfigMap>(&client, namespace), owned.clone())
        .owns(api::<Deployment>(&client, namespace), owned)
        // `PartialObjectMeta`: the API server sends only the pods' metadata.
        .watches(
            api::<PartialObjectMeta<Pod>>(&client, namespace),
            watcher::Config::default().labels(POD_LABEL),
            move |pod| sidecar_owners(&mapper_store.state(), &pod),
        )
        // The operator's own pooler pods: one getting (or losing) an address changes the
        // peer list of a PoolConfig with cancel forwarding.
        .watches(
            api::<PartialObjectMeta<Pod>>(&client, namespace),
            watcher::Config::default().labels(OWNED_SELECTOR),
            move |pod| peer_owners(&peer_store.state(), &pod),
        )
        .graceful_shutdown_on(shutdown.clone().cancelled_owned())
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|result| {
            // A deleted PoolConfig is never reconciled again: drop its condition series (only
            // this controller's: another namespace's controller keeps its own).
            let live: std::collections::HashSet<(String, String)> = store
                .state()
                .iter()
                .map(|pc| (pc.namespace().unwrap_or_default(), pc.name_any()))
                .collect();
            ctx.metrics.retain_poolconfigs(|ns, name| {
                namespace.is_some_and(|mine| mine != ns)
                    || live.contains(&(ns.to_owned(), name.to_owned()))
            });
            async move {
                match result {
                    Ok((obj, _)) => tracing::debug!(poolconfig = %obj, "reconciled"),
                    Err(e) => tracing::debug!(error = %e, "reconcile attempt failed"),
                }
            }
        });
    tokio::select! {
        () = work => {}
        () = async {
            shutdown.cancelled().await;
            // kube-runtime holds its runner until the store's first list completes, and a
            // graceful shutdown stops that list: stopping before then would wait forever.
            // Nothing can be in flight yet, so stop at once.
            if store.wait_until_ready().now_or_never().is_none() {
                return;
            }
            tokio::time::sleep(SHUTDOWN_GRACE).await;
            tracing::warn!(grace = ?SHUTDOWN_GRACE, "reconciliations still running; dropping them");
        } => {}
    }
    tracing::info!(namespace = namespace.unwrap_or("*"), "controller stopped");
}

/// Where the CloudNativePG `Cluster` API is served, a change of a Cluster (its status during a
/// switchover) reconciles the PoolConfigs that follow it at once. Elsewhere nothing is
/// watched (no error loop for a CRD that is not installed); those PoolConfigs look at their
/// Cluster every few seconds anyway.
async fn watch_clusters(
    controller: Controller<PoolConfig>,
    client: &Client,
    namespace: Option<&str>,
    store: kube::runtime::reflector::Store<PoolConfig>,
) -> Controller<PoolConfig> {
    use kube::api::{DynamicObject, ListParams};
    let ar = super::cnpg::cluster_resource();
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    if let Err(e) = api.list(&ListParams::default().limit(1)).await {
        tracing::info!(error = %e, "CloudNativePG Clusters are not watched");
        return controller;
    }
    tracing::info!("watching CloudNativePG Clusters");
    controller.watches_with(api, ar, watcher::Config::default(), move |cluster| {
        super::cnpg::referrers(&store.state(), &cluster)
    })
}

/// The PoolConfigs whose sidecar pod selector selects `pod`: a pod appearing, finishing or
/// going away changes their budget split.
pub fn sidecar_owners(
    pcs: &[Arc<PoolConfig>],
    pod: &PartialObjectMeta<Pod>,
) -> Vec<ObjectRef<PoolConfig>> {
    let labels = pod.labels();
    pcs.iter()
        .filter(|pc| pc.namespace() == pod.namespace())
        .filter(|pc| match &pc.spec.target {
            Target::Sidecar(t) => t.pod_selector.as_ref().is_some_and(|sel| {
                Selector::try_from(sel.clone()).is_ok_and(|s| s.matches(labels))
            }),
            Target::Deployment(_) => false,
        })
        .map(|pc| ObjectRef::from_obj(pc.as_ref()))
        .collect()
}

/// The PoolConfig whose deployed pooler `pod` is, if it lists its pods as peers.
pub fn peer_owners(
    pcs: &[Arc<PoolConfig>],
    pod: &PartialObjectMeta<Pod>,
) -> Vec<ObjectRef<PoolConfig>> {
    let instance = pod.labels().get("app.kubernetes.io/instance");
    pcs.iter()
        .filter(|pc| pc.namespace() == pod.namespace())
        .filter(|pc| instance == Some(&pc.name_any()))
        .filter(|pc| super::render::wants_peers(&pc.spec))
        .map(|pc| ObjectRef::from_obj(pc.as_ref()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pc(name: &str, ns: &str, target: serde_json::Value) -> Arc<PoolConfig> {
        let spec = serde_json::json!({"poolSize": 1, "server": {"host": "db"}, "target": target});
        let mut pc = PoolConfig::new(name, serde_json::from_value(spec).unwrap());
        pc.metadata.namespace = Some(ns.into());
        Arc::new(pc)
    }

    fn pod(ns: &str, app: &str) -> PartialObjectMeta<Pod> {
        let mut p = PartialObjectMeta::<Pod>::default();
        p.metadata.name = Some("p".into());
        p.metadata.namespace = Some(ns.into());
        p.metadata.labels = Some([("app".to_string(), app.to_string())].into());
        p
    }

    #[test]
    fn pods_map_to_the_sidecar_configs_that_select_them() {
        let web = serde_json::json!({"sidecar": {"configMapName": "c",
            "podSelector": {"matchLabels": {"app": "web"}}}});
        let all = serde_json::json!({"sidecar": {"configMapName": "c"}});
        let dep = serde_json::json!({"deployment": {}});
        let pcs = [
            pc("a", "shop", web.clone()),
            pc("b", "other", web),
            pc("c", "shop", all),
            pc("d", "shop", dep),
        ];
        let hit = sidecar_owners(&pcs, &pod("shop", "web"));
        assert_eq!(hit.len(), 1);
        assert_eq!(hit[0].name, "a");
        assert!(sidecar_owners(&pcs, &pod("shop", "api")).is_empty());
    }
}
