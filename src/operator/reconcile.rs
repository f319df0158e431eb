//! One reconciliation of a PoolConfig: count the poolers, check the Secrets, render, apply
//! the owned objects with server-side apply under one field manager, then publish status and
//! Events. Spec errors and missing Secrets become conditions (no error, no crash loop); API
//! errors return `Err` and are retried with backoff by `error_policy`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::ResourceExt;

use super::admin_secret::{self, AdminSecret};
use super::claim;
use super::cnpg::{cloud_native_pg, CNPG_POLL};
pub use super::context::{Context, Error, FIELD_MANAGER};
use super::crd::{BudgetScope, PoolConfig, Target};
use super::deploy::{self, apply};
use super::loaded::Reports;
use super::observe::{self, ObserveError};
use super::publish::{event, not_rendered, publish};
use super::render::{self, Rendered};
use super::status::{Verdict, CONFIG_RENDERED, DEGRADED, READY, RECONCILING, STALLED};
use super::verdicts::{self, loaded_verdict, rendered_verdicts};
use crate::config::{READS_ADMIN_TOKEN_FILE, READS_MAX_DB_CONNECTIONS, READS_MOCK_SECRET_FILE};

/// A healthy PoolConfig is looked at again this often even without a watch event.
const RESYNC: Duration = Duration::from_secs(300);
/// A missing Secret is checked again this often (it may be created any time).
const SECRET_RETRY: Duration = Duration::from_secs(5);
/// A name conflict is checked again this often (the other object may be removed any time,
/// and it carries no label the watches would see).
const CONFLICT_RETRY: Duration = Duration::from_secs(30);
/// A rollout in progress is looked at again this often besides the Deployment's own events.
const ROLLOUT_RETRY: Duration = Duration::from_secs(10);
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
    let seen = match observe_all(pc, ctx, &ns).await? {
        Ok(seen) => seen,
        Err(stop) => {
            not_rendered(pc, ctx, stop.reason, stop.message).await?;
            return Ok(stop
                .retry
                .map_or_else(Action::await_change, Action::requeue));
        }
    };
    let peers = observe::peer_pods(&seen.poolers.pods);
    let rendered = match render::render_observed(&pc.spec, seen.poolers.count, seen.facts, &peers) {
        Ok(r) => r,
        Err(e) => return not_rendered(pc, ctx, "InvalidSpec", e.to_string()).await,
    };
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
                loaded_verdict(None, &seen.reports, &rendered.hash, &cm_name)
            }
        }
        Target::Deployment(t) => {
            let rollout = deploy::deploy(pc, ctx, &ns, t, &cm_name, &rendered).await?;
            loaded_verdict(Some(rollout), &seen.reports, &rendered.hash, &cm_name)
        }
    };
    finish(pc, ctx, &rendered, ready, seen).await
}

/// What a reconciliation found before it renders.
struct Observed {
    poolers: observe::Poolers,
    facts: render::Facts,
    switchover: Option<Verdict>,
    reports: Reports,
    /// Which running poolers read `pool.max_db_connections`.
    readers: render::Readers,
    /// Where the admin token is, or why the config does not point at it yet.
    admin: String,
}

/// A problem only a human can fix, found before anything is applied, and when to look again
/// (`None`: at the PoolConfig's next change).
struct Stop {
    reason: &'static str,
    message: String,
    retry: Option<Duration>,
}

impl Stop {
    fn new(reason: &'static str, message: String, retry: Option<Duration>) -> Self {
        Stop {
            reason,
            message,
            retry,
        }
    }
}

/// Everything read before rendering, in the order a refusal must come: names and the
/// allowlist before anything is read for the PoolConfig; the Secrets it names and the names
/// of what it would write before anything is created; then the admin Secret (made here the
/// first time), the CloudNativePG Cluster and the poolers' own reports.
async fn observe_all(
    pc: &PoolConfig,
    ctx: &Context,
    ns: &str,
) -> Result<Result<Observed, Stop>, Error> {
    if let Err(e) = render::check_names(&pc.spec) {
        return Ok(Err(Stop::new("InvalidSpec", e.to_string(), None)));
    }
    if let Err(r) = ctx.allow.check(pc) {
        return Ok(Err(Stop::new(r.reason, r.message, None)));
    }
    let poolers = match observe::poolers(&ctx.client, ns, pc).await {
        Ok(n) => n,
        Err(ObserveError::Selector(e)) => {
            return Ok(Err(Stop::new("InvalidSpec", e.to_string(), None)))
        }
        Err(ObserveError::Kube(e)) => return Err(e.into()),
    };
    if let Some(missing) = observe::missing_secret(&ctx.client, ns, pc).await? {
        let stop = Stop::new("SecretNotFound", missing.message, Some(SECRET_RETRY));
        return Ok(Err(stop));
    }
    if let Some(conflict) = claim::first_conflict(pc, ctx, ns).await? {
        let stop = Stop::new("NameConflict", conflict.to_string(), Some(CONFLICT_RETRY));
        return Ok(Err(stop));
    }
    let secret = render::admin_secret_name(pc);
    let token = match admin_secret::ensure(&ctx.client, ns, pc).await? {
        AdminSecret::Ready { token } => token,
        AdminSecret::Conflict(c) => {
            let stop = Stop::new("NameConflict", c.to_string(), Some(CONFLICT_RETRY));
            return Ok(Err(stop));
        }
        AdminSecret::Invalid(m) => {
            return Ok(Err(Stop::new("AdminSecretInvalid", m, Some(SECRET_RETRY))))
        }
    };
    let (mut facts, switchover) = cloud_native_pg(pc, ctx, ns).await?;
    let reports = Reports::ask(&poolers.pods, Some((&secret, &token))).await;
    let readers = reports.readers(READS_MAX_DB_CONNECTIONS);
    let status = pc.status.as_ref();
    let written = status.and_then(|s| s.budget_scope) == Some(BudgetScope::Database);
    facts.db_limit_readable = readers.all_read(written);
    let pods = poolers.pods.iter();
    let unmounted = pods
        .filter(|p| !render::mounts_admin_secret(p, &secret))
        .count();
    let admin_readers =
        [READS_ADMIN_TOKEN_FILE, READS_MOCK_SECRET_FILE].map(|s| reports.readers(s));
    let written = status.and_then(|s| s.admin_token_secret.as_ref()).is_some();
    facts.admin_files = verdicts::admin_files(unmounted, &admin_readers, written);
    let admin = verdicts::admin_note(facts.admin_files, &secret, unmounted, &admin_readers[0]);
    Ok(Ok(Observed {
        poolers,
        facts,
        switchover,
        reports,
        readers,
        admin,
    }))
}

/// Publishes the status and Events of a config that was applied; the next look's delay.
async fn finish(
    pc: &PoolConfig,
    ctx: &Context,
    rendered: &Rendered,
    ready: Verdict,
    seen: Observed,
) -> Result<Action, Error> {
    let (rendered_v, degraded) = rendered_verdicts(rendered, &seen.readers, &seen.admin);
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
    verdicts.extend(seen.switchover.clone());
    publish(pc, ctx, &verdicts, Some(rendered), true).await?;
    if changed {
        let updated = Verdict::new(CONFIG_RENDERED, true, "ConfigUpdated", rendered_v.message);
        event(ctx, pc, EventType::Normal, &updated).await;
    }
    if degraded.status {
        event(ctx, pc, EventType::Warning, &degraded).await;
    }
    // A share held per pool until the poolers read the per-database limit waits on pods
    // coming and going: looked at again soon, so that a pod event the watch missed (a watch
    // restarted across a deletion) does not leave it for a resync.
    let budget_waits = rendered.sizing.scope == Some(BudgetScope::Pool)
        && seen.readers.reading < seen.readers.asked + seen.readers.failing;
    let next = if rolling || budget_waits {
        ROLLOUT_RETRY
    } else {
        RESYNC
    };
    // A Cluster's status is also watched where its CRD is installed; this covers the rest.
    Ok(Action::requeue(match seen.switchover {
        Some(_) => next.min(CNPG_POLL),
        None => next,
    }))
}

pub use super::render::config_map_name;
