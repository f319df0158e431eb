//! One reconciliation of a PoolConfig: count the poolers, check the Secrets, render, apply
//! the owned objects with server-side apply under one field manager, then publish status and
//! Events. Spec errors and missing Secrets become conditions (no error, no crash loop); API
//! errors return `Err` and are retried with backoff by `error_policy`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::core::ApiResource;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Client, Resource, ResourceExt};
use thiserror::Error;

use super::claim;
use super::crd::{BudgetScope, PoolConfig, PoolConfigStatus, Target};
use super::deploy::{self, apply};
use super::loaded::Reports;
use super::metrics::Metrics;
use super::observe::{self, ObserveError};
use super::render::{self, Rendered};
use super::status::{
    self, Verdict, CONFIG_RENDERED, DEGRADED, READY, RECONCILING, STALLED, SWITCHOVER,
};

/// The field manager of every server-side apply the operator makes.
pub const FIELD_MANAGER: &str = "droid-pool-operator";
/// A healthy PoolConfig is looked at again this often even without a watch event.
const RESYNC: Duration = Duration::from_secs(300);
/// A missing Secret is checked again this often (it may be created any time).
const SECRET_RETRY: Duration = Duration::from_secs(5);
/// A name conflict is checked again this often (the other object may be removed any time,
/// and it carries no label the watches would see).
const CONFLICT_RETRY: Duration = Duration::from_secs(30);
/// A rollout in progress is looked at again this often besides the Deployment's own events.
const ROLLOUT_RETRY: Duration = Duration::from_secs(10);
const BACKOFF_BASE: Duration = Duration::from_secs(1);
const BACKOFF_CAP: Duration = Duration::from_secs(300);

#[derive(Debug, Error)]
pub enum Error {
    #[error("Kubernetes API: {}", describe(.0))]
    Kube(#[from] kube::Error),
    #[error("PoolConfig {0} has no namespace or uid yet")]
    Unstored(String),
    #[error("cannot encode the PodDisruptionBudget: {0}")]
    Encode(#[from] serde_json::Error),
}

/// An API error's own message and code (its Debug form would fill an Event with noise).
fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({} {})", s.message, s.code, s.reason),
        other => other.to_string(),
    }
}

impl Error {
    /// A bounded label for the failures metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(s)) if s.code == 409 => "conflict",
            Error::Kube(kube::Error::Api(s)) if s.code == 403 => "forbidden",
            Error::Kube(kube::Error::Api(_)) => "api",
            Error::Kube(_) => "transport",
            Error::Unstored(_) => "unstored",
            Error::Encode(_) => "encode",
        }
    }
}

/// What every reconciliation needs.
pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    /// The PodDisruptionBudget API this server serves.
    pub pdb: ApiResource,
    /// Consecutive failures per PoolConfig, for the retry backoff.
    failures: Mutex<HashMap<String, u32>>,
}

impl Context {
    pub fn new(
        client: Client,
        recorder: Recorder,
        metrics: Arc<Metrics>,
        pdb: ApiResource,
    ) -> Self {
        Context {
            client,
            recorder,
            metrics,
            pdb,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Counts a failure of `key` and returns the delay before its retry: capped exponential.
    pub fn next_retry(&self, key: &str) -> Duration {
        let mut map = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let n = map.entry(key.to_owned()).or_insert(0);
        let delay = crate::resilience::backoff::ceiling(BACKOFF_BASE, BACKOFF_CAP, *n);
        *n = n.saturating_add(1);
        delay
    }

    fn forget_failures(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }
}

/// The key of `pc` in the backoff table.
pub fn key(pc: &PoolConfig) -> String {
    format!("{}/{}", pc.namespace().unwrap_or_default(), pc.name_any())
}

/// The controller's reconcile function.
pub async fn reconcile(pc: Arc<PoolConfig>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let result = converge(&pc, &ctx).await;
    ctx.metrics.observe(
        started.elapsed(),
        result.as_ref().err().map(Error::metric_label),
    );
    match &result {
        Ok(_) => ctx.forget_failures(&key(&pc)),
        Err(e) => {
            // The current generation is not applied: observedGeneration stays where it was,
            // and a Ready earned by an older generation does not stand for this one.
            let v = Verdict::new(DEGRADED, true, "ApplyFailed", e.to_string());
            let mut verdicts = vec![
                v.clone(),
                Verdict::new(RECONCILING, true, "ApplyFailed", format!("retrying: {e}")),
            ];
            let observed = pc.status.as_ref().and_then(|s| s.observed_generation);
            if observed != pc.metadata.generation {
                verdicts.push(Verdict::new(READY, false, "ApplyFailed", e.to_string()));
            }
            // Best effort: the API server may be the thing that fails.
            if let Err(e2) = publish(&pc, &ctx, &verdicts, None, false).await {
                tracing::debug!(error = %e2, "cannot record the failure in status");
            }
            event(&ctx, &pc, EventType::Warning, &v).await;
        }
    }
    result
}

/// Requeue with per-object capped exponential backoff.
pub fn error_policy(pc: Arc<PoolConfig>, err: &Error, ctx: Arc<Context>) -> Action {
    let delay = ctx.next_retry(&key(&pc));
    tracing::warn!(poolconfig = %key(&pc), error = %err, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

async fn converge(pc: &PoolConfig, ctx: &Context) -> Result<Action, Error> {
    let (Some(ns), Some(_)) = (pc.namespace(), pc.uid()) else {
        return Err(Error::Unstored(pc.name_any()));
    };
    let poolers = match observe::poolers(&ctx.client, &ns, pc).await {
        Ok(n) => n,
        Err(ObserveError::Selector(m)) => return not_rendered(pc, ctx, "InvalidSpec", m).await,
        Err(ObserveError::Kube(e)) => return Err(e.into()),
    };
    if let Some(missing) = observe::missing_secret(&ctx.client, &ns, pc).await? {
        not_rendered(pc, ctx, "SecretNotFound", missing.message).await?;
        return Ok(Action::requeue(SECRET_RETRY));
    }
    let peers = observe::peer_pods(&poolers.pods);
    let (mut facts, switchover) = cloud_native_pg(pc, ctx, &ns).await?;
    let reports = Reports::ask(&poolers.pods).await;
    let readers = reports.readers(crate::config::READS_MAX_DB_CONNECTIONS);
    let written = pc.status.as_ref().and_then(|s| s.budget_scope) == Some(BudgetScope::Database);
    facts.db_limit_readable = readers.all_read(written);
    let rendered = match render::render_observed(&pc.spec, poolers.count, facts, &peers) {
        Ok(r) => r,
        Err(e) => return not_rendered(pc, ctx, "InvalidSpec", e.to_string()).await,
    };
    if let Some(conflict) = claim::first_conflict(pc, ctx, &ns).await? {
        not_rendered(pc, ctx, "NameConflict", conflict.to_string()).await?;
        return Ok(Action::requeue(CONFLICT_RETRY));
    }
    let cm_name = config_map_name(pc);
    let cm = render::config_map(pc, &cm_name, &rendered).ok_or(Error::Unstored(pc.name_any()))?;
    apply(
        Api::<ConfigMap>::namespaced(ctx.client.clone(), &ns),
        &cm_name,
        &cm,
    )
    .await?;
    let ready = match &pc.spec.target {
        Target::Sidecar(t) => {
            deploy::undeploy(pc, ctx, &ns).await?;
            if t.pod_selector.is_none() {
                Verdict::new(
                    READY,
                    true,
                    "ConfigPublished",
                    format!(
                        "ConfigMap {cm_name} holds the config (set podSelector to have the \
                         sidecars' loads confirmed)"
                    ),
                )
            } else {
                loaded_verdict(None, &reports, &rendered.hash, &cm_name)
            }
        }
        Target::Deployment(t) => {
            let rollout = deploy::deploy(pc, ctx, &ns, t, &cm_name, &rendered).await?;
            loaded_verdict(Some(rollout), &reports, &rendered.hash, &cm_name)
        }
    };
    let (rendered_v, degraded) = rendered_verdicts(&rendered, &readers);
    let changed = pc.status.as_ref().and_then(|s| s.config_hash.as_deref()) != Some(&rendered.hash);
    let rolling = !ready.status && ready.reason != "ScaledToZero";
    let reconciling = if rolling {
        Verdict::new(RECONCILING, true, ready.reason, ready.message.clone())
    } else {
        Verdict::new(
            RECONCILING,
            false,
            "Applied",
            "the current spec is applied".into(),
        )
    };
    let stalled = Verdict::new(STALLED, false, "AsExpected", "no problem found".into());
    let mut verdicts = vec![
        ready,
        rendered_v.clone(),
        degraded.clone(),
        reconciling,
        stalled,
    ];
    verdicts.extend(switchover.clone());
    publish(pc, ctx, &verdicts, Some(&rendered), true).await?;
    if changed {
        let updated = Verdict::new(CONFIG_RENDERED, true, "ConfigUpdated", rendered_v.message);
        event(ctx, pc, EventType::Normal, &updated).await;
    }
    if degraded.status {
        event(ctx, pc, EventType::Warning, &degraded).await;
    }
    let next = if rolling { ROLLOUT_RETRY } else { RESYNC };
    // A Cluster's status is also watched where its CRD is installed; this covers the rest.
    Ok(Action::requeue(match switchover {
        Some(_) => next.min(CNPG_POLL),
        None => next,
    }))
}

/// How often a PoolConfig that follows a CloudNativePG Cluster looks at it, watch or not.
const CNPG_POLL: Duration = Duration::from_secs(5);

/// The render facts and the `Switchover` condition of a PoolConfig that follows a
/// CloudNativePG Cluster (none for the others). The pools are held while the Cluster's
/// `status.targetPrimary` differs from its `status.currentPrimary`; the poolers stay ready.
async fn cloud_native_pg(
    pc: &PoolConfig,
    ctx: &Context,
    ns: &str,
) -> Result<(render::Facts, Option<Verdict>), Error> {
    let Some(r) = &pc.spec.server.cloud_native_pg else {
        return Ok((render::Facts::default(), None));
    };
    let name = &r.cluster;
    let Some(state) = super::cnpg::cluster(&ctx.client, ns, name).await? else {
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

/// `Ready` once the running poolers have loaded config `hash` (and, for a Deployment, its
/// rollout verdict is Ready): each was asked which config it has loaded.
fn loaded_verdict(rollout: Option<Verdict>, reports: &Reports, hash: &str, cm: &str) -> Verdict {
    if let Some(v) = rollout.as_ref().filter(|v| !v.status) {
        return v.clone();
    }
    let l = reports.loaded(hash);
    let of = format!(
        "{}/{} running poolers have loaded config {hash}",
        l.current, l.asked
    );
    match (l.asked, l.all(), rollout) {
        (_, false, _) => Verdict::new(
            READY,
            false,
            "ConfigNotLoaded",
            format!("{of} (a pod's mounted ConfigMap follows within about a minute)"),
        ),
        (0, true, None) => Verdict::new(
            READY,
            true,
            "ConfigPublished",
            format!("ConfigMap {cm} holds the config; no selected pooler runs yet"),
        ),
        (_, true, None) => Verdict::new(READY, true, "ConfigLoaded", of),
        (_, true, Some(v)) => Verdict::new(READY, true, v.reason, format!("{}; {of}", v.message)),
    }
}

/// `ConfigRendered` and `Degraded` for a config that rendered and was applied; with a budget,
/// the message says where the share is held and why (`readers`).
fn rendered_verdicts(rendered: &Rendered, readers: &render::Readers) -> (Verdict, Verdict) {
    let s = rendered.sizing;
    let scope = readers
        .explain(s.scope)
        .map_or_else(String::new, |why| format!("; {why}"));
    let rendered_v = Verdict::new(
        CONFIG_RENDERED,
        true,
        "Rendered",
        format!(
            "pool size {} for {} pooler(s), config {}{scope}",
            s.pool_size, s.poolers, rendered.hash
        ),
    );
    let degraded = if s.over_budget {
        Verdict::new(
            DEGRADED,
            true,
            "BudgetExceeded",
            format!(
                "maxServerConnections is below the {} poolers: each keeps 1 connection",
                s.poolers
            ),
        )
    } else {
        Verdict::new(DEGRADED, false, "AsExpected", "no problem found".into())
    };
    (rendered_v, degraded)
}

pub use super::render::config_map_name;

/// Records a problem only a human can fix (an invalid spec, a missing Secret, a name
/// conflict): nothing is applied until it is fixed.
async fn not_rendered(
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
async fn publish(
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
