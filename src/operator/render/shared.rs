//! Rendering what a shared pooler needs: the limits and per-user overrides of the spec, and
//! the peer list of a deployment's pods (for cancel forwarding). Peer ids are derived from pod
//! names, so they stay the same for a pod's life whatever else comes and goes.

use crate::config::{self, Config, PeerConfig, UserConfig, MAX_PEER_ID};
use crate::operator::crd::{self, PoolConfigSpec};

use super::failover::pool_mode as mode;
use super::{duration, RenderError, PG_PORT};

/// A pooler pod that can take forwarded cancel requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerPod {
    pub name: String,
    /// The pod's IP address.
    pub ip: String,
    /// Creation time (seconds since the epoch), which orders pods whose ids collide: the
    /// older keeps its own.
    pub created: i64,
}

/// Limits and `users:` from the spec.
pub(super) fn limits(c: &mut Config, spec: &PoolConfigSpec) -> Result<(), RenderError> {
    let l = spec.limits.clone().unwrap_or_default();
    let n = |v: Option<u32>| v.map(|v| v as usize);
    if let Some(v) = n(l.max_db_connections) {
        c.pool.max_db_connections = v;
    }
    if let Some(v) = n(l.max_user_connections) {
        c.pool.max_user_connections = v;
    }
    if let Some(v) = n(l.max_client_connections_per_user) {
        c.client.max_user_connections = v;
    }
    if let Some(v) = n(l.reserve_pool_size) {
        c.pool.reserve_size = v;
    }
    if let Some(d) = duration("spec.limits.reservePoolTimeout", &l.reserve_pool_timeout)? {
        c.pool.reserve_timeout = d;
    }
    for (name, u) in spec.users.iter().flatten() {
        c.users.insert(
            name.clone(),
            UserConfig {
                pool_size: n(u.pool_size),
                mode: u.mode.map(mode),
                max_user_connections: n(u.max_user_connections),
                session_state: super::session_state("spec.users.*.sessionState", &u.session_state)?,
                reset_query_always: u.reset_query_always,
            },
        );
    }
    Ok(())
}

/// The peer id a pod's name hashes to (1 to `MAX_PEER_ID`).
pub fn peer_id_of(pod: &str) -> u16 {
    let h = u64::from_str_radix(&config::fnv1a_hex(pod.as_bytes()), 16).unwrap_or(0);
    (h % u64::from(MAX_PEER_ID)) as u16 + 1
}

/// `peers:` for these pods: each pod's id is its name's hash, or (when an older pod holds
/// that id) the next free one. Ordered by id.
pub fn peers(pods: &[PeerPod]) -> Vec<PeerConfig> {
    let mut by_age: Vec<&PeerPod> = pods.iter().collect();
    by_age.sort_by(|a, b| (&a.created, &a.name).cmp(&(&b.created, &b.name)));
    let mut taken = std::collections::BTreeMap::new();
    for pod in by_age {
        let mut id = peer_id_of(&pod.name);
        while taken.contains_key(&id) {
            id = id % MAX_PEER_ID + 1;
        }
        taken.insert(id, pod);
    }
    taken
        .into_iter()
        .map(|(id, pod)| PeerConfig {
            id,
            address: format!("{}:{PG_PORT}", bracketed(&pod.ip)),
            name: Some(pod.name.clone()),
        })
        .collect()
}

/// An IPv6 address in brackets, so `host:port` stays unambiguous.
fn bracketed(ip: &str) -> String {
    if ip.contains(':') {
        format!("[{ip}]")
    } else {
        ip.to_owned()
    }
}

/// Whether the spec asks for peers (a deployment with `cancelForwarding`).
pub fn wants_peers(spec: &PoolConfigSpec) -> bool {
    matches!(&spec.target, crd::Target::Deployment(t) if t.cancel_forwarding)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, created: i64) -> PeerPod {
        PeerPod {
            name: name.into(),
            ip: "10.1.2.3".into(),
            created,
        }
    }

    fn spec(yaml: &str) -> PoolConfigSpec {
        let value: serde_json::Value = serde_yaml::from_str(yaml).expect("test YAML parses");
        serde_json::from_value(value).expect("test spec parses")
    }

    /// A shared pooler for several roles without plaintext passwords: verifiers from a
    /// Secret, no server password (passthrough). The new settings are written only when the
    /// spec uses them, and the pooler accepts what is written.
    #[test]
    fn shared_pooler_settings_render_only_when_used() {
        let pods = [PeerPod {
            name: "orders-7d9f-abcde".into(),
            ip: "10.0.0.7".into(),
            created: 1,
        }];
        let plain = "poolSize: 5\nserver: {host: db}\n\
                     clientAuth: {usersSecret: {name: verifiers}}\ntarget: {deployment: {}}\n";
        let r = super::super::render_with_peers(&spec(plain), 1, &pods).unwrap();
        for key in [
            "peers",
            "users:",
            "max_db",
            "max_user",
            "reserve",
            "password_file",
        ] {
            assert!(!r.yaml.contains(key), "{key} in\n{}", r.yaml);
        }
        let users = std::path::Path::new(super::super::CLIENT_USERS_DIR).join("userlist.txt");
        assert_eq!(r.config.auth.users_file.as_deref(), Some(users.as_path()));
        assert_eq!(r.config.auth.passwords_dir, None);
        let full = "poolSize: 5\nserver: {host: db}\n\
                    clientAuth: {usersSecret: {name: verifiers, key: list}}\n\
                    limits: {maxDbConnections: 40, maxUserConnections: 20, \
                    maxClientConnectionsPerUser: 500, reservePoolSize: 2, reservePoolTimeout: 3s}\n\
                    users: {reports: {poolSize: 2, mode: session, maxUserConnections: 4}}\n\
                    target: {deployment: {cancelForwarding: true}}\n";
        let r = super::super::render_with_peers(&spec(full), 1, &pods).unwrap();
        let loaded = Config::from_yaml(&r.yaml, "configmap".as_ref()).unwrap();
        loaded.validate().unwrap();
        assert_eq!(loaded.peers, peers(&pods));
        assert_eq!(loaded.peers[0].address, "10.0.0.7:6432");
        assert_eq!(
            loaded.peer_id, 0,
            "each pooler finds its own entry by its pod name"
        );
        let p = &loaded.pool;
        assert_eq!(
            (p.max_db_connections, p.max_user_connections, p.reserve_size),
            (40, 20, 2)
        );
        assert_eq!(p.reserve_timeout, std::time::Duration::from_secs(3));
        assert_eq!(loaded.client.max_user_connections, 500);
        let u = &loaded.users["reports"];
        assert_eq!(
            (u.pool_size, u.mode, u.max_user_connections),
            (Some(2), Some(config::PoolMode::Session), Some(4))
        );
    }

    /// Ids come from names, so adding or removing pods moves no other pod's id; a collision
    /// goes to the younger pod.
    #[test]
    fn peer_ids_are_stable_per_pod() {
        let a = pod("orders-7d9f-abcde", 1);
        let b = pod("orders-7d9f-fghij", 2);
        let both = peers(&[a.clone(), b.clone()]);
        let alone = peers(std::slice::from_ref(&b));
        let id = |ps: &[PeerConfig], n: &str| {
            ps.iter()
                .find(|p| p.name.as_deref() == Some(n))
                .map(|p| p.id)
        };
        assert_eq!(id(&both, &b.name), id(&alone, &b.name));
        assert_eq!(id(&both, &a.name), Some(peer_id_of(&a.name)));
        assert!(both.iter().all(|p| (1..=MAX_PEER_ID).contains(&p.id)));
        assert_eq!(both[0].address.split(':').nth(1), Some("6432"));
        // Find two names that collide and check the younger moves on.
        let mut names = (0..).map(|i| format!("p-{i}"));
        let first = names.next().unwrap();
        let clash = names.find(|n| peer_id_of(n) == peer_id_of(&first)).unwrap();
        let ps = peers(&[pod(&clash, 3), pod(&first, 1)]);
        assert_eq!(id(&ps, &first), Some(peer_id_of(&first)));
        assert_ne!(id(&ps, &clash), id(&ps, &first));
        let v6 = PeerPod {
            ip: "fd00::1".into(),
            ..a
        };
        assert_eq!(peers(&[v6])[0].address, "[fd00::1]:6432");
    }
}
