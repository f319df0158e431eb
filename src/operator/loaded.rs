//! Which config each pooler has loaded: the operator asks every running pooler pod's admin
//! port (`GET /status`, field `config_hash`) so that `Ready` means "loaded", not "written".
//! A ConfigMap change reaches a pod's volume only after the kubelet's sync (up to about a
//! minute), and a pooler refuses a file it cannot load; both show here.

use std::time::Duration;

use futures_util::{stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::render::ADMIN_PORT;

/// How long one pooler may take to answer.
const TIMEOUT: Duration = Duration::from_secs(2);
/// The most of an answer read (`/status` lists pools: small, but not a peer's to decide).
const MAX_ANSWER: u64 = 256 * 1024;
/// Poolers asked at once.
const PARALLEL: usize = 16;

/// What the running poolers of a PoolConfig report.
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

/// Asks the running pods among `pods` which config they have loaded, and counts those on
/// `hash`.
pub async fn check(pods: &[Pod], hash: &str) -> Loaded {
    let targets: Vec<(String, u16)> = pods.iter().filter_map(target).collect();
    let asked = targets.len();
    let current = stream::iter(targets)
        .map(|(ip, port)| async move { pooler_hash(&ip, port).await })
        .buffer_unordered(PARALLEL)
        .filter(|h| std::future::ready(h.as_deref() == Some(hash)))
        .count()
        .await;
    Loaded { asked, current }
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
    .find(|p| matches!(p.name.as_deref(), Some("admin" | "pooler-admin")))
    .and_then(|p| u16::try_from(p.container_port).ok())
    .unwrap_or(ADMIN_PORT)
}

/// `config_hash` from one pooler's `/status`; `None` if it cannot be asked or says none.
async fn pooler_hash(ip: &str, port: u16) -> Option<String> {
    let host = if ip.contains(':') {
        format!("[{ip}]")
    } else {
        ip.to_owned()
    };
    let ask = async {
        let mut s = TcpStream::connect((ip, port)).await.ok()?;
        let req =
            format!("GET /status HTTP/1.0\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let mut answer = Vec::new();
        s.take(MAX_ANSWER).read_to_end(&mut answer).await.ok()?;
        Some(answer)
    };
    let answer = tokio::time::timeout(TIMEOUT, ask).await.ok()??;
    parse_hash(&answer)
}

fn parse_hash(answer: &[u8]) -> Option<String> {
    let split = answer.windows(4).position(|w| w == b"\r\n\r\n")?;
    let (head, body) = (&answer[..split], &answer[split + 4..]);
    let status_line = head.split(|b| *b == b'\n').next()?;
    if !status_line.windows(5).any(|w| w == b" 200 ") {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    v.get("config_hash")?.as_str().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_comes_from_a_200_status_only() {
        let ok =
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n{\"config_hash\":\"ab12\"}";
        assert_eq!(parse_hash(ok).as_deref(), Some("ab12"));
        let none = b"HTTP/1.1 200 OK\r\n\r\n{\"config_hash\":null}";
        assert_eq!(parse_hash(none), None);
        let err = b"HTTP/1.1 503 Service Unavailable\r\n\r\n{\"config_hash\":\"ab12\"}";
        assert_eq!(parse_hash(err), None);
        assert_eq!(parse_hash(b"garbage"), None);
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
