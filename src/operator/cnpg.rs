//! A CloudNativePG `Cluster` as the operator reads it: whether a switchover is in progress
//! (`status.targetPrimary` differs from `status.currentPrimary`; CloudNativePG sets
//! `status.phase` to "Switchover in progress" or "Failing over" meanwhile). Read as a dynamic
//! object, so the operator needs neither CloudNativePG's types nor its CRD to be installed.

use std::time::Duration;

use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::Client;

use super::context::{Context, Error};
use super::crd::PoolConfig;
use super::render;
use super::status::{Verdict, SWITCHOVER};

/// `postgresql.cnpg.io/v1`, kind `Cluster`.
pub fn cluster_resource() -> ApiResource {
    ApiResource {
        group: "postgresql.cnpg.io".into(),
        version: "v1".into(),
        api_version: "postgresql.cnpg.io/v1".into(),
        kind: "Cluster".into(),
        plural: "clusters".into(),
    }
}

/// Where a Cluster's primary is and where it is going.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterState {
    pub current_primary: Option<String>,
    pub target_primary: Option<String>,
    pub phase: Option<String>,
}

impl ClusterState {
    pub fn from_object(obj: &DynamicObject) -> ClusterState {
        let status = obj.data.get("status");
        let field = |k: &str| {
            status
                .and_then(|s| s.get(k))
                .and_then(|v| v.as_str())
                .map(str::to_owned)
        };
        ClusterState {
            current_primary: field("currentPrimary"),
            target_primary: field("targetPrimary"),
            phase: field("phase"),
        }
    }

    /// A switchover or failover is in progress.
    pub fn switching(&self) -> bool {
        matches!((&self.current_primary, &self.target_primary), (Some(c), Some(t)) if c != t)
    }
}

/// The Cluster `name` in `ns`; `None` when it (or its CRD) does not exist.
pub async fn cluster(
    client: &Client,
    ns: &str,
    name: &str,
) -> Result<Option<ClusterState>, kube::Error> {
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &cluster_resource());
    match api.get_opt(name).await {
        Ok(obj) => Ok(obj.as_ref().map(ClusterState::from_object)),
        // The CRD is not installed: no such resource at all.
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

/// The PoolConfigs that name Cluster `obj` (same namespace): its status changed.
pub fn referrers(
    pcs: &[std::sync::Arc<PoolConfig>],
    obj: &DynamicObject,
) -> Vec<kube::runtime::reflector::ObjectRef<PoolConfig>> {
    use kube::ResourceExt;
    pcs.iter()
        .filter(|pc| pc.namespace() == obj.namespace())
        .filter(|pc| {
            pc.spec
                .server
                .cloud_native_pg
                .as_ref()
                .is_some_and(|r| Some(r.cluster.as_str()) == obj.metadata.name.as_deref())
        })
        .map(|pc| kube::runtime::reflector::ObjectRef::from_obj(pc.as_ref()))
        .collect()
}

/// How often a PoolConfig that follows a CloudNativePG Cluster looks at it, watch or not.
pub(super) const CNPG_POLL: Duration = Duration::from_secs(5);

/// The render facts and the `Switchover` condition of a PoolConfig that follows a
/// CloudNativePG Cluster (none for the others). The pools are held while the Cluster's
/// `status.targetPrimary` differs from its `status.currentPrimary`; the poolers stay ready.
pub(super) async fn cloud_native_pg(
    pc: &PoolConfig,
    ctx: &Context,
    ns: &str,
) -> Result<(render::Facts, Option<Verdict>), Error> {
    let Some(r) = &pc.spec.server.cloud_native_pg else {
        return Ok((render::Facts::default(), None));
    };
    let name = &r.cluster;
    let Some(state) = cluster(&ctx.client, ns, name).await? else {
        let msg = format!("no CloudNativePG Cluster {name} in {ns}: pools not held");
        return Ok((
            render::Facts::default(),
            Some(Verdict::new(SWITCHOVER, false, "ClusterNotFound", msg)),
        ));
    };
    let primary = |p: &Option<String>| p.clone().unwrap_or_else(|| "?".into());
    let facts = render::Facts {
        switchover: state.switching(),
        ..render::Facts::default()
    };
    let verdict = if facts.switchover {
        let hold = pc
            .spec
            .failover
            .as_ref()
            .and_then(|f| f.hold_timeout.clone())
            .unwrap_or_else(|| format!("{}s", render::CNPG_HOLD.as_secs()));
        let msg = format!(
            "Cluster {name}: primary {} -> {} ({}); transactions wait up to {hold} for it",
            primary(&state.current_primary),
            primary(&state.target_primary),
            state.phase.as_deref().unwrap_or("no phase"),
        );
        Verdict::new(SWITCHOVER, true, "SwitchoverInProgress", msg)
    } else {
        let msg = format!(
            "Cluster {name}: primary {}",
            primary(&state.current_primary)
        );
        Verdict::new(SWITCHOVER, false, "Stable", msg)
    };
    Ok((facts, Some(verdict)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_switchover_is_a_target_that_is_not_the_current_primary() {
        let obj = |status: serde_json::Value| -> DynamicObject {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
                "metadata": {"name": "pg", "namespace": "ns"}, "status": status
            }))
            .unwrap()
        };
        let stable = ClusterState::from_object(&obj(
            serde_json::json!({"currentPrimary": "pg-1", "targetPrimary": "pg-1"}),
        ));
        assert!(!stable.switching());
        let moving = ClusterState::from_object(&obj(serde_json::json!({
            "currentPrimary": "pg-1", "targetPrimary": "pg-2", "phase": "Switchover in progress"
        })));
        assert!(moving.switching());
        assert_eq!(moving.phase.as_deref(), Some("Switchover in progress"));
        assert!(!ClusterState::from_object(&obj(serde_json::json!({}))).switching());
    }
}
