//! The labels and metadata every object rendered for a PoolConfig carries.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::ResourceExt;

use crate::operator::crd::PoolConfig;

/// The labels on every object rendered for `pc` (and, for deployments, the pod selector).
pub fn labels(pc: &PoolConfig) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".into(), "droid-pool".into()),
        ("app.kubernetes.io/instance".into(), pc.name_any()),
        ("app.kubernetes.io/component".into(), "pooler".into()),
        (
            "app.kubernetes.io/managed-by".into(),
            "droid-pool-operator".into(),
        ),
    ])
}

/// The labels that select a deployment's pods: the stable subset of `labels`.
pub fn selector_labels(pc: &PoolConfig) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".into(), "droid-pool".into()),
        ("app.kubernetes.io/instance".into(), pc.name_any()),
    ])
}

/// `selector_labels` as a label selector string (`k=v,k=v`).
pub fn selector_string(pc: &PoolConfig) -> String {
    selector_labels(pc)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The metadata of an object named `name` that `pc` owns, labelled as every rendered object.
pub(super) fn meta_of(pc: &PoolConfig, name: String, owner: &OwnerReference) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: pc.namespace(),
        labels: Some(labels(pc)),
        owner_references: Some(vec![owner.clone()]),
        ..ObjectMeta::default()
    }
}
