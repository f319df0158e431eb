//! What each running pooler reports: the operator asks every running pooler pod's admin
//! port (`GET /status`) which config it has loaded (`config_hash`), so that `Ready` means
//! "loaded", not "written", and which settings beyond 0.1.0's it reads (`capabilities`),
//! before writing one of those for every pooler of a PoolConfig. A ConfigMap change reaches a
//! pod's volume only after the kubelet's sync (up to about a minute), and a pooler refuses a
//! file it cannot load; both show here.

use std::time::Duration;

use futures_util::{stream, StreamExt};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::render::{mounts_admin_secret, Readers, ADMIN_PORT};
use crate::config::Secret;

/// How long one pooler may take to answer.
const TIMEOUT: Duration = Duration::from_secs(2);
/// The most of an answer read (`/status` lists pools: small, but not a peer's to decide).
const MAX_ANSWER: u64 = 256 * 1024;
/// Poolers asked at once.
const PARALLEL: usize = 16;

/// How many running poolers have loaded a config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Loaded {
    /// Running pooler pods asked (terminating and not yet started ones are not).
    pub asked: usize,
    /// Of those, the ones whose loaded config is the current one.
    pub current: usize,
}

impl Loaded {
    pub fn all(&self) -> bool {
        self.current == self.asked
    }
}

/// One pooler's answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Report {
    hash: Option<String>,
    capabilities: Vec<String>,
}

/// What the pooler pods of a PoolConfig report.
#[derive(Debug, Default)]
pub struct Reports {
    /// One per running pod not being deleted: `None` where its pooler did not answer.
    answers: Vec<Option<Report>>,
    /// Pods whose pooler keeps failing to start.
    failing: usize,
}

/// The admin Secret's name and token: sent as `Authorization: Bearer` to the pods that mount
/// that Secret.
pub type Credential<'a> = Option<(&'a str, &'a Secret)>;

impl Reports {
    /// Asks the running pods among `pods`, and looks at the others' pooler containers.
    pub async fn ask(pods: &[Pod], admin: Credential<'_>) -> Reports {
        let failing = pods.iter().filter(|p| failing(p)).count();
        let asks = pods.iter().filter_map(|p| {
            let token = admin
                .filter(|(name, _)| mounts_admin_secret(p, name))
                .map(|(_, t)| t.expose().to_owned());
            target(p).map(|(ip, port)| (ip, port, token))
        });
        // Owned items: a borrowed token in the stream makes the reconcile future not `Send`
        // for every lifetime, as the controller needs.
        let asks: Vec<(String, u16, Option<String>)> = asks.collect();
        let answers = stream::iter(asks)
            .map(|(ip, port, token)| async move { status(&ip, port, token.as_deref()).await })
            .buffer_unordered(PARALLEL)
            .collect()
            .await;
        Reports { answers, failing }
    }

    /// How many have loaded config `hash`.
    pub fn loaded(&self, hash: &str) -> Loaded {
        let current = self.answers.iter().flatten();
        Loaded {
            asked: self.answers.len(),
            current: current.filter(|r| r.hash.as_deref() == Some(hash)).count(),
        }
    }

    /// Which of them read `setting`.
    pub fn readers(&self, setting: &str) -> Readers {
        let answered = self.answers.iter().flatten();
        let reading = answered
            .clone()
            .filter(|r| r.capabilities.iter().any(|c| c == setting))
            .count();
        Readers {
            asked: self.answers.len(),
            reading,
            older: answered.count() - reading,
            failing: self.failing,
        }
    }
}

/// The address of a pod's pooler admin port, if the pod is running and not being deleted
/// (a draining pooler keeps what it had).
fn target(pod: &Pod) -> Option<(String, u16)> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let status = pod.status.as_ref()?;
    if status.phase.as_deref() != Some("Running") {
        return None;
    }
    let ip = status.pod_ip.clone()?;
    Some((ip, admin_port(pod)))
}

/// The container port named `admin` (operator-deployed poolers) or `pooler-admin` (the chart's
/// sidecar), else the pooler's default.
fn admin_port(pod: &Pod) -> u16 {
    let spec = pod.spec.iter();
    spec.flat_map(|s| {
        s.containers
            .iter()
            .chain(s.init_containers.iter().flatten())
    })
    .flat_map(|c| c.ports.iter().flatten())
    .find(|p| admin_named(p))
    .and_then(|p| u16::try_from(p.container_port).ok())
    .unwrap_or(ADMIN_PORT)
}

/// A pod not being deleted whose pooler container (the one with the admin port; any, when
/// none is named) has restarted and is not running: crash-looping, perhaps refusing its file.
/// A pod stays Pending while a native sidecar (an init container) cannot start.
fn failing(pod: &Pod) -> bool {
    if pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let pooler = pooler_container(pod);
    let Some(status) = pod.status.as_ref() else {
        return false;
    };
    let all = status.container_statuses.iter().flatten();
    all.chain(status.init_container_statuses.iter().flatten())
        .filter(|c| pooler.map_or(true, |name| c.name == name))
        .any(restarting)
}

fn restarting(c: &ContainerStatus) -> bool {
    let state = c.state.as_ref();
    let running = state.is_some_and(|s| s.running.is_some());
    let exited = state.is_some_and(|s| s.terminated.is_some());
    !running && (c.restart_count > 0 || exited)
}

/// The name of the container with the `admin` or `pooler-admin` port.
fn pooler_container(pod: &Pod) -> Option<&str> {
    let spec = pod.spec.as_ref()?;
    let all = spec.containers.iter();
    all.chain(spec.init_containers.iter().flatten())
        .find(|c| c.ports.iter().flatten().any(admin_named))
        .map(|c| c.name.as_str())
}

fn admin_named(p: &k8s_openapi::api::core::v1::ContainerPort) -> bool {
    matches!(p.name.as_deref(), Some("admin" | "pooler-admin"))
}

/// One pooler's `/status`; `None` if it cannot be asked.
async fn status(ip: &str, port: u16, token: Option<&str>) -> Option<Report> {
    let host = if ip.contains(':') {
        format!("[{ip}]")
    } else {
        ip.to_owned()
    };
    let ask = async {
        let mut s = TcpStream::connect((ip, port)).await.ok()?;
        let auth = token.map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"));
        let req = format!(
            "GET /status HTTP/1.0\r\nHost: {host}:{port}\r\n{auth}Connection: close\r\n\r\n"
        );
        s.write_all(req.as_bytes()).await.ok()?;
        let mut answer = Vec::new();
        s.take(MAX_ANSWER).read_to_end(&mut answer).await.ok()?;
        Some(answer)
    };
    let answer = tokio::time::timeout(TIMEOUT, ask).await.ok()??;
    parse(&answer)
}

/// A 200 answer's `config_hash` and `capabilities` (a 0.1.0 pooler has neither).
fn parse(answer: &[u8]) -> Option<Report> {
    let split = answer.windows(4).position(|w| w == b"\r\n\r\n")?;
    let (head, body) = (&answer[..split], &answer[split + 4..]);
    let status_line = head.split(|b| *b == b'\n').next()?;
    if !status_line.windows(5).any(|w| w == b" 200 ") {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let strings = v.get("capabilities").and_then(|c| c.as_array());
    Some(Report {
        hash: v
            .get("config_hash")
            .and_then(|h| h.as_str())
            .map(str::to_owned),
        capabilities: strings
            .into_iter()
            .flatten()
            .filter_map(|c| c.as_str().map(str::to_owned))
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_and_capabilities_come_from_a_200_status_only() {
        let ok = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n\
                   {\"config_hash\":\"ab12\",\"capabilities\":[\"pool.max_db_connections\"]}";
        let r = parse(ok).unwrap();
        assert_eq!(r.hash.as_deref(), Some("ab12"));
        assert_eq!(r.capabilities, ["pool.max_db_connections"]);
        // A 0.1.0 pooler: an answer, with neither.
        let old = b"HTTP/1.1 200 OK\r\n\r\n{\"config_generation\":1}";
        assert_eq!(parse(old), Some(Report::default()));
        let err = b"HTTP/1.1 503 Service Unavailable\r\n\r\n{\"config_hash\":\"ab12\"}";
        assert_eq!(parse(err), None);
        assert_eq!(parse(b"garbage"), None);
        let reports = Reports {
            answers: vec![parse(ok), parse(old), None],
            failing: 1,
        };
        assert_eq!(
            reports.loaded("ab12"),
            Loaded {
                asked: 3,
                current: 1
            }
        );
        let readers = reports.readers("pool.max_db_connections");
        assert_eq!((readers.asked, readers.reading, readers.older), (3, 1, 1));
        assert_eq!(readers.failing, 1);
    }

    /// A pooler container that restarted and is not running fails (in a Pending pod too, as
    /// a native sidecar); another container's restarts, or a first start, do not.
    #[test]
    fn a_crash_looping_pooler_container_is_failing() {
        let pod = |restarts: i32, state: serde_json::Value, deleting: bool| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p", "deletionTimestamp":
                    if deleting { serde_json::json!("2026-01-01T00:00:00Z") } else { serde_json::Value::Null }},
                "spec": {"containers": [{"name": "app"}],
                         "initContainers": [{"name": "pooler", "restartPolicy": "Always",
                                             "ports": [{"name": "pooler-admin", "containerPort": 9127}]}]},
                "status": {"phase": "Pending",
                    "containerStatuses": [{"name": "app", "restartCount": 9, "ready": false, "image": "a",
                                           "imageID": "", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}],
                    "initContainerStatuses": [{"name": "pooler", "restartCount": restarts, "ready": false,
                                               "image": "p", "imageID": "", "state": state}]}
            }))
            .unwrap()
        };
        let backoff = serde_json::json!({"waiting": {"reason": "CrashLoopBackOff"}});
        let exited = serde_json::json!({"terminated": {"exitCode": 2}});
        let creating = serde_json::json!({"waiting": {"reason": "ContainerCreating"}});
        let running = serde_json::json!({"running": {}});
        assert!(failing(&pod(3, backoff.clone(), false)));
        assert!(failing(&pod(0, exited, false)));
        assert!(!failing(&pod(0, creating, false)));
        assert!(!failing(&pod(3, running, false)));
        assert!(!failing(&pod(3, backoff, true)));
    }

    /// The token goes to a pod that mounts the admin Secret, and to no other.
    #[tokio::test]
    async fn the_token_goes_only_to_pods_that_mount_the_admin_secret() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = tokio::spawn(async move {
            let mut heads = Vec::new();
            for _ in 0..2 {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut buf = vec![0u8; 4096];
                let n = s.read(&mut buf).await.unwrap();
                heads.push(String::from_utf8_lossy(&buf[..n]).into_owned());
                let body = b"{\"config_hash\":\"h\"}";
                let head = "HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n";
                s.write_all(head.as_bytes()).await.unwrap();
                s.write_all(body).await.unwrap();
            }
            heads
        });
        let pod = |mounted: bool| -> Pod {
            let volume = if mounted {
                serde_json::json!([{"name": "a", "secret": {"secretName": "w-admin"}}])
            } else {
                serde_json::json!([])
            };
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p"},
                "spec": {"containers": [{"name": "c",
                    "ports": [{"name": "pooler-admin", "containerPort": port}],
                    "volumeMounts": [{"name": "a", "mountPath": crate::operator::render::ADMIN_DIR}]}],
                    "volumes": volume},
                "status": {"phase": "Running", "podIP": "127.0.0.1"}
            }))
            .unwrap()
        };
        let token = Secret::new("t".repeat(64));
        let r = Reports::ask(&[pod(true)], Some(("w-admin", &token))).await;
        assert_eq!(r.loaded("h").current, 1);
        Reports::ask(&[pod(false)], Some(("w-admin", &token))).await;
        let heads = seen.await.unwrap();
        let bearer = format!("Authorization: Bearer {}\r\n", "t".repeat(64));
        assert!(heads[0].contains(&bearer), "{}", heads[0]);
        assert!(!heads[1].contains("Authorization"), "{}", heads[1]);
    }

    #[test]
    fn only_running_pods_not_being_deleted_are_asked() {
        let pod = |phase: &str, deleting: bool| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p", "deletionTimestamp":
                    if deleting { serde_json::json!("2026-01-01T00:00:00Z") } else { serde_json::Value::Null }},
                "spec": {"containers": [{"name": "c", "ports": [{"name": "pooler-admin", "containerPort": 9200}]}]},
                "status": {"phase": phase, "podIP": "10.0.0.7"}
            }))
            .unwrap()
        };
        assert_eq!(
            target(&pod("Running", false)),
            Some(("10.0.0.7".into(), 9200))
        );
        assert_eq!(target(&pod("Pending", false)), None);
        assert_eq!(target(&pod("Running", true)), None);
    }
}
