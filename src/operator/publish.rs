//! Publishing what a reconciliation decided: the status subresource (conditions, the
//! applied sizing, the admin Secret in force), the conditions' metric series, and Events.

use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};

use super::context::{Context, Error, FIELD_MANAGER};
use super::crd::{PoolConfig, PoolConfigStatus};
use super::render::{self, Rendered};
use super::status::{self, Verdict, CONFIG_RENDERED, DEGRADED, READY, RECONCILING, STALLED};

/// Records a problem only a human can fix (an invalid spec, a missing Secret, a name
/// conflict, an image or ServiceAccount outside the allowlist): nothing is applied until it
/// is fixed.
pub(super) async fn not_rendered(
    pc: &PoolConfig,
    ctx: &Context,
    reason: &'static str,
    message: String,
) -> Result<Action, Error> {
    let verdicts = [
        Verdict::new(READY, false, reason, message.clone()),
        Verdict::new(CONFIG_RENDERED, false, reason, message.clone()),
        Verdict::new(DEGRADED, true, reason, message.clone()),
        Verdict::new(RECONCILING, false, reason, "waiting for a change".into()),
        Verdict::new(STALLED, true, reason, message),
    ];
    publish(pc, ctx, &verdicts, None, true).await?;
    event(ctx, pc, EventType::Warning, &verdicts[1]).await;
    // A spec error waits for a spec change (the watch brings it).
    Ok(Action::await_change())
}

/// Publishes the status; `observed`: the current generation has been acted on (applied, or
/// found to need a human), so `observedGeneration` moves to it.
pub(super) async fn publish(
    pc: &PoolConfig,
    ctx: &Context,
    verdicts: &[Verdict],
    rendered: Option<&Rendered>,
    observed: bool,
) -> Result<(), Error> {
    let old = pc.status.clone().unwrap_or_default();
    let generation = if observed {
        pc.metadata.generation
    } else {
        old.observed_generation
    };
    let status = PoolConfigStatus {
        observed_generation: generation,
        config_hash: rendered.map(|r| r.hash.clone()).or(old.config_hash),
        applied_pool_size: rendered
            .map(|r| r.sizing.pool_size)
            .or(old.applied_pool_size),
        replicas: rendered.map(|r| r.sizing.poolers).or(old.replicas),
        budget: pc.spec.max_server_connections,
        budget_scope: match rendered {
            Some(r) => r.sizing.scope,
            None => old.budget_scope,
        },
        selector: Some(render::selector_string(pc)),
        admin_token_secret: match rendered {
            Some(r) => r
                .config
                .admin
                .token_file
                .as_ref()
                .map(|_| render::admin_secret_name(pc)),
            None => old.admin_token_secret,
        },
        conditions: status::conditions(&old.conditions, verdicts, generation, Timestamp::now()),
    };
    let ns = pc.namespace().unwrap_or_default();
    let api = Api::<PoolConfig>::namespaced(ctx.client.clone(), &ns);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    api.patch_status(
        &pc.name_any(),
        &params,
        &Patch::Apply(status::patch(&status)),
    )
    .await?;
    ctx.metrics
        .set_conditions(&ns, &pc.name_any(), &status.conditions);
    Ok(())
}

/// Publishes an Event about `pc`; a failure to do so is logged, never fatal.
pub(super) async fn event(ctx: &Context, pc: &PoolConfig, type_: EventType, v: &Verdict) {
    let ev = Event {
        type_,
        reason: v.reason.into(),
        note: Some(v.message.chars().take(1000).collect()),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&ev, &pc.object_ref(&())).await {
        tracing::warn!(error = %e, "cannot publish event");
    }
}
