//! Admission of connections that have not logged in yet: at most `max_pending` in all and
//! `max_per_ip` from one address, so sockets that never finish their startup cannot take the
//! slots real clients need. Beyond either cap the oldest pending login (of that address, or
//! of all) is ended to make room, never the newcomer: a flood only evicts itself, even one
//! from the real clients' own address (every client of a sidecar comes from 127.0.0.1).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio_util::sync::CancellationToken;

/// How many older pending logins an admission ended, by which cap.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Evicted {
    /// Ended by `max_per_ip`: the oldest of the same address.
    pub per_ip: usize,
    /// Ended by `max_pending`: the oldest of all.
    pub total: usize,
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    /// Pending logins by arrival: the first is the oldest.
    by_age: BTreeMap<u64, (IpAddr, CancellationToken)>,
    /// Each address's pending logins, oldest first.
    per_ip: HashMap<IpAddr, BTreeSet<u64>>,
}

/// The pending logins of one listener.
#[derive(Debug, Default)]
pub struct PendingLogins {
    state: Mutex<State>,
}

/// One admitted login; dropping it (login done, failed or abandoned) frees its slot.
#[derive(Debug)]
pub struct Pending {
    logins: Arc<PendingLogins>,
    id: u64,
    /// Fired when a newer login needed the slot: the login ends with 53300.
    evicted: CancellationToken,
}

impl Pending {
    /// Completes when this login was ended to make room for a newer one.
    pub async fn evicted(&self) {
        self.evicted.cancelled().await
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.logins.lock().remove(self.id);
    }
}

impl State {
    /// Forgets login `id`; returns its token if it was still pending.
    fn remove(&mut self, id: u64) -> Option<CancellationToken> {
        let (ip, token) = self.by_age.remove(&id)?;
        if let Some(ids) = self.per_ip.get_mut(&ip) {
            ids.remove(&id);
            if ids.is_empty() {
                self.per_ip.remove(&ip);
            }
        }
        Some(token)
    }

    /// Ends login `id` (its own task tells its client why).
    fn evict(&mut self, id: u64) -> bool {
        self.remove(id).map(|t| t.cancel()).is_some()
    }
}

impl PendingLogins {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admits a connection from `ip`, ending older pending logins where a cap is reached:
    /// first the oldest of the same address (`max_per_ip`), then the oldest of all
    /// (`max_pending`). Returns the admission and what it ended (each told 53300 by its own
    /// task).
    pub fn admit(
        self: &Arc<Self>,
        ip: IpAddr,
        max_pending: usize,
        max_per_ip: usize,
    ) -> (Pending, Evicted) {
        let mut st = self.lock();
        let mut evicted = Evicted::default();
        while st.per_ip.get(&ip).map_or(0, BTreeSet::len) >= max_per_ip.max(1) {
            let oldest = st.per_ip.get(&ip).and_then(|ids| ids.first().copied());
            match oldest {
                Some(id) if st.evict(id) => evicted.per_ip += 1,
                _ => break,
            }
        }
        while st.by_age.len() >= max_pending.max(1) {
            let oldest = st.by_age.first_key_value().map(|(&id, _)| id);
            match oldest {
                Some(id) if st.evict(id) => evicted.total += 1,
                _ => break,
            }
        }
        st.next += 1;
        let id = st.next;
        let token = CancellationToken::new();
        st.by_age.insert(id, (ip, token.clone()));
        st.per_ip.entry(ip).or_default().insert(id);
        let pending = Pending {
            logins: self.clone(),
            id,
            evicted: token,
        };
        (pending, evicted)
    }

    /// Logins pending now.
    pub fn len(&self) -> usize {
        self.lock().by_age.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(n: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, n])
    }

    /// Over the per-address cap the oldest login of that address is ended, not the
    /// newcomer, and no other address's.
    #[test]
    fn per_address_cap_ends_that_address_oldest() {
        let logins = Arc::new(PendingLogins::default());
        let (a, _) = logins.admit(ip(2), 10, 2);
        let (c, _) = logins.admit(ip(3), 10, 2);
        let (b, _) = logins.admit(ip(2), 10, 2);
        let (d, evicted) = logins.admit(ip(2), 10, 2);
        assert_eq!(
            evicted,
            Evicted {
                per_ip: 1,
                total: 0
            }
        );
        assert!(a.evicted.is_cancelled(), "the address's oldest goes");
        assert!(!b.evicted.is_cancelled() && !d.evicted.is_cancelled());
        assert!(!c.evicted.is_cancelled(), "another address is not touched");
        assert_eq!(logins.len(), 3);
        drop(a);
        assert_eq!(logins.len(), 3, "an ended login's drop frees nothing twice");
        drop((b, c, d));
        assert!(logins.is_empty());
        assert!(logins.lock().per_ip.is_empty());
    }

    #[test]
    fn total_cap_ends_the_oldest_login() {
        let logins = Arc::new(PendingLogins::default());
        let (first, _) = logins.admit(ip(2), 2, 10);
        let (second, _) = logins.admit(ip(3), 2, 10);
        let (third, evicted) = logins.admit(ip(4), 2, 10);
        assert_eq!(
            evicted,
            Evicted {
                per_ip: 0,
                total: 1
            }
        );
        assert!(first.evicted.is_cancelled());
        assert!(!second.evicted.is_cancelled() && !third.evicted.is_cancelled());
        assert_eq!(logins.len(), 2);
        drop(first);
        assert_eq!(logins.len(), 2);
        assert_eq!(logins.lock().per_ip.get(&ip(2)), None);
        drop((second, third));
        assert!(logins.is_empty());
    }

    /// A flood from one address, then a newcomer from it: admitted, and the flood holds no
    /// more than its cap.
    #[test]
    fn a_flood_from_one_address_evicts_only_itself() {
        let logins = Arc::new(PendingLogins::default());
        let flood: Vec<_> = (0..1500)
            .map(|_| logins.admit(ip(1), 1024, 512).0)
            .collect();
        let live = flood.iter().filter(|p| !p.evicted.is_cancelled()).count();
        assert_eq!(live, 512);
        let (real, _) = logins.admit(ip(1), 1024, 512);
        assert!(!real.evicted.is_cancelled());
        assert_eq!(logins.len(), 512);
    }
}
