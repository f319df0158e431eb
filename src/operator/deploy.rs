//! The deployment target's objects: server-side apply of the Deployment, Service and
//! PodDisruptionBudget (and of any owned object, under one field manager), their removal
//! after a switch to sidecars, and the `Ready` verdict read from the Deployment.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Service, ServiceAccount};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::ResourceExt;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::claim::owned_by;
use super::context::{Context, Error, FIELD_MANAGER};
use super::crd::{DeploymentTarget, PoolConfig};
use super::publish::event;
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
    if let Some(sa) = render::service_account(pc) {
        apply(
            Api::<ServiceAccount>::namespaced(ctx.client.clone(), ns),
            &render::service_account_name(pc),
            &sa,
        )
        .await?;
    }
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
    } else if let Some(p) = pdbs.get_opt(&name).await? {
        if owned_by(&p, pc) {
            delete_if_present(pdbs.delete(&name, &DeleteParams::default()).await)?;
        }
    }
    Ok(rollout(&live))
}

/// `Ready` from a Deployment: its rollout of the current template has completed. The
/// controller has seen the newest generation, every desired pod runs it and is available,
/// and no pod of an older template is left (those still serve the old settings).
pub(super) fn rollout(d: &Deployment) -> Verdict {
    let desired = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let st = d.status.clone().unwrap_or_default();
    let seen = st.observed_generation.unwrap_or(0) >= d.metadata.generation.unwrap_or(0);
    let updated = st.updated_replicas.unwrap_or(0);
    let available = st.available_replicas.unwrap_or(0);
    let total = st.replicas.unwrap_or(0);
    let old = (total - updated).max(0);
    let message = format!(
        "{updated}/{desired} pooler pods updated, {available} available, {old} of an older \
         version left"
    );
    if desired == 0 {
        return Verdict::new(READY, false, "ScaledToZero", message);
    }
    if !seen {
        let m = "the Deployment controller has not seen the newest template yet".to_owned();
        return Verdict::new(READY, false, "RolloutInProgress", m);
    }
    if updated >= desired && available >= desired && old == 0 {
        Verdict::new(READY, true, "PoolersReady", message)
    } else {
        Verdict::new(READY, false, "RolloutInProgress", message)
    }
}

/// After a switch from the deployment target to sidecars, removes the poolers this
/// PoolConfig deployed: left running they would keep server connections outside the budget.
pub(super) async fn undeploy(pc: &PoolConfig, ctx: &Context, ns: &str) -> Result<(), Error> {
    let name = pc.name_any();
    let deployments = Api::<Deployment>::namespaced(ctx.client.clone(), ns);
    let Some(d) = deployments.get_opt(&name).await? else {
        return Ok(());
    };
    if !owned_by(&d, pc) {
        return Ok(());
    }
    let dp = DeleteParams::default();
    delete_if_present(deployments.delete(&name, &dp).await)?;
    // Each only if it is this PoolConfig's: a same-named object of someone else stays.
    let services = Api::<Service>::namespaced(ctx.client.clone(), ns);
    if services
        .get_opt(&name)
        .await?
        .is_some_and(|o| owned_by(&o, pc))
    {
        delete_if_present(services.delete(&name, &dp).await)?;
    }
    let pdbs = Api::<DynamicObject>::namespaced_with(ctx.client.clone(), ns, &ctx.pdb);
    if pdbs.get_opt(&name).await?.is_some_and(|o| owned_by(&o, pc)) {
        delete_if_present(pdbs.delete(&name, &dp).await)?;
    }
    let accounts = Api::<ServiceAccount>::namespaced(ctx.client.clone(), ns);
    let sa = render::service_account_name(pc);
    if accounts
        .get_opt(&sa)
        .await?
        .is_some_and(|o| owned_by(&o, pc))
    {
        delete_if_present(accounts.delete(&sa, &dp).await)?;
    }
    let v = Verdict::new(
        READY,
        true,
        "PoolersRemoved",
        format!(
            "target is now sidecar: deleted the Deployment, Service, PDB {name} and \
             ServiceAccount {sa}"
        ),
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
