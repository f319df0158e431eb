//! What every reconciliation shares: the `Context` of dependencies (API client, recorder,
//! metrics, allowlist, retry backoff), the operator's `Error`, and the field manager its
//! server-side applies use. The steps (`admin_secret`, `claim`, `cnpg`, `deploy`, `publish`)
//! take these from here, so `reconcile` imports them and none of them imports `reconcile`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::core::ApiResource;
use kube::runtime::events::Recorder;
use kube::Client;
use thiserror::Error;

use super::metrics::Metrics;
use super::policy::Allowlist;

/// The field manager of every server-side apply the operator makes.
pub const FIELD_MANAGER: &str = "droid-pool-operator";

/// The retry backoff of a failing PoolConfig: from this, doubling, up to the cap.
const BACKOFF_BASE: Duration = Duration::from_secs(1);
const BACKOFF_CAP: Duration = Duration::from_secs(300);

/// Why a reconciliation failed: an API error is retried with backoff (`error_policy`).
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
    /// The images and ServiceAccounts PoolConfigs may name.
    pub allow: Allowlist,
    /// Consecutive failures per PoolConfig, for the retry backoff.
    failures: Mutex<HashMap<String, u32>>,
}

impl Context {
    pub fn new(
        client: Client,
        recorder: Recorder,
        metrics: Arc<Metrics>,
        pdb: ApiResource,
        allow: Allowlist,
    ) -> Self {
        Context {
            client,
            recorder,
            metrics,
            pdb,
            allow,
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

    /// Forgets the failures of `key` (it reconciled).
    pub(super) fn forget_failures(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }
}
