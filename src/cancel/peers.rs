//! Cancel requests across pooler replicas (PgBouncer's `[peers]` idea). Behind a Service a
//! CancelRequest lands on any replica; the key says which one issued it, and a replica that
//! did not forwards it there, once.
//!
//! A key's process id, as issued, is `peer << 16 | r` with `r` 16 random bits (bit 30 clear,
//! positive as PostgreSQL's); the secret is 32 random bits, so the peer number makes no key
//! easier to guess. A forwarded request carries bit 30 set: its receiver serves it from its
//! own clients or drops it, and never forwards it again, so a request takes one hop at most
//! whatever the peers' configurations say. Forwarding is bounded by [`FORWARD_TIMEOUT`].

use std::time::Duration;

use rand::Rng;

use crate::config::Config;

/// Set in the process id of a forwarded request.
pub const FORWARDED: i32 = 1 << 30;
/// Where the peer number starts in a process id.
const PEER_SHIFT: u32 = 16;
/// The longest a forward may take (connect and send).
pub(super) const FORWARD_TIMEOUT: Duration = Duration::from_millis(500);

/// A process id for a new client's key: this pooler's `peer` number and random bits; without
/// a peer number, 30 random bits.
pub fn issue_pid(peer: u16, rng: &mut impl Rng) -> i32 {
    if peer == 0 {
        return rng.gen_range(1..FORWARDED);
    }
    (i32::from(peer) << PEER_SHIFT) | rng.gen_range(0..1 << PEER_SHIFT)
}

/// The peer number a process id carries (0: none).
pub fn peer_of(pid: i32) -> u16 {
    ((pid & !FORWARDED) >> PEER_SHIFT) as u16 & crate::config::MAX_PEER_ID
}

/// Where a CancelRequest goes.
#[derive(Debug, PartialEq, Eq)]
pub enum Route<'a> {
    /// One of this pooler's keys, or nobody's: look it up here only.
    Here,
    /// Another peer issued it: forward it there, marked.
    Peer(&'a str),
}

/// The route of a request for `pid` that is not one of this pooler's clients, by `cfg`.
pub fn route<'a>(cfg: &'a Config, own: u16, pid: i32) -> Route<'a> {
    if pid & FORWARDED != 0 || own == 0 {
        return Route::Here;
    }
    let peer = peer_of(pid);
    if peer == own {
        return Route::Here;
    }
    match cfg.peers.iter().find(|p| p.id == peer) {
        Some(p) => Route::Peer(&p.address),
        None => Route::Here,
    }
}

/// This pooler's peer number: `peer_id`, else the id of the `peers` entry named after this
/// host (a pod's name), else 0.
pub fn own_peer_id(cfg: &Config, hostname: Option<&str>) -> u16 {
    if cfg.peer_id != 0 {
        return cfg.peer_id;
    }
    let Some(host) = hostname else {
        return 0;
    };
    cfg.peers
        .iter()
        .find(|p| p.name.as_deref() == Some(host))
        .map_or(0, |p| p.id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PeerConfig;

    fn peers(ids: &[u16]) -> Config {
        Config {
            peers: ids
                .iter()
                .map(|&id| PeerConfig {
                    id,
                    address: format!("10.0.0.{id}:6432"),
                    name: Some(format!("pod-{id}")),
                })
                .collect(),
            ..Config::default()
        }
    }

    /// Issued ids carry the peer number, stay positive and never look forwarded.
    #[test]
    fn issued_ids_carry_the_peer() {
        let mut rng = rand::thread_rng();
        for peer in [0, 1, 2, 255, crate::config::MAX_PEER_ID] {
            for _ in 0..1000 {
                let pid = issue_pid(peer, &mut rng);
                assert!(pid > 0 && pid & FORWARDED == 0, "{pid:#x}");
                if peer != 0 {
                    assert_eq!(peer_of(pid), peer);
                }
            }
        }
    }

    /// A key from another known peer goes there once; a forwarded one, one of this pooler's
    /// own, one of an unknown peer, or any key when this pooler has no number, stays here.
    #[test]
    fn routes_take_one_hop_at_most() {
        let cfg = peers(&[1, 2]);
        let mut rng = rand::thread_rng();
        let from2 = issue_pid(2, &mut rng);
        assert_eq!(route(&cfg, 1, from2), Route::Peer("10.0.0.2:6432"));
        assert_eq!(route(&cfg, 1, from2 | FORWARDED), Route::Here);
        assert_eq!(route(&cfg, 2, from2), Route::Here);
        assert_eq!(route(&cfg, 1, issue_pid(3, &mut rng)), Route::Here);
        assert_eq!(route(&cfg, 0, from2), Route::Here);
        // A forwarded request for peer 2 reaching peer 1 (a stale peer list) is not passed on.
        assert_eq!(route(&cfg, 1, from2 | FORWARDED), Route::Here);
    }

    #[test]
    fn own_number_from_the_setting_or_the_host_name() {
        let mut cfg = peers(&[1, 7]);
        assert_eq!(own_peer_id(&cfg, Some("pod-7")), 7);
        assert_eq!(own_peer_id(&cfg, Some("elsewhere")), 0);
        assert_eq!(own_peer_id(&cfg, None), 0);
        cfg.peer_id = 3;
        assert_eq!(own_peer_id(&cfg, Some("pod-7")), 3);
    }
}
