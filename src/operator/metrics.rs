//! The operator's own metrics and its HTTP endpoint (`/metrics`, `/livez`, `/readyz`).
//! The registry is owned (never the process-wide default), so tests can run several
//! controllers in one process. Labels are bounded: result and reason.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use prometheus::{Histogram, HistogramOpts, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};
use tokio_util::sync::CancellationToken;

/// Every metric of one operator process, plus the readiness latch its `/readyz` reports.
pub struct Metrics {
    registry: Registry,
    /// Reconciliations by result (`ok`, `error`).
    pub reconciles: IntCounterVec,
    /// Failed reconciliations by reason (a bounded error kind).
    pub failures: IntCounterVec,
    pub duration: Histogram,
    /// 1 while this process holds the leader Lease.
    pub leader: IntGauge,
    /// Per PoolConfig and condition type: 1 while the condition is True. For alerts on a
    /// Degraded or Stalled PoolConfig; one series per condition of each PoolConfig.
    conditions: IntGaugeVec,
    /// The (namespace, name) pairs `conditions` has series for, so deleted ones are dropped.
    reported: Mutex<BTreeSet<(String, String)>>,
    ready: AtomicBool,
}

impl Metrics {
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new_custom(Some("droid_pool_operator".into()), None)?;
        let reconciles = IntCounterVec::new(
            Opts::new("reconciliations_total", "Reconciliations by result"),
            &["result"],
        )?;
        let failures = IntCounterVec::new(
            Opts::new(
                "reconcile_failures_total",
                "Failed reconciliations by reason",
            ),
            &["reason"],
        )?;
        let duration = Histogram::with_opts(
            HistogramOpts::new("reconcile_duration_seconds", "Time of one reconciliation")
                .buckets(vec![0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]),
        )?;
        let leader = IntGauge::new(
            "leader",
            "Whether this process holds the leader Lease (1) or not (0)",
        )?;
        registry.register(Box::new(reconciles.clone()))?;
        registry.register(Box::new(failures.clone()))?;
        registry.register(Box::new(duration.clone()))?;
        let conditions = IntGaugeVec::new(
            Opts::new(
                "poolconfig_condition",
                "Whether a PoolConfig's condition of this type is True (1) or not (0)",
            ),
            &["namespace", "poolconfig", "type"],
        )?;
        registry.register(Box::new(leader.clone()))?;
        registry.register(Box::new(conditions.clone()))?;
        Ok(Metrics {
            registry,
            reconciles,
            failures,
            duration,
            leader,
            conditions,
            reported: Mutex::new(BTreeSet::new()),
            ready: AtomicBool::new(false),
        })
    }

    /// Publishes the conditions just written to a PoolConfig's status.
    pub fn set_conditions(&self, ns: &str, name: &str, conditions: &[Condition]) {
        for c in conditions {
            let value = i64::from(c.status == "True");
            self.conditions
                .with_label_values(&[ns, name, c.type_.as_str()])
                .set(value);
        }
        self.reported
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((ns.to_owned(), name.to_owned()));
    }

    /// Drops the series of PoolConfigs for which `exists` is false (deleted ones).
    pub fn retain_poolconfigs(&self, exists: impl Fn(&str, &str) -> bool) {
        let mut reported = self.reported.lock().unwrap_or_else(|p| p.into_inner());
        reported.retain(|(ns, name)| {
            if exists(ns, name) {
                return true;
            }
            for t in super::status::TYPES {
                let _ = self.conditions.remove_label_values(&[ns, name, t]);
            }
            false
        });
    }

    /// Records one reconciliation.
    pub fn observe(&self, elapsed: Duration, failure: Option<&'static str>) {
        self.duration.observe(elapsed.as_secs_f64());
        let result = if failure.is_some() { "error" } else { "ok" };
        self.reconciles.with_label_values(&[result]).inc();
        if let Some(reason) = failure {
            self.failures.with_label_values(&[reason]).inc();
        }
    }

    /// Latches readiness: the API server was reached.
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        let encoder = prometheus::TextEncoder::new();
        if let Err(e) = encoder.encode_utf8(&self.registry.gather(), &mut out) {
            tracing::warn!(error = %e, "cannot encode metrics");
        }
        out
    }
}

fn router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/metrics", get(render))
        .route("/livez", get(|| async { (StatusCode::OK, "live: ok\n") }))
        .route("/readyz", get(readyz))
        .with_state(metrics)
}

async fn render(State(m): State<Arc<Metrics>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        m.render(),
    )
        .into_response()
}

async fn readyz(State(m): State<Arc<Metrics>>) -> Response {
    if m.is_ready() {
        (StatusCode::OK, "ready: ok\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "ready: not yet\n").into_response()
    }
}

/// Binds `addr` now (a bad address fails startup) and serves until `shutdown`.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let task = tokio::spawn(async move {
        let served = axum::serve(listener, router(metrics))
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "operator metrics server stopped");
        }
    });
    Ok((local, task))
}
