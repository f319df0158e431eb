//! The deployment target's objects: server-side apply of the Deployment, Service and
//! PodDisruptionBudget (and of any owned object, under one field manager), their removal
//! after a switch to sidecars, and the `Ready` verdict read from the Deployment.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::ResourceExt;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::crd::{DeploymentTarget, PoolConfig};
use super::reconcile::{event, Context, Error, FIELD_MANAGER};
use super::render::{self, Rendered};
use super::status::{Verdict, READY};

/// Creates or updates the poolers of a deployment target; `Ready` from the live Deployment.
pub(super) async fn deploy(
    pc: &PoolConfig,
    ctx: &Context,
    ns: &str,
    t: &DeploymentTarget,
    cm_name: &str,
    rendered: &Rendered,
) -> Result<Verdict, Error> {
    let unstored = || Error::Unstored(pc.name_any());
    let name = pc.name_any();
    let d = render::deployment(pc, t, cm_name, rendered).ok_or_else(unstored)?;
    let live = apply(
        Api::<Deployment>::namespaced(ctx.client.clone(), ns),
        &name,
        &d,
    )
    .await?;
    let svc = render::service(pc, t).ok_or_else(unstored)?;
    apply(
        Api::<Service>::namespaced(ctx.client.clone(), ns),
        &name,
        &svc,
    )
    .await?;
    let pdbs = Api::<DynamicObject>::namespaced_with(ctx.client.clone(), ns, &ctx.pdb);
    if t.pod_disruption_budget.enabled {
        let mut pdb = serde_json::to_value(render::pdb(pc, t).ok_or_else(unstored)?)?;
        // Same fields in policy/v1 and policy/v1beta1; only the version differs.
        pdb["apiVersion"] = ctx.pdb.api_version.clone().into();
        apply(pdbs, &name, &pdb).await?;
    } else {
        delete_if_present(pdbs.delete(&name, &DeleteParams::default()).await)?;
    }
    let desired = live.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let ready = live
        .status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0);
    let message = format!("{ready}/{desired} pooler pods ready");
    Ok(match (desired, ready >= desired) {
        (0, _) => Verdict::new(READY, false, "ScaledToZero", message),
        (_, true) => Verdict::new(READY, true, "PoolersReady", message),
        (_, false) => Verdict::new(READY, false, "PoolersNotReady", message),
    })
}

/// After a switch from the deployment target to sidecars, removes the poolers this
/// PoolConfig deployed: left running they would keep server connections outside the budget.
pub(super) async fn undeploy(pc: &PoolConfig, ctx: &Context, ns: &str) -> Result<(), Error> {
    let name = pc.name_any();
    let deployments = Api::<Deployment>::namespaced(ctx.client.clone(), ns);
    let Some(d) = deployments.get_opt(&name).await? else {
        return Ok(());
    };
    let ours = d
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && Some(&o.uid) == pc.uid().as_ref());
    if !ours {
        return Ok(());
    }
    let dp = DeleteParams::default();
    delete_if_present(deployments.delete(&name, &dp).await)?;
    let services = Api::<Service>::namespaced(ctx.client.clone(), ns);
    delete_if_present(services.delete(&name, &dp).await)?;
    let pdbs = Api::<DynamicObject>::namespaced_with(ctx.client.clone(), ns, &ctx.pdb);
    delete_if_present(pdbs.delete(&name, &dp).await)?;
    let v = Verdict::new(
        READY,
        true,
        "PoolersRemoved",
        format!("target is now sidecar: deleted the Deployment, Service and PDB {name}"),
    );
    event(ctx, pc, EventType::Normal, &v).await;
    Ok(())
}

/// A delete whose object is already gone succeeded.
fn delete_if_present<T>(result: Result<T, kube::Error>) -> Result<(), Error> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Server-side apply under `FIELD_MANAGER`, forced: the operator owns these fields.
pub(super) async fn apply<K, P>(api: Api<K>, name: &str, obj: &P) -> Result<K, kube::Error>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
    P: Serialize + std::fmt::Debug,
{
    let params = PatchParams::apply(FIELD_MANAGER).force();
    api.patch(name, &params, &Patch::Apply(obj)).await
}
