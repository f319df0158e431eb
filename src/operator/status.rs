//! The PoolConfig's status: its three conditions and the patch that publishes them. Pure, so
//! the rules (a transition time moves only when a status flips) are unit-tested.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use serde_json::{json, Value};

use super::crd::PoolConfigStatus;

/// The current spec reached the poolers: a deployment's rollout completed (every pod updated
/// and available, no old pod left), and every running pooler that can be found (a
/// deployment's, or a sidecar selector's) reports the current config hash as loaded.
pub const READY: &str = "Ready";
/// kstatus: the operator is still working towards the current spec (a rollout in progress,
/// an API error being retried). Flux and Argo CD wait while it is True.
pub const RECONCILING: &str = "Reconciling";
/// kstatus: the operator cannot make progress without a human (an invalid spec, a missing
/// Secret, a name conflict).
pub const STALLED: &str = "Stalled";
/// The spec rendered into a valid pooler config and the ConfigMap holds it.
pub const CONFIG_RENDERED: &str = "ConfigRendered";
/// Something needs a human: an invalid spec, a missing Secret, an API error, or a budget too
/// small for one connection per pooler.
pub const DEGRADED: &str = "Degraded";
/// With `server.cloudNativePG`: the Cluster is switching over and the pools are held.
pub const SWITCHOVER: &str = "Switchover";

/// One condition as the reconciler decides it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub type_: &'static str,
    pub status: bool,
    /// CamelCase, bounded: also the Event reason.
    pub reason: &'static str,
    pub message: String,
}

impl Verdict {
    pub fn new(type_: &'static str, status: bool, reason: &'static str, message: String) -> Self {
        Verdict {
            type_,
            status,
            reason,
            message,
        }
    }
}

/// The conditions after `verdicts`: a condition keeps its `lastTransitionTime` while its status
/// stays the same, so watchers see when it last flipped, not when it was last looked at.
/// Conditions no verdict speaks of stay as they were.
pub fn conditions(
    old: &[Condition],
    verdicts: &[Verdict],
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    let untouched = old
        .iter()
        .filter(|c| !verdicts.iter().any(|v| v.type_ == c.type_))
        .cloned();
    let mut out: Vec<Condition> = verdicts
        .iter()
        .map(|v| {
            let status = if v.status { "True" } else { "False" };
            let since = old
                .iter()
                .find(|c| c.type_ == v.type_ && c.status == status)
                .map_or(Time(now), |c| c.last_transition_time.clone());
            Condition {
                type_: v.type_.into(),
                status: status.into(),
                reason: v.reason.into(),
                message: v.message.clone(),
                observed_generation: generation,
                last_transition_time: since,
            }
        })
        .chain(untouched)
        .collect();
    // A stable order, so an unchanged status is an unchanged object (no watch event).
    out.sort_by_key(|c| order(&c.type_));
    out
}

/// Every condition type the operator writes, in status order.
pub const TYPES: [&str; 5] = [READY, CONFIG_RENDERED, DEGRADED, RECONCILING, STALLED];

fn order(type_: &str) -> usize {
    TYPES.iter().position(|t| *t == type_).unwrap_or(usize::MAX)
}

/// The server-side-apply body of the status subresource.
pub fn patch(status: &PoolConfigStatus) -> Value {
    json!({
        "apiVersion": "droidpool.io/v1alpha1",
        "kind": "PoolConfig",
        "status": status,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    #[test]
    fn transition_time_moves_only_on_flips() {
        let first = conditions(
            &[],
            &[
                Verdict::new(READY, false, "PoolersNotReady", "0/2".into()),
                Verdict::new(DEGRADED, false, "AsExpected", String::new()),
            ],
            Some(1),
            t(100),
        );
        assert_eq!(first[0].last_transition_time, Time(t(100)));
        let second = conditions(
            &first,
            &[
                Verdict::new(READY, true, "PoolersReady", "2/2".into()),
                Verdict::new(DEGRADED, false, "AsExpected", String::new()),
            ],
            Some(2),
            t(200),
        );
        assert_eq!(second[0].status, "True");
        assert_eq!(second[0].last_transition_time, Time(t(200)));
        assert_eq!(second[1].last_transition_time, Time(t(100)));
        assert_eq!(second[1].observed_generation, Some(2));
        assert_eq!(second[0].message, "2/2");
        // A verdict on one condition leaves the others alone.
        let third = conditions(
            &second,
            &[Verdict::new(DEGRADED, true, "ApplyFailed", "boom".into())],
            Some(2),
            t(300),
        );
        assert_eq!(third.len(), 2);
        assert_eq!(
            (third[0].type_.as_str(), third[0].status.as_str()),
            (READY, "True")
        );
        assert_eq!(third[1].last_transition_time, Time(t(300)));
    }

    #[test]
    fn patch_names_the_kind() {
        let p = patch(&PoolConfigStatus {
            applied_pool_size: Some(3),
            ..PoolConfigStatus::default()
        });
        assert_eq!(p["kind"], "PoolConfig");
        assert_eq!(p["status"]["appliedPoolSize"], 3);
    }
}
