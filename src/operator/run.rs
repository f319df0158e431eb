//! The operator process: metrics and probes first, then (as leader, when leader election is
//! on) the controller, until the shutdown token is cancelled. Shutdown is graceful: the
//! controller finishes reconciliations in flight, then the Lease is released.

use std::net::SocketAddr;
use std::sync::Arc;

use kube::Client;
use thiserror::Error;
use tokio_util::sync::CancellationToken;

use super::controller;
use super::leader::{self, Elector, LeaseConfig};
use super::metrics::{self, Metrics};
use super::policy::Allowlist;

/// How the operator runs.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// `/metrics`, `/livez`, `/readyz`.
    pub metrics_addr: SocketAddr,
    /// Watch only these namespaces (all when empty).
    pub namespaces: Vec<String>,
    /// The images and ServiceAccounts PoolConfigs may name.
    pub allow: Allowlist,
    /// Leader election; `None` runs the controller at once (a single replica).
    pub lease: Option<LeaseConfig>,
    /// This replica's name in Events.
    pub instance: Option<String>,
}

#[derive(Debug, Error)]
pub enum RunError {
    #[error("cannot serve metrics: {0}")]
    Serve(#[from] std::io::Error),
    #[error("cannot register metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("lost the leader Lease {0}; exiting so a restart rejoins as a standby")]
    LeaseLost(String),
}

/// Runs until `shutdown` is cancelled (`Ok`) or leadership is lost (`Err(LeaseLost)`).
/// `on_serving` gets the bound metrics address (tests bind port 0).
pub async fn run(
    client: Client,
    opts: RunOptions,
    shutdown: CancellationToken,
    on_serving: impl FnOnce(SocketAddr),
) -> Result<(), RunError> {
    let metrics = Arc::new(Metrics::new()?);
    let (addr, http) = metrics::serve(opts.metrics_addr, metrics.clone(), shutdown.clone()).await?;
    tracing::info!(%addr, "operator metrics and probes");
    on_serving(addr);
    let version = client.apiserver_version().await?;
    tracing::info!(server = %version.git_version, "API server reached");
    metrics.set_ready();
    let ctx = controller::context(
        client.clone(),
        metrics.clone(),
        opts.instance.clone(),
        opts.allow.clone(),
    )
    .await?;
    let scope = if opts.namespaces.is_empty() {
        "every namespace".to_owned()
    } else {
        opts.namespaces.join(", ")
    };
    tracing::info!(
        %scope,
        images = %list(opts.allow.images()),
        service_accounts = %list(opts.allow.service_accounts()),
        "watching PoolConfigs"
    );
    let ns = opts.namespaces.clone();
    let result = match opts.lease {
        None => {
            controller::run_scoped(ctx, &ns, shutdown.clone()).await;
            Ok(())
        }
        Some(lease) => {
            let elector = Elector::new(client, lease);
            lead(&elector, &metrics, &shutdown, |stop| async move {
                controller::run_scoped(ctx, &ns, stop).await;
            })
            .await
        }
    };
    shutdown.cancel();
    if let Err(e) = http.await {
        tracing::warn!(error = %e, "metrics server task failed");
    }
    tracing::info!("operator stopped");
    result
}

fn list(patterns: &[super::policy::Pattern]) -> String {
    let all: Vec<String> = patterns.iter().map(ToString::to_string).collect();
    if all.is_empty() {
        "none".into()
    } else {
        all.join(",")
    }
}

/// Waits for the Lease, then runs `work` until shutdown or loss of the Lease.
async fn lead<F, Fut>(
    elector: &Elector,
    metrics: &Metrics,
    shutdown: &CancellationToken,
    work: F,
) -> Result<(), RunError>
where
    F: FnOnce(CancellationToken) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let cfg = elector.config();
    tracing::info!(lease = %cfg.name, namespace = %cfg.namespace, identity = %cfg.identity, "waiting for the leader Lease");
    if !leader::acquire(elector, shutdown).await {
        return Ok(());
    }
    tracing::info!("leading");
    metrics.leader.set(1);
    let stop = shutdown.child_token();
    let (kept, ()) = tokio::join!(
        async {
            let kept = leader::hold(elector, &stop).await;
            // Stop the controller either way: on loss it must not act a moment longer.
            stop.cancel();
            kept
        },
        work(stop.clone()),
    );
    metrics.leader.set(0);
    if !kept {
        return Err(RunError::LeaseLost(cfg.name.clone()));
    }
    match elector.release().await {
        Ok(()) => tracing::info!("leader Lease released"),
        Err(e) => {
            tracing::warn!(error = %e, "cannot release the leader Lease; it expires by itself")
        }
    }
    Ok(())
}
