//! The Kubernetes operator: reconciles `PoolConfig` objects into the pooler's config file (a
//! ConfigMap that sidecars mount) and, for the deployment target, into a Deployment, Service
//! and PodDisruptionBudget of poolers. Shares only `config` types with the rest of the crate.

mod admin_secret;
mod claim;
pub mod cnpg;
mod context;
pub mod controller;
pub mod crd;
mod deploy;
pub mod leader;
mod loaded;
pub mod metrics;
pub mod observe;
pub mod policy;
mod publish;
pub mod reconcile;
pub mod render;
pub mod run;
pub mod status;
mod verdicts;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::Value;

/// The PoolConfig CRD as installed: the derived one, with `null` taken out of enums (an
/// optional enum field is `nullable` already, and API servers' OpenAPI validation before 1.21
/// refuses a `null` enum member).
pub fn crd() -> Result<CustomResourceDefinition, serde_json::Error> {
    let mut value = serde_json::to_value(crd::PoolConfig::crd())?;
    strip_null_enum_members(&mut value);
    serde_json::from_value(value)
}

/// The CRD as YAML, exactly as `droid-pool-operator crd` prints it and `deploy/crds/` holds it.
pub fn crd_yaml() -> Result<String, CrdError> {
    Ok(serde_yaml::to_string(&crd()?)?)
}

#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Yaml(#[from] serde_yaml::Error),
}

fn strip_null_enum_members(v: &mut Value) {
    match v {
        Value::Object(map) => {
            if let Some(Value::Array(members)) = map.get_mut("enum") {
                members.retain(|m| !m.is_null());
            }
            map.values_mut().for_each(strip_null_enum_members);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_null_enum_members),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn committed_crd_is_current() {
        let generated = super::crd_yaml().unwrap();
        for committed in [
            include_str!("../../deploy/crds/poolconfig.yaml"),
            include_str!("../../charts/droid-pool/crds/poolconfig.yaml"),
        ] {
            assert!(
                committed == generated,
                "a committed CRD copy is stale: run scripts/check-crd.sh --write"
            );
        }
        assert!(!generated.contains("- null"));
    }
}
