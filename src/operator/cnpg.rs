//! A CloudNativePG `Cluster` as the operator reads it: whether a switchover is in progress
//! (`status.targetPrimary` differs from `status.currentPrimary`; CloudNativePG sets
//! `status.phase` to "Switchover in progress" or "Failing over" meanwhile). Read as a dynamic
//! object, so the operator needs neither CloudNativePG's types nor its CRD to be installed.

use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::Client;

use super::crd::PoolConfig;

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
