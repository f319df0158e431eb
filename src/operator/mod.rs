//! The Kubernetes operator: reconciles `PoolConfig` objects into the pooler's config file (a
//! ConfigMap that sidecars mount) and, for the deployment target, into a Deployment, Service
//! and PodDisruptionBudget of poolers. Shares only `config` types with the rest of the crate.

pub mod crd;
pub mod render;

use kube::CustomResourceExt;

/// The CRD as YAML, exactly as `droid-pool-operator crd` prints it and `deploy/crds/` holds it.
pub fn crd_yaml() -> Result<String, serde_yaml::Error> {
    serde_yaml::to_string(&crd::PoolConfig::crd())
}
