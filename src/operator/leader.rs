//! Leader election with a `coordination.k8s.io/v1` Lease, so two operator replicas can run
//! and only one reconciles. As in client-go, a holder's lease counts as expired when its record
//! has not changed for `lease_duration` by *our* clock (no trust in the other node's clock),
//! and every write is a compare-and-swap on `resourceVersion`.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::Client;
use tokio_util::sync::CancellationToken;

/// Where the Lease lives and who we are.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    /// This replica's identity (its pod name).
    pub identity: String,
    /// A holder that has not renewed for this long loses the lease.
    pub lease_duration: Duration,
    /// How often the holder renews and a candidate retries.
    pub retry_period: Duration,
}

impl LeaseConfig {
    pub fn new(namespace: String, name: String, identity: String) -> Self {
        LeaseConfig {
            namespace,
            name,
            identity,
            lease_duration: Duration::from_secs(15),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// One candidate for the Lease.
pub struct Elector {
    api: Api<Lease>,
    cfg: LeaseConfig,
    /// The other holder's record as last seen, and when we first saw it so.
    observed: Mutex<Option<(String, Instant)>>,
}

impl Elector {
    pub fn new(client: Client, cfg: LeaseConfig) -> Self {
        Elector {
            api: Api::namespaced(client, &cfg.namespace),
            cfg,
            observed: Mutex::new(None),
        }
    }

    pub fn config(&self) -> &LeaseConfig {
        &self.cfg
    }

    /// One attempt to take or renew the Lease; `Ok(true)` while we hold it.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        let now = MicroTime(Timestamp::now());
        let Some(lease) = self.api.get_opt(&self.cfg.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.cfg.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(now.clone(), now, 0)),
            };
            return lost_race(self.api.create(&PostParams::default(), &lease).await);
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let ours = holder == self.cfg.identity;
        if !ours && !holder.is_empty() && !self.expired(&spec) {
            return Ok(false);
        }
        let transitions = spec.lease_transitions.unwrap_or(0);
        let (acquired, transitions) = if ours {
            (
                spec.acquire_time.clone().unwrap_or(now.clone()),
                transitions,
            )
        } else {
            (now.clone(), transitions + 1)
        };
        let mut next = lease;
        next.spec = Some(self.spec(acquired, now, transitions));
        // `replace` carries the resourceVersion we read: a concurrent writer makes it 409.
        lost_race(
            self.api
                .replace(&self.cfg.name, &PostParams::default(), &next)
                .await,
        )
    }

    fn spec(&self, acquired: MicroTime, renewed: MicroTime, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.cfg.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.cfg.lease_duration.as_secs()).unwrap_or(i32::MAX),
            ),
            acquire_time: Some(acquired),
            renew_time: Some(renewed),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    /// Whether the other holder's record has stood still for its lease duration.
    fn expired(&self, spec: &LeaseSpec) -> bool {
        let record = format!(
            "{:?}/{:?}",
            spec.holder_identity,
            spec.renew_time.as_ref().map(|t| t.0)
        );
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.cfg.lease_duration, Duration::from_secs);
        let mut seen = self.observed.lock().unwrap_or_else(|p| p.into_inner());
        match &*seen {
            Some((r, since)) if *r == record => since.elapsed() >= duration,
            _ => {
                *seen = Some((record, Instant::now()));
                false
            }
        }
    }

    /// Gives the Lease up (empty holder) so a standby takes over at once, not after expiry.
    pub async fn release(&self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.cfg.name).await? else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.cfg.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        lost_race(
            self.api
                .replace(&self.cfg.name, &PostParams::default(), &lease)
                .await,
        )
        .map(|_| ())
    }
}

/// A 409 (someone else wrote first) is a lost race, not an error.
fn lost_race(result: Result<Lease, kube::Error>) -> Result<bool, kube::Error> {
    match result {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Waits until this replica holds the Lease; `false` if `shutdown` came first.
pub async fn acquire(elector: &Elector, shutdown: &CancellationToken) -> bool {
    loop {
        match elector.try_acquire_or_renew().await {
            Ok(true) => return true,
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "cannot read or take the leader Lease"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return false,
            _ = tokio::time::sleep(elector.cfg.retry_period) => {}
        }
    }
}

/// Renews the Lease until `stop` is cancelled (returns `true`) or the Lease is lost: another
/// holder took it, or renewals failed for longer than the lease duration (returns `false`).
pub async fn hold(elector: &Elector, stop: &CancellationToken) -> bool {
    let mut last_renewal = Instant::now();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return true,
            _ = tokio::time::sleep(elector.cfg.retry_period) => {}
        }
        match elector.try_acquire_or_renew().await {
            Ok(true) => last_renewal = Instant::now(),
            Ok(false) => return false,
            Err(e) => {
                tracing::warn!(error = %e, "cannot renew the leader Lease");
                // Give up two retry periods before others may take it (the next attempt
                // could come too late): never act as a second leader.
                let margin = elector.cfg.retry_period * 2;
                if last_renewal.elapsed() + margin >= elector.cfg.lease_duration {
                    return false;
                }
            }
        }
    }
}
