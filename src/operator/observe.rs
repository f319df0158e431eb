//! What the reconciler reads from the cluster before rendering: how many poolers share the
//! budget, whether the referenced Secrets exist, and which PodDisruptionBudget API the server
//! serves.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ListParams};
use kube::core::{ApiResource, Selector};
use kube::{Client, ResourceExt};

use super::crd::{DeploymentTarget, PoolConfig, SidecarTarget, Target};
use super::render;

/// Why the poolers could not be counted.
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    /// The spec's pod selector is not a valid label selector (a spec error, not a retry).
    #[error("spec.target.sidecar.podSelector: {0}")]
    Selector(#[source] kube::core::ParseExpressionError),
}

/// Counts the poolers of `pc`.
///
/// Deployment: `max(desired, pods)`, where pods are the Deployment's pods that have not
/// finished, terminating ones included (a draining pooler still holds connections, and the
/// Deployment's `status.replicas` leaves them out), so through a rollout or a scale-down the
/// total stays within the budget. Sidecars: the selected pods that have not finished,
/// terminating ones included (1 without a selector).
pub async fn poolers(client: &Client, ns: &str, pc: &PoolConfig) -> Result<Poolers, ObserveError> {
    match &pc.spec.target {
        Target::Deployment(t) => Ok(deployed(client, ns, pc, t).await?),
        Target::Sidecar(t) => sidecars(client, ns, t).await,
    }
}

/// The poolers of a PoolConfig as counted for the budget.
#[derive(Debug, Default)]
pub struct Poolers {
    /// How many share the budget (at least what the pods say).
    pub count: u32,
    /// The pods found (none for sidecars without a selector), whose poolers are asked which
    /// config they have loaded.
    pub pods: Vec<Pod>,
}

async fn deployed(
    client: &Client,
    ns: &str,
    pc: &PoolConfig,
    t: &DeploymentTarget,
) -> Result<Poolers, kube::Error> {
    let live = Api::<Deployment>::namespaced(client.clone(), ns)
        .get_opt(&pc.name_any())
        .await?;
    let live_desired = live.as_ref().and_then(|d| d.spec.as_ref()?.replicas);
    let existing = live
        .as_ref()
        .and_then(|d| d.status.as_ref()?.replicas)
        .unwrap_or(0);
    let desired = t.replicas.or(live_desired).unwrap_or(1);
    let selector = render::selector_string(pc);
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&selector))
        .await?;
    // Evicted pods stay listed as Failed: only those that have not finished count.
    let pods: Vec<Pod> = pods.items.into_iter().filter(counts).collect();
    let n = i32::try_from(pods.len()).unwrap_or(i32::MAX);
    Ok(Poolers {
        count: u32::try_from(desired.max(existing).max(n)).unwrap_or(0),
        pods,
    })
}

async fn sidecars(client: &Client, ns: &str, t: &SidecarTarget) -> Result<Poolers, ObserveError> {
    let Some(selector) = &t.pod_selector else {
        return Ok(Poolers {
            count: 1,
            pods: Vec::new(),
        });
    };
    let selector = Selector::try_from(selector.clone()).map_err(ObserveError::Selector)?;
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&selector.to_string()))
        .await?;
    let pods: Vec<Pod> = pods.items.into_iter().filter(counts).collect();
    Ok(Poolers {
        count: u32::try_from(pods.len()).unwrap_or(u32::MAX),
        pods,
    })
}

/// The pods that can take forwarded cancel requests: those with an address.
pub fn peer_pods(pods: &[Pod]) -> Vec<render::PeerPod> {
    pods.iter()
        .filter_map(|p| {
            Some(render::PeerPod {
                name: p.metadata.name.clone()?,
                ip: p
                    .status
                    .as_ref()?
                    .pod_ip
                    .clone()
                    .filter(|ip| !ip.is_empty())?,
                created: p
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map_or(0, |t| t.0.as_second()),
            })
        })
        .collect()
}

/// A pod that holds (or will hold) server connections: any that has not finished, one
/// being deleted included (its pooler drains, holding connections until it exits).
fn counts(pod: &Pod) -> bool {
    !pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Succeeded" || p == "Failed")
}

/// A Secret the spec names that is not there (or lacks the key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingSecret {
    pub message: String,
}

/// Checks the Secrets the pooler pods will mount; their values are never read into the
/// operator's logs, events or status.
pub async fn missing_secret(
    client: &Client,
    ns: &str,
    pc: &PoolConfig,
) -> Result<Option<MissingSecret>, kube::Error> {
    let api = Api::<Secret>::namespaced(client.clone(), ns);
    let mut wanted = Vec::new();
    if let Some(r) = &pc.spec.server.password_secret {
        wanted.push((
            r.name.clone(),
            Some(r.key.clone()),
            "spec.server.passwordSecret",
        ));
    }
    if let Some(name) = pc
        .spec
        .client_auth
        .as_ref()
        .and_then(|a| a.passwords_secret.clone())
    {
        wanted.push((name, None, "spec.clientAuth.passwordsSecret"));
    }
    if let Some(r) = pc
        .spec
        .client_auth
        .as_ref()
        .and_then(|a| a.users_secret.as_ref())
    {
        wanted.push((
            r.name.clone(),
            Some(r.key.clone()),
            "spec.clientAuth.usersSecret",
        ));
    }
    for (name, key, field) in wanted {
        let Some(secret) = api.get_opt(&name).await? else {
            return Ok(Some(MissingSecret {
                message: format!("{field}: Secret {ns}/{name} not found"),
            }));
        };
        if let Some(key) = key {
            let has = secret.data.as_ref().is_some_and(|d| d.contains_key(&key))
                || secret
                    .string_data
                    .as_ref()
                    .is_some_and(|d| d.contains_key(&key));
            if !has {
                return Ok(Some(MissingSecret {
                    message: format!("{field}: Secret {ns}/{name} has no key {key:?}"),
                }));
            }
        }
    }
    Ok(None)
}

/// The PodDisruptionBudget resource: `policy/v1` where served (Kubernetes 1.21+), else
/// `policy/v1beta1` (1.20 and older, such as the test API server).
pub async fn pdb_resource(client: &Client) -> Result<ApiResource, kube::Error> {
    let served_v1 = match client.list_api_group_resources("policy/v1").await {
        Ok(list) => list
            .resources
            .iter()
            .any(|r| r.name == "poddisruptionbudgets"),
        Err(kube::Error::Api(e)) if e.code == 404 => false,
        Err(e) => return Err(e),
    };
    let version = if served_v1 { "v1" } else { "v1beta1" };
    Ok(ApiResource {
        group: "policy".into(),
        version: version.into(),
        api_version: format!("policy/{version}"),
        kind: "PodDisruptionBudget".into(),
        plural: "poddisruptionbudgets".into(),
    })
}
