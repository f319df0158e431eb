//! No takeover: the operator writes an object only where the name is free or already its own.
//! A forced server-side apply would otherwise take over any same-named object's fields (a
//! user's Service would get the pooler's selector) and make the PoolConfig its controller
//! owner (deleting the PoolConfig would delete it).

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use kube::api::{Api, DynamicObject};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::context::Context;
use super::crd::{PoolConfig, Target};
use super::render::{self, config_map_name};

/// An object the PoolConfig would write that exists and belongs to something else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub kind: &'static str,
    pub name: String,
}

impl std::fmt::Display for Conflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} exists and is not owned by this PoolConfig: nothing was applied; rename the \
             PoolConfig (or the target's configMapName) or remove that object",
            self.kind, self.name
        )
    }
}

/// Whether `obj` has `pc` as its controller owner.
pub fn owned_by<K: Resource>(obj: &K, pc: &PoolConfig) -> bool {
    let Some(uid) = pc.uid() else {
        return false;
    };
    obj.owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

async fn check<K>(
    api: Api<K>,
    kind: &'static str,
    name: &str,
    pc: &PoolConfig,
) -> Result<Option<Conflict>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    Ok(match api.get_opt(name).await? {
        Some(obj) if !owned_by(&obj, pc) => Some(Conflict {
            kind,
            name: name.to_owned(),
        }),
        _ => None,
    })
}

/// The first object `pc` would write that belongs to something else, if any.
pub async fn first_conflict(
    pc: &PoolConfig,
    ctx: &Context,
    ns: &str,
) -> Result<Option<Conflict>, kube::Error> {
    let c = &ctx.client;
    let cm = config_map_name(pc);
    if let Some(found) = check(
        Api::<ConfigMap>::namespaced(c.clone(), ns),
        "ConfigMap",
        &cm,
        pc,
    )
    .await?
    {
        return Ok(Some(found));
    }
    let Target::Deployment(_) = &pc.spec.target else {
        return Ok(None);
    };
    let name = pc.name_any();
    if let Some(found) = check(
        Api::<Deployment>::namespaced(c.clone(), ns),
        "Deployment",
        &name,
        pc,
    )
    .await?
    {
        return Ok(Some(found));
    }
    if let Some(found) = check(
        Api::<Service>::namespaced(c.clone(), ns),
        "Service",
        &name,
        pc,
    )
    .await?
    {
        return Ok(Some(found));
    }
    // Only when the operator makes the ServiceAccount (the pod template may name the user's).
    if render::service_account(pc).is_some() {
        let sa = render::service_account_name(pc);
        let api = Api::<ServiceAccount>::namespaced(c.clone(), ns);
        if let Some(found) = check(api, "ServiceAccount", &sa, pc).await? {
            return Ok(Some(found));
        }
    }
    let pdbs = Api::<DynamicObject>::namespaced_with(c.clone(), ns, &ctx.pdb);
    check(pdbs, "PodDisruptionBudget", &name, pc).await
}
